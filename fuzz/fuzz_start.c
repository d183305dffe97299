/* fuzz_start.c - the native protocol's start and resume checks
 * (srv_start_parse, srv_resume_parse: server/start_parse.c), which
 * srv_session_start (control.c) and the resume of conn_v1.c apply.
 *
 * Input: a JSON message (cJSON_ParseWithLength). Checks on an accepted start:
 * rate 8000..48000, channels 1..2, the weights offered, the dictation
 * parameters within their ranges (sotto_dictation_params_check), strings
 * NUL-terminated inside their buffers, the feed name valid; on a refused one,
 * an error code and a reason. A resume's last_seq is at most 1e15. */
#include "start_parse.h"
#include "srv_stubs.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bounded(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static srv_options opt;
    static int init;
    if (!init) {
        sotto_log_set_level(SOTTO_LOG_ERROR);
        opt.max_buffer_s = 60;
        opt.vad_kind = SOTTO_VAD_ENERGY;
        opt.allowed[SOTTO_WFMT_F32] = opt.allowed[SOTTO_WFMT_Q8] = 1;
        opt.default_weights = SOTTO_WFMT_F32;
        init = 1;
    }
    cJSON *msg = cJSON_ParseWithLength((const char *)data, size);
    if (!msg) return 0;
    char why[256];
    /* a server without Silero weights, and one with (never read: only compared with NULL) */
    static const char fake_weights;
    const sotto_silero_model *fake = (const sotto_silero_model *)&fake_weights;
    for (int silero = 0; silero < 2; silero++) {
        srv_start st;
        why[0] = '\0';
        const char *code = srv_start_parse(msg, &opt, silero ? fake : NULL, &st, why, sizeof why);
        if (code) {
            if ((strcmp(code, "bad_start") && strcmp(code, "weights_not_allowed")) || !why[0] ||
                !bounded(why, sizeof why))
                abort();
            continue;
        }
        sotto_err err;
        if (st.sample_rate < 8000 || st.sample_rate > 48000 || st.channels < 1 || st.channels > 2 ||
            (unsigned)st.weights >= SOTTO_WFMT_COUNT || !opt.allowed[st.weights] ||
            sotto_dictation_params_check(&st.dp, &err) || st.dp.vad.silero != (silero ? fake : NULL) ||
            (!silero && st.dp.vad.kind == SOTTO_VAD_SILERO && opt.vad_kind != SOTTO_VAD_SILERO) ||
            !bounded(st.model, sizeof st.model) || !bounded(st.language, sizeof st.language) ||
            !bounded(st.prompt, sizeof st.prompt) || !bounded(st.feed, sizeof st.feed) ||
            !bounded(st.feed_key, sizeof st.feed_key) || (st.has_feed && !srv_feed_name_ok(st.feed)) ||
            (st.has_feed_key && !st.feed_key[0]) ||
            (st.task != SOTTO_TASK_TRANSCRIBE && st.task != SOTTO_TASK_TRANSLATE))
            abort();
        /* the decoder the session would create accepts what was parsed */
        sotto_audio_in *a = sotto_audio_in_create(st.encoding, st.sample_rate, st.channels, &err);
        if (!a) {
            fprintf(stderr, "a parsed start is refused by sotto_audio_in_create: %s\n", err.msg);
            abort();
        }
        sotto_audio_in_free(a);
    }
    const char *id, *token;
    uint64_t last_seq;
    if (!srv_resume_parse(msg, &id, &token, &last_seq, why, sizeof why)) {
        if (!id || !token || last_seq > (uint64_t)1e15) abort();
    } else if (!why[0]) {
        abort();
    }
    cJSON_Delete(msg);
    return 0;
}
