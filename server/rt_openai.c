/* rt_openai.c - the OpenAI Realtime API's transcription sessions on
 * /v1/realtime?intent=transcription (docs/COMPAT.md).
 *
 * Client events: session.update (session.type "transcription", audio.input
 * {format, transcription, turn_detection}) or the older
 * transcription_session.update (input_audio_format, input_audio_transcription,
 * turn_detection); input_audio_buffer.append / commit / clear.
 * Server events: session.created/updated (or transcription_session.*),
 * input_audio_buffer.speech_started / speech_stopped / committed / cleared,
 * conversation.item.input_audio_transcription.delta / completed / failed,
 * error.
 *
 * Items are sotto utterances: item_<session>_<n>. Deltas are append-only, so
 * they carry committed text (LocalAgreement) as it is committed, and the rest
 * of the utterance with its final; `completed` has the whole transcript. The
 * sotto session starts with the first audio, in the configuration of that
 * moment; later changes to the model or the audio format are refused.
 */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"
#include "json_get.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The note (srv_link_note) that marks input_audio_buffer.clear among the
 * session's events, so that the clear applies in order. */
#define RT_CLEAR "x_rt_clear"

enum { F_PCM16, F_ULAW, F_ALAW };

typedef struct rt {
    srv_session *ss;
    int beta;       /* the client speaks transcription_session.* */
    int ga_seen;    /* ... or session.update */
    /* configuration */
    char model[96];
    char language[16];
    char *prompt;
    int fmt, rate;
    int vad;        /* server_vad (else turn_detection null: the client commits) */
    double threshold;
    int prefix_ms, silence_ms;
    /* input and items */
    size_t bytes_since_commit;
    int speech_utt;       /* newest utterance with speech_started */
    int committed_utt;    /* newest utterance with input_audio_buffer.committed */
    int committed[64];    /* recent utterances committed (finals may lag behind later ones) */
    int cleared[64];      /* utterances cleared before they were committed */
    int delta_utt;        /* the utterance deltas were last sent for */
    size_t delta_len;     /* bytes of its text sent as deltas */
    uint64_t next_event;
} rt;

static void item_id(const rt *r, int utt, char *buf, size_t sz) {
    snprintf(buf, sz, "item_%s_%d", r->ss->id_str, utt);
}

static void send_obj(srv_link *l, rt *r, cJSON *o) { /* takes o */
    if (!o) return;
    char id[40];
    snprintf(id, sizeof id, "event_%s_%llu", r->ss->id_str, (unsigned long long)++r->next_event);
    cJSON_AddStringToObject(o, "event_id", id);
    srv_link_send(l, cJSON_PrintUnformatted(o));
    cJSON_Delete(o);
}

static cJSON *ev_new(const char *type) {
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "type", type);
    return o;
}

static void send_error(srv_link *l, rt *r, const char *type, const char *code, const char *msg,
                       const char *param, const char *client_event_id) {
    cJSON *o = ev_new("error");
    if (!o) return;
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", type);
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    cJSON_AddStringToObject(e, "message", msg);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (client_event_id) cJSON_AddStringToObject(e, "event_id", client_event_id);
    else cJSON_AddNullToObject(e, "event_id");
    send_obj(l, r, o);
}

/* The session object in the shape the client uses. */
static cJSON *session_obj(const rt *r) {
    cJSON *s = cJSON_CreateObject();
    if (!s) return NULL;
    char id[40];
    snprintf(id, sizeof id, "sess_%s", r->ss->id_str);
    cJSON_AddStringToObject(s, "id", id);
    cJSON_AddStringToObject(s, "object", "realtime.transcription_session");
    cJSON *tr = cJSON_CreateObject(), *td = NULL;
    cJSON_AddStringToObject(tr, "model", r->model[0] ? r->model : "whisper-1");
    cJSON_AddStringToObject(tr, "language", r->language);
    cJSON_AddStringToObject(tr, "prompt", r->prompt ? r->prompt : "");
    if (r->vad) {
        td = cJSON_CreateObject();
        cJSON_AddStringToObject(td, "type", "server_vad");
        cJSON_AddNumberToObject(td, "threshold", r->threshold);
        cJSON_AddNumberToObject(td, "prefix_padding_ms", r->prefix_ms);
        cJSON_AddNumberToObject(td, "silence_duration_ms", r->silence_ms);
    } else {
        td = cJSON_CreateNull();
    }
    static const char *const ga_fmt[] = {"audio/pcm", "audio/pcmu", "audio/pcma"};
    static const char *const beta_fmt[] = {"pcm16", "g711_ulaw", "g711_alaw"};
    if (r->beta) {
        cJSON_AddStringToObject(s, "input_audio_format", beta_fmt[r->fmt]);
        cJSON_AddItemToObject(s, "input_audio_transcription", tr);
        cJSON_AddItemToObject(s, "turn_detection", td);
        cJSON_AddNullToObject(s, "input_audio_noise_reduction");
    } else {
        cJSON_AddStringToObject(s, "type", "transcription");
        cJSON *audio = cJSON_AddObjectToObject(s, "audio"), *in = cJSON_AddObjectToObject(audio, "input");
        cJSON *f = cJSON_AddObjectToObject(in, "format");
        cJSON_AddStringToObject(f, "type", ga_fmt[r->fmt]);
        if (r->fmt == F_PCM16) cJSON_AddNumberToObject(f, "rate", r->rate);
        cJSON_AddItemToObject(in, "transcription", tr);
        cJSON_AddItemToObject(in, "turn_detection", td);
        cJSON_AddNullToObject(in, "noise_reduction");
    }
    cJSON_AddItemToObject(s, "include", cJSON_CreateArray());
    return s;
}

static void send_session(srv_link *l, rt *r, const char *what) { /* "created" / "updated" */
    char type[64];
    snprintf(type, sizeof type, "%s.%s", r->beta ? "transcription_session" : "session", what);
    cJSON *o = ev_new(type);
    if (o) cJSON_AddItemToObject(o, "session", session_obj(r));
    send_obj(l, r, o);
}

static void *rt_open(srv_link *l, struct lws *wsi) {
    rt *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->ss = srv_link_session(l);
    r->fmt = F_PCM16;
    r->rate = 24000;
    r->vad = 1;
    r->threshold = 0.5;
    r->prefix_ms = 300;
    r->silence_ms = 500;
    char q[96];
    const char *qm = wsi ? lws_get_urlarg_by_name(wsi, "model=", q, (int)sizeof q) : NULL; /* NULL: fuzz harness */
    if (qm) snprintf(r->model, sizeof r->model, "%s", qm);
    return r;
}

static void rt_welcome(void *st, srv_link *l) { send_session(l, st, "created"); }

static void rt_close(void *st) {
    rt *r = st;
    free(r->prompt);
    free(r);
}

/* ---- client events ------------------------------------------------------------------ */

static const cJSON *jobj(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* turn_detection: null, or {type: server_vad | semantic_vad, threshold, prefix_padding_ms,
 * silence_duration_ms}; returns a reason on error. */
static const char *parse_turns(rt *n, const cJSON *td) {
    if (!td) return NULL;
    if (cJSON_IsNull(td)) {
        n->vad = 0;
        return NULL;
    }
    if (!cJSON_IsObject(td)) return "turn_detection must be an object or null";
    const char *t = srv_jstr(td, "type");
    if (t && strcmp(t, "server_vad") && strcmp(t, "semantic_vad"))
        return "turn_detection.type must be server_vad (semantic_vad is served as server_vad)";
    n->vad = 1;
    const cJSON *v;
    if ((v = jobj(td, "threshold"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1)) return "threshold must be 0..1";
        n->threshold = v->valuedouble;
    }
    if ((v = jobj(td, "prefix_padding_ms"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 2000)) return "prefix_padding_ms must be 0..2000";
        n->prefix_ms = (int)v->valuedouble;
    }
    if ((v = jobj(td, "silence_duration_ms"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 100 && v->valuedouble <= 10000))
            return "silence_duration_ms must be 100..10000";
        n->silence_ms = (int)v->valuedouble;
    }
    return NULL;
}

static const char *parse_transcription(rt *n, const cJSON *tr) {
    if (!tr || cJSON_IsNull(tr)) return NULL;
    if (!cJSON_IsObject(tr)) return "transcription must be an object";
    const char *m = srv_jstr(tr, "model"), *lang = srv_jstr(tr, "language"), *p = srv_jstr(tr, "prompt");
    if (m) {
        if (strlen(m) >= sizeof n->model) return "model name too long";
        snprintf(n->model, sizeof n->model, "%s", m);
    }
    if (lang) {
        if (strlen(lang) >= sizeof n->language) return "language must be a code such as 'en'";
        snprintf(n->language, sizeof n->language, "%s", lang);
    }
    if (p) {
        if (strlen(p) > 2000) return "prompt must be at most 2000 bytes";
        free(n->prompt);
        n->prompt = strdup(p);
    }
    return NULL;
}

static const char *parse_format(rt *n, const cJSON *f) {
    if (!f) return NULL;
    const char *t = cJSON_IsString(f) ? f->valuestring : srv_jstr(f, "type");
    if (!t) return "format needs a type";
    if (!strcmp(t, "audio/pcm") || !strcmp(t, "pcm16")) {
        n->fmt = F_PCM16;
        const cJSON *rate = cJSON_IsObject(f) ? jobj(f, "rate") : NULL;
        if (rate) {
            if (!cJSON_IsNumber(rate) || !(rate->valuedouble >= 8000 && rate->valuedouble <= 48000))
                return "format.rate must be 8000..48000 (24000 is OpenAI's)";
            n->rate = (int)rate->valuedouble;
        } else {
            n->rate = 24000;
        }
    } else if (!strcmp(t, "audio/pcmu") || !strcmp(t, "g711_ulaw")) {
        n->fmt = F_ULAW, n->rate = 8000;
    } else if (!strcmp(t, "audio/pcma") || !strcmp(t, "g711_alaw")) {
        n->fmt = F_ALAW, n->rate = 8000;
    } else {
        return "unsupported audio format (audio/pcm, audio/pcmu, audio/pcma; pcm16, g711_ulaw, g711_alaw)";
    }
    return NULL;
}

static void on_update(srv_link *l, rt *r, const cJSON *msg, int beta, const char *eid) {
    const cJSON *s = jobj(msg, "session");
    if (!cJSON_IsObject(s)) {
        send_error(l, r, "invalid_request_error", "missing_required_parameter", "session.update needs a session object",
                   "session", eid);
        return;
    }
    rt n = *r; /* the candidate configuration */
    n.prompt = NULL;
    const char *why = NULL;
    if (!beta) {
        const char *t = srv_jstr(s, "type");
        if (t && strcmp(t, "transcription"))
            why = "this server runs transcription sessions only (session.type \"transcription\")";
        const cJSON *in = jobj(jobj(s, "audio"), "input");
        if (!why && in) why = parse_format(&n, jobj(in, "format"));
        if (!why && in) why = parse_transcription(&n, jobj(in, "transcription"));
        if (!why && in) why = parse_turns(&n, jobj(in, "turn_detection"));
    } else {
        why = parse_format(&n, jobj(s, "input_audio_format"));
        if (!why) why = parse_transcription(&n, jobj(s, "input_audio_transcription"));
        if (!why) why = parse_turns(&n, jobj(s, "turn_detection"));
    }
    char model[64], mwhy[200];
    sotto_wfmt w;
    if (!why && srv_compat_model(srv_link_srv(l), n.model, 1, model, sizeof model, &w, mwhy, sizeof mwhy)) why = mwhy;
    if (!why && srv_link_started(l) &&
        (strcmp(n.model, r->model) || n.fmt != r->fmt || n.rate != r->rate || strcmp(n.language, r->language) ||
         n.vad != r->vad || n.threshold != r->threshold || n.prefix_ms != r->prefix_ms ||
         n.silence_ms != r->silence_ms || (n.prompt && (!r->prompt || strcmp(n.prompt, r->prompt)))))
        why = "the session is already transcribing: the model, audio format, language, prompt and turn "
              "detection are fixed by the first audio";
    if (why) {
        free(n.prompt);
        send_error(l, r, "invalid_request_error", "invalid_value", why, "session", eid);
        return;
    }
    if (!n.prompt) n.prompt = r->prompt;
    else free(r->prompt);
    n.beta = beta;
    *r = n;
    send_session(l, r, "updated");
}

static int start_session(srv_link *l, rt *r, const char *eid) {
    char model[64], why[200];
    sotto_wfmt w;
    if (srv_compat_model(srv_link_srv(l), r->model, 1, model, sizeof model, &w, why, sizeof why)) {
        send_error(l, r, "invalid_request_error", "model_not_found", why, "session.audio.input.transcription.model", eid);
        return -1;
    }
    cJSON *m = cJSON_CreateObject(), *vad = cJSON_CreateObject();
    if (!m || !vad) {
        cJSON_Delete(m), cJSON_Delete(vad);
        return -1;
    }
    cJSON_AddStringToObject(m, "type", "start");
    cJSON_AddStringToObject(m, "encoding", "pcm_s16le");
    cJSON_AddNumberToObject(m, "sample_rate", r->rate);
    cJSON_AddNumberToObject(m, "channels", 1);
    if (model[0]) cJSON_AddStringToObject(m, "model", model);
    cJSON_AddStringToObject(m, "weights", sotto_wfmt_name(w));
    if (r->language[0]) cJSON_AddStringToObject(m, "language", r->language);
    if (r->prompt && *r->prompt) cJSON_AddStringToObject(m, "prompt", r->prompt);
    /* turn detection null: the client's commits end utterances; long pauses still do */
    cJSON_AddNumberToObject(vad, "silence_ms", r->vad ? r->silence_ms : 10000);
    cJSON_AddNumberToObject(vad, "preroll_ms", r->prefix_ms);
    cJSON_AddNumberToObject(vad, "threshold_db", 5.0 * r->threshold); /* 0.5 -> sotto's 2.5 dB */
    cJSON_AddNumberToObject(vad, "threshold", r->threshold > 0.01 ? r->threshold : 0.01); /* Silero's */
    cJSON_AddItemToObject(m, "vad", vad);
    int rc = srv_link_start(l, m);
    cJSON_Delete(m);
    return rc;
}

static void on_append(srv_link *l, rt *r, const cJSON *msg, const char *eid) {
    const char *b64 = srv_jstr(msg, "audio");
    unsigned char *pcm = NULL;
    size_t n = 0;
    if (!b64 || srv_b64_decode(b64, strlen(b64), &pcm, &n)) {
        send_error(l, r, "invalid_request_error", "invalid_value", "audio must be base64-encoded audio", "audio", eid);
        return;
    }
    if (r->fmt == F_PCM16 && n % 2) {
        free(pcm);
        send_error(l, r, "invalid_request_error", "invalid_value",
                   "audio/pcm needs whole 16-bit little-endian samples (an even number of bytes)", "audio", eid);
        return;
    }
    if (!srv_link_started(l) && start_session(l, r, eid)) {
        free(pcm);
        return; /* the session's error event explains */
    }
    if (r->fmt != F_PCM16) { /* G.711 to 16-bit PCM */
        unsigned char *s16 = srv_g711_to_s16le(pcm, n, r->fmt == F_ALAW);
        free(pcm);
        if (!(pcm = s16)) return;
        n *= 2;
    }
    if (n) srv_link_audio(l, pcm, n);
    r->bytes_since_commit += n;
    free(pcm);
}

static void rt_receive(void *st, srv_link *l, int binary, const unsigned char *data, size_t len) {
    rt *r = st;
    if (binary) {
        send_error(l, r, "invalid_request_error", "invalid_event",
                   "send JSON client events; audio goes in input_audio_buffer.append", NULL, NULL);
        return;
    }
    cJSON *msg = cJSON_ParseWithLength((const char *)data, len);
    const char *type = msg ? srv_jstr(msg, "type") : NULL, *eid = msg ? srv_jstr(msg, "event_id") : NULL;
    if (!msg || !cJSON_IsObject(msg)) {
        send_error(l, r, "invalid_request_error", "invalid_json", "client events must be JSON objects", NULL, NULL);
    } else if (!type) {
        send_error(l, r, "invalid_request_error", "missing_required_parameter", "a client event needs a type", "type", eid);
    } else if (!strcmp(type, "session.update")) {
        on_update(l, r, msg, 0, eid);
    } else if (!strcmp(type, "transcription_session.update")) {
        on_update(l, r, msg, 1, eid);
    } else if (!strcmp(type, "input_audio_buffer.append")) {
        on_append(l, r, msg, eid);
    } else if (!strcmp(type, "input_audio_buffer.commit")) {
        if (r->bytes_since_commit == 0 || !srv_link_started(l)) {
            send_error(l, r, "invalid_request_error", "input_audio_buffer_commit_empty",
                       "the input audio buffer is empty: append audio before committing", NULL, eid);
        } else {
            r->bytes_since_commit = 0;
            srv_link_flush(l, 0); /* ends the utterance: committed, then completed */
        }
    } else if (!strcmp(type, "input_audio_buffer.clear")) {
        r->bytes_since_commit = 0;
        if (srv_link_started(l)) {
            cJSON *note = cJSON_CreateObject();
            if (note) cJSON_AddStringToObject(note, "type", RT_CLEAR);
            srv_link_note(l, note); /* in order with the events already queued */
            srv_link_flush(l, 0);
        } else {
            send_obj(l, r, ev_new("input_audio_buffer.cleared"));
        }
    } else {
        char why[160];
        snprintf(why, sizeof why, "the event type '%.64s' is not supported by a transcription session", type);
        send_error(l, r, "invalid_request_error", "unknown_event", why, "type", eid);
    }
    cJSON_Delete(msg);
}

/* ---- session events ---------------------------------------------------------------------- */

/* Seconds as whole milliseconds, clamped to 0..INT_MAX. */
static int ms_of(double seconds) {
    double ms = seconds * 1000 + 0.5;
    return ms >= 0 ? ms < 2147483647.0 ? (int)ms : 2147483647 : 0;
}

static void send_committed(srv_link *l, rt *r, int utt) {
    if (utt <= 0 || r->committed[utt % 64] == utt) return;
    r->committed[utt % 64] = utt;
    char id[64], prev[64];
    item_id(r, utt, id, sizeof id);
    cJSON *o = ev_new("input_audio_buffer.committed");
    if (!o) return;
    if (r->committed_utt) {
        item_id(r, r->committed_utt, prev, sizeof prev);
        cJSON_AddStringToObject(o, "previous_item_id", prev);
    } else {
        cJSON_AddNullToObject(o, "previous_item_id");
    }
    cJSON_AddStringToObject(o, "item_id", id);
    r->committed_utt = utt;
    send_obj(l, r, o);
}

/* Appends text (bytes [from, len) of the utterance's text) as a delta. */
static void send_delta(srv_link *l, rt *r, int utt, const char *text) {
    if (utt != r->delta_utt) r->delta_utt = utt, r->delta_len = 0;
    size_t n = strlen(text);
    if (n <= r->delta_len) return;
    const char *d = text + r->delta_len;
    if (r->delta_len == 0)
        while (*d == ' ') d++; /* no leading space on the first delta */
    r->delta_len = n;
    if (!*d) return;
    char id[64];
    item_id(r, utt, id, sizeof id);
    cJSON *o = ev_new("conversation.item.input_audio_transcription.delta");
    if (!o) return;
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "content_index", 0);
    cJSON_AddStringToObject(o, "delta", d);
    send_obj(l, r, o);
}

/* The close code after a fatal error: policy (1008) for a key or timeout,
 * try again later (1013) for a full server, else normal. */
static int close_status(const char *code) {
    if (!code) return 0;
    if (!strcmp(code, "unauthorized") || !strcmp(code, "start_timeout") || !strcmp(code, "idle_timeout"))
        return LWS_CLOSE_STATUS_POLICY_VIOLATION;
    if (!strcmp(code, "too_many_connections") || !strcmp(code, "overloaded")) return 1013;
    return 0;
}

static void rt_translate(void *st, srv_link *l, const srv_event *ev) {
    rt *r = st;
    int utt = ev->utterance;
    char id[64];
    if (utt) item_id(r, utt, id, sizeof id);
    if (utt > 0 && r->cleared[utt % 64] == utt) return; /* cleared */
    if (ev->type == SRV_EV_SPEECH_START) {
        r->speech_utt = utt;
        if (!r->vad) return;
        cJSON *o = ev_new("input_audio_buffer.speech_started");
        if (!o) return;
        cJSON_AddNumberToObject(o, "audio_start_ms", ms_of(ev->start));
        cJSON_AddStringToObject(o, "item_id", id);
        send_obj(l, r, o);
    } else if (ev->type == SRV_EV_SPEECH_END) {
        if (r->vad) {
            cJSON *o = ev_new("input_audio_buffer.speech_stopped");
            if (!o) return;
            cJSON_AddNumberToObject(o, "audio_end_ms", ms_of(ev->end));
            cJSON_AddStringToObject(o, "item_id", id);
            send_obj(l, r, o);
        }
        send_committed(l, r, utt);
    } else if (ev->type == SRV_EV_COMMIT) {
        if (ev->committed) send_delta(l, r, utt, ev->committed);
    } else if (ev->type == SRV_EV_FINAL) {
        const char *text = ev->text;
        if (!text) return;
        send_committed(l, r, utt);
        send_delta(l, r, utt, text);
        const char *t = text;
        while (*t == ' ') t++;
        cJSON *o = ev_new("conversation.item.input_audio_transcription.completed");
        if (!o) return;
        cJSON_AddStringToObject(o, "item_id", id);
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "transcript", t);
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddStringToObject(u, "type", "duration");
        cJSON_AddNumberToObject(u, "seconds", ev->end - ev->start);
        send_obj(l, r, o);
    } else if (ev->type == SRV_EV_NOTE && !strcmp(ev->text, RT_CLEAR)) {
        /* the utterance in progress is dropped unless already committed */
        int u = r->speech_utt;
        if (u > 0 && r->committed[u % 64] != u) r->cleared[u % 64] = u;
        send_obj(l, r, ev_new("input_audio_buffer.cleared"));
    } else if (ev->type == SRV_EV_ERROR) {
        const char *code = ev->code, *msg = ev->message;
        int fatal = ev->fatal;
        int server = code && (!strcmp(code, "internal") || !strcmp(code, "overloaded") ||
                              !strcmp(code, "shutting_down") || !strcmp(code, "model_load_failed"));
        if (utt && r->committed[utt % 64] == utt) { /* a transcription that failed */
            cJSON *o = ev_new("conversation.item.input_audio_transcription.failed");
            if (o) {
                cJSON_AddStringToObject(o, "item_id", id);
                cJSON_AddNumberToObject(o, "content_index", 0);
                cJSON *e = cJSON_AddObjectToObject(o, "error");
                cJSON_AddStringToObject(e, "type", "server_error");
                cJSON_AddStringToObject(e, "code", code ? code : "error");
                cJSON_AddStringToObject(e, "message", msg ? msg : "");
                send_obj(l, r, o);
            }
        } else {
            send_error(l, r, server ? "server_error" : "invalid_request_error", code, msg ? msg : "error", NULL, NULL);
        }
        if (fatal) srv_link_close_after(l, close_status(code));
    }
    /* hello, ready, ack, partial, language, warning, pong, done: nothing to say */
}

const srv_dialect srv_dialect_openai_rt = {"openai-realtime", rt_open, rt_welcome, rt_receive, rt_translate, rt_close};
