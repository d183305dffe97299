/* start_parse.h - the checks of the native protocol's `start` and `resume`
 * messages (docs/PROTOCOL.md) as pure functions: no session, no socket, no
 * lock. srv_session_start (control.c) and conn_v1.c's resume call them, then apply the result (model
 * lookup, feed claim, audio decoder, session state); fuzz/fuzz_start.c calls
 * them on arbitrary JSON. */
#ifndef SOTTO_START_PARSE_H
#define SOTTO_START_PARSE_H

#include "server.h"

#include <stddef.h>
#include <stdint.h>

#define SRV_PROMPT_MAX 2000 /* bytes of a start's prompt */

/* A valid start message, every field in range; strings NUL-terminated. */
typedef struct srv_start {
    sotto_encoding encoding;
    int sample_rate;          /* 8000..48000 */
    int channels;             /* 1..2 */
    sotto_wfmt weights;       /* parsed and offered by the server */
    int has_model;            /* "model" given (else the default) */
    char model[96];           /* its name; a longer one is unknown anyway (see model_too_long) */
    int model_too_long;
    char language[16];        /* "" = the model's default */
    sotto_task task;
    int has_prompt;
    char prompt[SRV_PROMPT_MAX + 1];
    int has_feed, has_feed_key;
    char feed[SRV_FEED_NAME_MAX + 1], feed_key[SRV_FEED_NAME_MAX + 1];
    sotto_dictation_params dp; /* checked; dp.vad.silero is the silero given */
} srv_start;

/* Parses and checks msg (an object) against the server's options; silero:
 * the server's Silero weights (NULL: none; only compared with NULL and stored
 * in out->dp.vad.silero). Returns NULL and fills *out, or the error code
 * ("bad_start", "weights_not_allowed") with the reason in why. */
const char *srv_start_parse(const cJSON *msg, const srv_options *opt, const sotto_silero_model *silero, srv_start *out,
                            char *why, size_t why_sz);

/* A resume message: session and token strings (pointers into msg), and
 * last_seq (0..1e15, 0 if absent). 0, or -1 with the reason in why. */
int srv_resume_parse(const cJSON *msg, const char **id, const char **token, uint64_t *last_seq, char *why,
                     size_t why_sz);

#endif
