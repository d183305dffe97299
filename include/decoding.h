/* decoding.h - the decoding policy of one window, in one place for the
 * offline loop (engine/transcribe.c) and the streaming passes
 * (server/worker.c):
 *   - the suppression lists (non-speech symbols, special tokens, blank);
 *   - the prompt layout [<|startofprev|> context] <|sot|> [lang task]
 *     [<|notimestamps|>] [<|0.00|>] [prefix];
 *   - window padding of log-mel features to 30 s;
 *   - Whisper's no-speech rule;
 *   - the guardrails that decide whether a hypothesis may be used: zlib
 *     compression ratio, average log-probability, the repetition detector
 *     (repetition.h) and a bound on text tokens per second of audio;
 *   - temperature fallback while a hypothesis fails them.
 *
 * Ownership: a sotto_suppression owns its arrays (free with
 * sotto_suppression_free); everything else borrows.
 */
#ifndef SOTTO_DECODING_H
#define SOTTO_DECODING_H

#include "generate.h"
#include "repetition.h"

#define SOTTO_MAX_TEMPERATURES 16

/* ---- text ------------------------------------------------------------------ */

/* zlib compression ratio of text: len(text) / len(zlib.compress(text)). */
float sotto_compression_ratio(const char *text, size_t len);

/* Python's str.strip() for UTF-8: [*b, *e) is text without leading and
 * trailing Unicode whitespace. */
void sotto_strip_bounds(const char *text, size_t *b, size_t *e);

/* The text of tokens[0..n) (ids >= <|endoftext|> produce none); malloc'd. */
char *sotto_tokens_text(const sotto_model *m, const int32_t *tokens, int n, sotto_err *err);

/* ---- suppression ---------------------------------------------------------- */

typedef struct sotto_suppression {
    int32_t *suppress;         /* sorted ids never generated */
    int n_suppress;
    int32_t suppress_begin[2]; /* never first: the blank, <|endoftext|> */
    int n_suppress_begin;
} sotto_suppression;

/* faster-whisper's -1 list: symbols and speaker tags (sorted; the caller
 * frees *out). */
int sotto_non_speech_tokens(const sotto_model *model, int32_t **out, int *n, sotto_err *err);

/* non_speech: faster-whisper's -1 list (symbols, speaker tags); the special
 * tokens (task, sot, prev, lm, nospeech) are always suppressed; blank: the
 * space and <|endoftext|> may not come first. */
int sotto_suppression_init(sotto_suppression *s, const sotto_model *m, int non_speech, int blank,
                           sotto_err *err);
void sotto_suppression_free(sotto_suppression *s); /* accepts a zeroed struct */
/* Points g's suppression fields at s (which must outlive g's use). */
void sotto_suppression_apply(const sotto_suppression *s, sotto_generate_opts *g);

/* ---- prompt --------------------------------------------------------------- */

typedef struct sotto_prompt_spec {
    const int32_t *context;  /* earlier text; its last tokens are kept */
    int n_context;
    int32_t lang_token;      /* -1: none (English-only models) */
    int32_t task_token;      /* -1: none */
    int timestamps;          /* 0: the prompt ends in <|notimestamps|> before any prefix */
    const int32_t *prefix;   /* tokens forced after the task tokens */
    int n_prefix;
    int prefix_timestamp;    /* put <|0.00|> before the prefix */
    int min_room;            /* tokens that must stay free for generation */
} sotto_prompt_spec;

/* Writes the prompt to out[cap]; the context is cut to its last
 * n_text_ctx/2 - 1 tokens (Whisper's rule) and further so that min_room
 * tokens of the context stay free. Returns the length, or a negative
 * sotto_status if cap is too small. */
int sotto_prompt_build(const sotto_model *m, const sotto_prompt_spec *p, int32_t *out, int cap);

/* ---- features ------------------------------------------------------------- */

/* Copies frames [from, from + size) of mel (n_mels rows of `stride` frames)
 * into win (n_mels rows of SOTTO_N_FRAMES) and zero-pads the rest. */
void sotto_window_pad(const float *mel, int n_mels, size_t stride, size_t from, int size,
                      float *win);

/* 1 if samples[0..n) hold no signal at all (peak below -80 dBFS): digital
 * silence, decoded by nobody. */
int sotto_audio_is_silent(const float *samples, size_t n);

/* ---- guardrails ------------------------------------------------------------ */

typedef struct sotto_guard_opts {
    float compression_ratio_threshold; /* <= 0 disables (2.4) */
    float log_prob_threshold;          /* NAN disables (-1) */
    float no_speech_threshold;         /* NAN disables (0.6) */
    int repetition;                    /* the repetition detector (1) */
    float max_tokens_per_s;            /* text tokens per second of audio; <= 0 disables (10) */
    int max_tokens_base;               /* ... plus this many (16) */
} sotto_guard_opts;

sotto_guard_opts sotto_guard_default_opts(void);

/* Why a hypothesis failed (bits of sotto_verdict.failed). */
enum {
    SOTTO_GUARD_COMPRESSION = 1, /* compression ratio above the threshold */
    SOTTO_GUARD_LOGPROB = 2,     /* average log-probability below the threshold */
    SOTTO_GUARD_REPETITION = 4,  /* the repetition detector fired */
    SOTTO_GUARD_TOO_LONG = 8     /* more text tokens than the audio can hold */
};

typedef struct sotto_verdict {
    int failed;              /* SOTTO_GUARD_* bits; 0 = usable */
    int silent;              /* Whisper's no-speech rule: nothing was said */
    float compression_ratio;
    sotto_repetition rep;    /* where a loop starts, if any */
    int max_tokens;          /* the bound for this audio (0: none) */
    int prior_tokens;        /* forced text tokens counted towards it */
} sotto_verdict;

/* The bound on text tokens for `seconds` of audio (0 when disabled). */
int sotto_guard_max_tokens(const sotto_guard_opts *o, double seconds);

/* Whisper's no-speech rule on a result. */
int sotto_guard_is_silent(const sotto_guard_opts *o, const sotto_generate_result *r);

/* Checks r (a hypothesis for `seconds` of audio, after `prior_tokens` text
 * tokens of the same audio that were forced as prefix; they count towards
 * the token bound). A silent window never fails: it is dropped instead. */
int sotto_guard_check(const sotto_model *m, const sotto_guard_opts *o,
                      const sotto_generate_result *r, double seconds, int prior_tokens,
                      sotto_verdict *v, sotto_err *err);

/* Cuts r's tokens where its loop begins (keeping the first copy) or at the
 * token bound, whichever comes first; r->ended becomes 0 when it cut. */
void sotto_guard_trim(const sotto_model *m, const sotto_verdict *v, sotto_generate_result *r);

/* ---- one window with fallback ------------------------------------------- */

typedef struct sotto_window_opts {
    sotto_generate_opts gen;   /* suppression, max initial timestamp, seed, on_token */
    int beam_size;             /* at temperature 0 */
    int best_of;               /* hypotheses sampled at temperature > 0 */
    float temperatures[SOTTO_MAX_TEMPERATURES];
    int n_temperatures;
    sotto_guard_opts guard;
} sotto_window_opts;

typedef struct sotto_window_result {
    sotto_generate_result res; /* owned: sotto_generate_result_free */
    float temperature;         /* of the attempt used */
    int attempts;              /* decodes run by this call */
    int all_failed;            /* every attempt failed; res is the least bad one, trimmed */
    sotto_verdict v;           /* the verdict of res before any trim */
} sotto_window_result;

/* Decodes the window encoded in st with temperatures[first..], stopping at
 * the first attempt that passes the guardrails (or is silent). When all
 * fail, the least bad attempt is used: the one with the fewest failures
 * left once its loop or overflow is cut (a loop explains a high
 * compression ratio too), then the best average log-probability
 * (faster-whisper's choice); it is reported with the last temperature and
 * cut by sotto_guard_trim. `seconds`: the audio in the window;
 * prior_tokens: see sotto_guard_check. `done`, if not NULL, is an attempt
 * the caller already made (the streaming worker's batched greedy pass,
 * with its verdict in done->v): it takes part in the choice, and the call
 * takes over its tokens. The state needs max(beam_size, best_of)
 * sequences. */
int sotto_window_decode(const sotto_model *m, sotto_workspace *ws, sotto_state *st,
                        const int32_t *prompt, int n_prompt, const sotto_window_opts *o,
                        double seconds, int prior_tokens, int first, sotto_window_result *done,
                        sotto_window_result *out, sotto_err *err);

#endif
