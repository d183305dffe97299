/* vad.h - voice activity detection and endpointing on 16 kHz audio.
 *
 * Frame-level speech/non-speech decisions that hold up in noise: the
 * threshold follows an adaptive estimate of the noise floor rather than a
 * fixed energy level. On top of the frames, an endpointer turns decisions
 * into utterances:
 *   SPEECH_START  when speech has lasted min_speech_ms; the reported start
 *                 sample is pre-roll earlier than the first speech frame, so
 *                 word onsets are not clipped;
 *   SPEECH_END    after trailing silence of silence_ms; the reported end
 *                 sample is the end of the last speech frame plus a short
 *                 tail (tail_ms).
 * Sample positions are absolute: counted from the first sample pushed.
 * The decoder (stream/) decides what to do with utterances longer than a
 * window; the VAD only reports speech.
 *
 * One sotto_vad per session; cheap (a few microseconds per frame); not
 * thread-safe. No allocation after creation.
 */
#ifndef SOTTO_VAD_H
#define SOTTO_VAD_H

#include "sotto_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sotto_vad_params {
    int frame_ms;        /* analysis frame: 10, 20 or 30 (default 20) */
    float threshold_db;  /* speech when this far above the noise floor (default 2.5 dB) */
    int min_speech_ms;   /* speech needed before SPEECH_START (default 80) */
    int silence_ms;      /* trailing silence that ends an utterance (default 600) */
    int preroll_ms;      /* audio kept before the first speech frame (default 300) */
    int tail_ms;         /* audio kept after the last speech frame (default 300) */
} sotto_vad_params;

typedef enum sotto_vad_event_type {
    SOTTO_VAD_SPEECH_START = 1,
    SOTTO_VAD_SPEECH_END = 2
} sotto_vad_event_type;

typedef struct sotto_vad_event {
    sotto_vad_event_type type;
    uint64_t sample; /* absolute 16 kHz sample position (start incl. pre-roll; end incl. tail) */
} sotto_vad_event;

sotto_vad_params sotto_vad_default_params(void);

/* Checks ranges (frame_ms in {10,20,30}, 0 <= *_ms <= 10000, threshold
 * 0..40 dB); SOTTO_E_INVALID naming the field. */
int sotto_vad_params_check(const sotto_vad_params *p, sotto_err *err);

typedef struct sotto_vad sotto_vad;

sotto_vad *sotto_vad_create(const sotto_vad_params *p, sotto_err *err);
void sotto_vad_free(sotto_vad *v); /* accepts NULL */

/* Feeds n samples (any n; frames are assembled internally) and writes up
 * to cap events in order to ev, their count to *n_ev. Returns SOTTO_E_RANGE
 * if more events were due than cap (the rest are kept for the next call). */
int sotto_vad_push(sotto_vad *v, const float *x, size_t n, sotto_vad_event *ev, int cap,
                   int *n_ev);

/* End of stream: closes an open utterance (SPEECH_END at the last sample). */
int sotto_vad_finish(sotto_vad *v, sotto_vad_event *ev, int cap, int *n_ev);

int sotto_vad_in_speech(const sotto_vad *v);  /* inside an utterance */
float sotto_vad_noise_floor_db(const sotto_vad *v);

/* Frame decisions of the last pushed frames, for tests and benchmarks:
 * 1 if frame i (absolute frame index) was classified speech (before
 * endpointing smoothing). Keeps the last 4096 frames; -1 if older. */
int sotto_vad_frame_decision(const sotto_vad *v, uint64_t frame);

#endif
