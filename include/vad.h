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
 * Two kinds of frame decisions (sotto_vad_params.kind):
 *   SOTTO_VAD_ENERGY  (the default) the adaptive noise-floor detector of
 *                     vad.c, frames of frame_ms (10, 20 or 30 ms);
 *   SOTTO_VAD_SILERO  the Silero VAD network (silero.h) on 512-sample
 *                     (32 ms) chunks: speech when its probability is >=
 *                     speech_threshold, or >= neg_threshold while the
 *                     previous chunk was speech or an utterance is open
 *                     (hysteresis, as silero's get_speech_timestamps).
 *                     frame_ms and threshold_db are ignored.
 * The endpointer is the same for both; for SILERO, SPEECH_START needs
 * ceil(min_speech_ms / 32 ms) speech chunks in a row (at least 1). Before
 * it, the speaker-level gate (start_gate_db, end_gate_db) may turn a speech
 * frame into non-speech.
 *
 * One sotto_vad per session; not thread-safe. ENERGY: a few microseconds
 * per frame; SILERO: ~0.05 ms per 32 ms chunk on one core. No allocation
 * after creation.
 */
#ifndef SOTTO_VAD_H
#define SOTTO_VAD_H

#include "sotto_err.h"
#include "silero.h"

#include <stddef.h>
#include <stdint.h>

typedef enum sotto_vad_kind {
    SOTTO_VAD_ENERGY = 0, /* adaptive noise floor (default) */
    SOTTO_VAD_SILERO = 1  /* Silero VAD network */
} sotto_vad_kind;

typedef struct sotto_vad_params {
    int frame_ms;        /* analysis frame: 10, 20 or 30 (default 20) */
    float threshold_db;  /* speech when this far above the noise floor (default 2.5 dB) */
    int min_speech_ms;   /* speech needed before SPEECH_START (default 80) */
    int silence_ms;      /* trailing silence that ends an utterance (default 600) */
    int preroll_ms;      /* audio kept before the first speech frame (default 300) */
    int tail_ms;         /* audio kept after the last speech frame (default 300) */
    int kind;            /* a sotto_vad_kind (default SOTTO_VAD_ENERGY) */
    /* SOTTO_VAD_SILERO only: */
    float speech_threshold; /* speech when the probability is >= this (default 0.5) */
    float neg_threshold;    /* ... and, inside speech, while >= this (default 0.35) */
    const sotto_silero_model *silero; /* borrowed; must outlive the sotto_vad (default NULL) */
    /* The speaker's level (both kinds): the 90th percentile of the power
       (dBFS) of the frames taken as speech over the last 20 s. A speech frame
       more than start_gate_db below it cannot start an utterance (talkers in
       the background, a television across the room: the detector calls them
       speech, but they are not the person dictating). Inside an utterance, a
       speech frame more than end_gate_db below it counts as non-speech, so a
       pause of the speaker over babble ends the utterance after silence_ms.
       Neither applies until 0.5 s of speech is in the window (the first words,
       or after 20 s without speech). 0 turns either off; 0..60 dB.
       (defaults 15 and 0: docs/PERF.md "Speaker level gate") */
    float start_gate_db;
    float end_gate_db;
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

/* Checks ranges (0 <= *_ms <= 10000; kind ENERGY or SILERO; for ENERGY:
 * frame_ms in {10,20,30}, threshold_db 0..40 dB; for SILERO: silero not
 * NULL, 0 < speech_threshold <= 1, 0 <= neg_threshold <= speech_threshold;
 * both: start_gate_db and end_gate_db in 0..60);
 * SOTTO_E_INVALID naming the field. */
int sotto_vad_params_check(const sotto_vad_params *p, sotto_err *err);

typedef struct sotto_vad sotto_vad;

/* NULL p: the defaults. For SILERO, p->silero is borrowed (it must outlive
 * the sotto_vad); each sotto_vad has its own network state. */
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

/* Inside an utterance whose latest frames are not speech: the end of the
 * last speech frame + tail_ms into *end, which is the sample its SPEECH_END
 * will carry if no speech comes before silence_ms is reached (and silence_ms
 * >= tail_ms; else that event carries its own position), and the
 * milliseconds of non-speech frames so far (returned). -1 otherwise (no
 * utterance, or its latest frame is speech). A speculative final pass
 * (include/dictation.h) decodes up to that end before the VAD decides. */
int sotto_vad_pending_end(const sotto_vad *v, uint64_t *end);
float sotto_vad_noise_floor_db(const sotto_vad *v); /* ENERGY; -140 for SILERO */

/* Samples per frame: 16 * frame_ms for ENERGY, 512 (SOTTO_SILERO_CHUNK)
 * for SILERO. Frame i covers samples [i * n, (i + 1) * n); 0 for NULL. */
int sotto_vad_frame_samples(const sotto_vad *v);

/* Frame decisions of the last pushed frames, for tests and benchmarks:
 * 1 if frame i (absolute frame index) was classified speech (before
 * endpointing smoothing; for SILERO after the hysteresis). Keeps the last
 * 4096 frames; -1 if older. */
int sotto_vad_frame_decision(const sotto_vad *v, uint64_t frame);

/* Speech probability of frame i (the same last 4096 frames; -1 if older or
 * not pushed yet): the network's output for SILERO, 1 or 0 (the decision)
 * for ENERGY. */
float sotto_vad_frame_prob(const sotto_vad *v, uint64_t frame);

#endif
