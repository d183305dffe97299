/* start_parse.c - the native protocol's start and resume checks (start_parse.h). */
#define _POSIX_C_SOURCE 200809L
#include "start_parse.h"

#include "json_get.h"

#include <stdio.h>
#include <string.h>

/* Optional number field: 0 absent, 1 present and in [lo, hi], -1 bad. The
 * range check comes before any conversion (a double outside int is UB). */
static int jnum(const cJSON *o, const char *k, double lo, double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) return -1;
    *out = v->valuedouble;
    return 1;
}

static int parse_vad(sotto_vad_params *vp, const cJSON *v, int have_silero, char *why, size_t whysz) {
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return snprintf(why, whysz, "vad must be an object"), -1;
    double x;
    struct {
        const char *k;
        int *field;
        double lo, hi;
    } ints[] = {{"silence_ms", &vp->silence_ms, 100, 10000},
                {"preroll_ms", &vp->preroll_ms, 0, 2000},
                {"min_speech_ms", &vp->min_speech_ms, 0, 2000}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int r = jnum(v, ints[i].k, ints[i].lo, ints[i].hi, &x);
        if (r < 0) return snprintf(why, whysz, "vad.%s must be a number in %g..%g", ints[i].k, ints[i].lo, ints[i].hi), -1;
        if (r) *ints[i].field = (int)x;
    }
    int r = jnum(v, "threshold_db", 0, 40, &x);
    if (r < 0) return snprintf(why, whysz, "vad.threshold_db must be a number in 0..40"), -1;
    if (r) vp->threshold_db = (float)x;
    r = jnum(v, "threshold", 0.01, 1, &x);
    if (r < 0) return snprintf(why, whysz, "vad.threshold must be a number in 0.01..1"), -1;
    if (r) { /* Silero's speech probability; hysteresis 0.15 below it, as silero's own */
        vp->speech_threshold = (float)x;
        vp->neg_threshold = x > 0.15 ? (float)x - 0.15f : 0.0f;
    }
    r = jnum(v, "start_gate_db", 0, 60, &x);
    if (r < 0) return snprintf(why, whysz, "vad.start_gate_db must be a number in 0..60 (0: off)"), -1;
    if (r) vp->start_gate_db = (float)x;
    r = jnum(v, "end_gate_db", 0, 60, &x);
    if (r < 0) return snprintf(why, whysz, "vad.end_gate_db must be a number in 0..60 (0: off)"), -1;
    if (r) vp->end_gate_db = (float)x;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(v, "kind");
    if (k) {
        if (!cJSON_IsString(k) || (strcmp(k->valuestring, "silero") && strcmp(k->valuestring, "energy")))
            return snprintf(why, whysz, "vad.kind must be \"silero\" or \"energy\""), -1;
        if (!strcmp(k->valuestring, "silero") && !have_silero)
            return snprintf(why, whysz, "vad.kind silero: this server has no Silero model "
                                        "(start it with --vad-model)"), -1;
        vp->kind = strcmp(k->valuestring, "silero") ? SOTTO_VAD_ENERGY : SOTTO_VAD_SILERO;
    }
    return 0;
}

const char *srv_start_parse(const cJSON *msg, const srv_options *opt, const sotto_silero_model *silero, srv_start *out,
                            char *why, size_t why_sz) {
    memset(out, 0, sizeof *out);
    const char *enc = srv_jstr(msg, "encoding");
    sotto_encoding e = SOTTO_ENCODING_PCM_S16LE;
    if (enc && sotto_encoding_parse(enc, &e)) {
        snprintf(why, why_sz, "unknown encoding '%.64s' (pcm_s16le, pcm_f32le, opus)", enc);
        return "bad_start";
    }
    double rate = e == SOTTO_ENCODING_OPUS ? 48000 : 16000, ch = 1, step = 1000, maxw = 28;
    if (jnum(msg, "sample_rate", 8000, 48000, &rate) < 0 || jnum(msg, "channels", 1, 2, &ch) < 0 ||
        jnum(msg, "step_ms", 100, 10000, &step) < 0 || jnum(msg, "max_window_s", 2, 30, &maxw) < 0) {
        snprintf(why, why_sz, "sample_rate must be 8000..48000, channels 1 or 2, step_ms 100..10000, "
                              "max_window_s 2..30");
        return "bad_start";
    }
    const char *model = srv_jstr(msg, "model");
    const char *weights = srv_jstr(msg, "weights");
    sotto_wfmt w = opt->stream_weights;
    if (weights && sotto_wfmt_parse(weights, &w)) {
        snprintf(why, why_sz, "unknown weights '%.64s'", weights);
        return "bad_start";
    }
    if (!opt->allowed[w]) {
        snprintf(why, why_sz, "weights '%s' are not offered by this server", sotto_wfmt_name(w));
        return "weights_not_allowed";
    }
    const char *lang = srv_jstr(msg, "language"), *task = srv_jstr(msg, "task"), *prompt = srv_jstr(msg, "prompt");
    if ((lang && strlen(lang) >= sizeof out->language) ||
        (task && strcmp(task, "transcribe") && strcmp(task, "translate")) ||
        (prompt && strlen(prompt) > SRV_PROMPT_MAX)) {
        snprintf(why, why_sz, "language must be a code or 'auto', task transcribe or translate, "
                              "prompt at most 2000 bytes");
        return "bad_start";
    }
    const char *feed = srv_jstr(msg, "feed"), *feed_key = srv_jstr(msg, "feed_key");
    if ((feed && !srv_feed_name_ok(feed)) || (feed_key && (!*feed_key || strlen(feed_key) > SRV_FEED_NAME_MAX))) {
        snprintf(why, why_sz, "feed must be 1..64 of A-Z a-z 0-9 - _ . (not starting with '.'), "
                              "feed_key 1..64 bytes");
        return "bad_start";
    }
    sotto_dictation_params dp = sotto_dictation_default_params();
    dp.vad.kind = opt->vad_kind;
    dp.vad.silero = silero; /* the check needs it for kind silero */
    dp.step_ms = (int)step;
    dp.max_window_s = (float)maxw;
    dp.spec_silence_ms = (int)opt->speculate_ms;
    dp.spec_silence_load_ms = (int)opt->speculate_load_ms;
    dp.max_backlog_s = (float)opt->max_buffer_s;
    if (dp.max_backlog_s < dp.max_window_s) dp.max_backlog_s = dp.max_window_s;
    const cJSON *partials = cJSON_GetObjectItemCaseSensitive(msg, "partials");
    if (cJSON_IsBool(partials)) dp.partials = cJSON_IsTrue(partials);
    const cJSON *fts = cJSON_GetObjectItemCaseSensitive(msg, "final_timestamps");
    if (cJSON_IsBool(fts)) dp.final_timestamps = cJSON_IsTrue(fts);
    if (parse_vad(&dp.vad, cJSON_GetObjectItemCaseSensitive(msg, "vad"), silero != NULL, why, why_sz)) return "bad_start";
    sotto_err err;
    if (sotto_dictation_params_check(&dp, &err)) {
        snprintf(why, why_sz, "%s", err.msg);
        return "bad_start";
    }
    out->encoding = e;
    out->sample_rate = (int)rate;
    out->channels = (int)ch;
    out->weights = w;
    if (model) {
        out->has_model = 1;
        out->model_too_long = strlen(model) >= sizeof out->model;
        snprintf(out->model, sizeof out->model, "%s", model);
    }
    snprintf(out->language, sizeof out->language, "%s", lang ? lang : "");
    out->task = task && !strcmp(task, "translate") ? SOTTO_TASK_TRANSLATE : SOTTO_TASK_TRANSCRIBE;
    if (prompt) out->has_prompt = 1, snprintf(out->prompt, sizeof out->prompt, "%s", prompt);
    if (feed) out->has_feed = 1, snprintf(out->feed, sizeof out->feed, "%s", feed);
    if (feed_key) out->has_feed_key = 1, snprintf(out->feed_key, sizeof out->feed_key, "%s", feed_key);
    out->dp = dp;
    return NULL;
}

int srv_resume_parse(const cJSON *msg, const char **id, const char **token, uint64_t *last_seq, char *why,
                     size_t why_sz) {
    double seq = 0;
    *id = srv_jstr(msg, "session");
    *token = srv_jstr(msg, "token");
    *last_seq = 0;
    if (!*id || !*token || jnum(msg, "last_seq", 0, 1e15, &seq) < 0) {
        snprintf(why, why_sz, "resume needs session, token and last_seq");
        return -1;
    }
    *last_seq = (uint64_t)seq;
    return 0;
}
