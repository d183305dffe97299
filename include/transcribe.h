/* transcribe.h - offline transcription of a whole recording, window by
 * window, the way Whisper's (and faster-whisper's) transcribe loop does it:
 * 30 s windows, timestamp-based seeking, previous text as prompt,
 * temperature fallback while a window fails the guardrails of decoding.h
 * (Whisper's compression-ratio and log-probability tests, sotto's
 * repetition detector and token bound), no-speech skipping, windows of
 * digital silence skipped, windows without speech skipped (with a Silero
 * VAD model), language detection on the first window.
 *
 * Ownership: a sotto_transcript owns its segments and their strings; free
 * it with sotto_transcript_free(). Options only borrow their pointers.
 */
#ifndef SOTTO_TRANSCRIBE_H
#define SOTTO_TRANSCRIBE_H

#include "decoding.h"

typedef struct sotto_segment {
    double start, end; /* seconds from the start of the audio */
    char *text;        /* UTF-8 as decoded (usually starts with a space) */
    int32_t *tokens;   /* including timestamp tokens */
    int n_tokens;
    float avg_logprob, no_speech_prob, temperature, compression_ratio;
} sotto_segment;

typedef struct sotto_transcript {
    sotto_segment *segments;
    int n_segments;
    char language[16];   /* language code ("en") */
    float language_prob; /* 1 when given or English-only */
    double duration;     /* seconds of audio */
} sotto_transcript;

typedef enum sotto_task { SOTTO_TASK_TRANSCRIBE = 0, SOTTO_TASK_TRANSLATE = 1 } sotto_task;

typedef struct sotto_transcribe_opts {
    const char *language; /* code, or NULL / "auto" to detect (multilingual models) */
    sotto_task task;
    int beam_size;        /* for temperature 0 */
    int best_of;          /* hypotheses sampled at temperature > 0 */
    float patience;
    float length_penalty;
    float temperatures[SOTTO_MAX_TEMPERATURES]; /* tried in order until one passes */
    int n_temperatures;
    float compression_ratio_threshold; /* <= 0 disables */
    float log_prob_threshold;          /* NAN disables */
    float no_speech_threshold;         /* NAN disables */
    int condition_on_previous_text;
    float prompt_reset_on_temperature;
    const char *initial_prompt; /* text given as previous context, or NULL */
    const char *prefix;         /* text forced at the start of the first window, or NULL */
    int suppress_blank;
    int suppress_non_speech;    /* suppress symbols/speaker tags (faster-whisper's -1) */
    int without_timestamps;
    float max_initial_timestamp;
    int max_new_tokens;         /* per window; 0 = no limit */
    int no_repetition_guard;    /* 1: none of sotto's guardrails beyond Whisper's
                                   (the repetition detector, the token bound) */
    /* With a Silero VAD model: a window in which it finds less than
       vad_min_speech_ms of speech (chunks with probability >= vad_threshold)
       is not decoded, so music, noise and silence give no text. The speech
       windows are decoded whole, as without it. */
    const struct sotto_silero_model *vad;
    float vad_threshold;        /* 0.5 */
    int vad_min_speech_ms;      /* 250 */
    uint64_t seed;
    /* Called for each segment as soon as it is final; return non-zero to stop. */
    int (*on_segment)(void *user, const sotto_segment *seg);
    /* Called after each window with seconds processed and total. */
    void (*on_progress)(void *user, double done, double total);
    void *user;
} sotto_transcribe_opts;

/* faster-whisper's defaults: beam 5, best_of 5, temperatures 0,0.2,..,1,
 * thresholds 2.4 / -1 / 0.6, previous text as prompt. */
sotto_transcribe_opts sotto_transcribe_default_opts(void);

/* Transcribes n samples of 16 kHz mono audio. */
int sotto_transcribe(const sotto_model *model, const float *samples, size_t n,
                     const sotto_transcribe_opts *opts, sotto_transcript *out, sotto_err *err);

void sotto_transcript_free(sotto_transcript *t); /* accepts NULL or a zeroed struct */

/* Language code of language index i ("en"), written to buf; 0 or error. */
int sotto_language_code(const sotto_model *model, int i, char *buf, size_t bufsz);
/* English name of a language code ("en" -> "english"); the code itself when
 * unknown. Never NULL (a static string, or code). */
const char *sotto_language_name(const char *code);
/* Index of a language given by code or English name ("de", "german"); -1 if unknown. */
int sotto_language_index(const sotto_model *model, const char *lang);

#endif
