/* link_stub.h - what the dialect harnesses (fuzz_realtime.c, fuzz_deepgram.c)
 * share: a stand-in for conn_dialect.c's connection (srv_link_*, compat.h) that records
 * what a dialect asks of its session and checks it, a server with two models,
 * and an input format of messages.
 *
 * Checks: every message for the client is a JSON object with a string
 * "type"; a start message the dialect builds passes the native protocol's own
 * checks (srv_start_parse) and names a model the server has; audio comes only
 * after a start (in whole 16-bit samples where the dialect promises them). Any failure
 * aborts (libFuzzer reports it).
 *
 * Input: byte 0 holds options (bit 0: the session's start fails as on a full
 * server), then records: a flag byte, a little-endian u16 length, that many
 * bytes. Flag bit 0: a binary message; bit 7: not a client message but a
 * session event (sotto.v1 JSON, typed as the ring holds it) for the dialect to translate. */
#ifndef SOTTO_FUZZ_LINK_STUB_H
#define SOTTO_FUZZ_LINK_STUB_H

#define _POSIX_C_SOURCE 200809L
#include "compat.h"
#include "log.h"
#include "srv_stubs.h"
#include "start_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_link {
    int started, start_fails, close_status, closing;
    int whole_samples; /* the dialect promises whole 16-bit samples (OpenAI's does; Deepgram's
                          passes linear16 through, and the session refuses a partial one) */
    size_t sent, audio_bytes, flushes;
    cJSON *notes[64]; /* events put into the session's ring, translated after the message */
    int n_notes;
};

static srv g_fsrv;
static srv_session g_fss;

static inline void fuzz_srv_init(void) {
    static int done;
    if (done) return;
    done = 1;
    sotto_log_set_level(SOTTO_LOG_ERROR);
    g_fsrv.opt.max_buffer_s = 60;
    g_fsrv.opt.vad_kind = SOTTO_VAD_ENERGY;
    g_fsrv.opt.allowed[SOTTO_WFMT_F32] = g_fsrv.opt.allowed[SOTTO_WFMT_Q8] = 1;
    g_fsrv.opt.default_weights = SOTTO_WFMT_F32;
    snprintf(g_fsrv.models[0].name, sizeof g_fsrv.models[0].name, "tiny.en");
    snprintf(g_fsrv.models[1].name, sizeof g_fsrv.models[1].name, "base");
    g_fsrv.n_models = 2;
}

static inline void fuzz_check_json(const char *json) {
    cJSON *o = cJSON_Parse(json);
    const cJSON *t = o ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
    if (!cJSON_IsObject(o) || !cJSON_IsString(t) || !*t->valuestring) {
        fprintf(stderr, "a dialect sent a message without a type: %s\n", json);
        abort();
    }
    cJSON_Delete(o);
}

/* The native checks a dialect's start must pass. */
int srv_link_start(srv_link *l, const cJSON *m) {
    char why[256];
    srv_start st;
    const char *code = srv_start_parse(m, &g_fsrv.opt, NULL, &st, why, sizeof why);
    char *txt = cJSON_PrintUnformatted(m);
    if (code || l->started) {
        fprintf(stderr, "a dialect's start is refused (%s: %s): %s\n", code ? code : "started twice",
                code ? why : "", txt ? txt : "?");
        abort();
    }
    if (st.model_too_long || (st.has_model && st.model[0] && strcmp(st.model, "tiny.en") && strcmp(st.model, "base"))) {
        fprintf(stderr, "a dialect's start names a model the server lacks: %s\n", txt ? txt : "?");
        abort();
    }
    if (st.sample_rate < 8000 || st.sample_rate > 48000 || st.channels < 1 || st.channels > 2 ||
        strlen(st.language) >= sizeof st.language)
        abort();
    free(txt);
    if (l->start_fails) { /* as a full server answers */
        if (l->n_notes < 64)
            l->notes[l->n_notes++] =
                cJSON_Parse("{\"type\":\"error\",\"code\":\"overloaded\",\"message\":\"full\",\"fatal\":true}");
        return -1;
    }
    g_fss.encoding = st.encoding;
    g_fss.sample_rate = st.sample_rate;
    g_fss.channels = st.channels;
    g_fss.state = SESS_LOADING;
    l->started = 1;
    return 0;
}

int srv_link_started(const srv_link *l) { return l->started; }

void srv_link_audio(srv_link *l, const void *data, size_t len) {
    if (!l->started || !data) abort();
    if (l->whole_samples && g_fss.encoding != SOTTO_ENCODING_OPUS && len % 2) abort();
    volatile unsigned char sink = 0;
    if (len) sink ^= ((const unsigned char *)data)[len - 1]; /* the bytes must be readable */
    (void)sink;
    l->audio_bytes += len;
}

void srv_link_flush(srv_link *l, int end_of_stream) {
    (void)end_of_stream;
    l->flushes++;
}

void srv_link_note(srv_link *l, cJSON *ev) {
    if (l->n_notes < 64) l->notes[l->n_notes++] = ev;
    else cJSON_Delete(ev);
}

void srv_link_send(srv_link *l, char *json) {
    if (!json) return;
    fuzz_check_json(json);
    l->sent++;
    free(json);
}

void srv_link_close_after(srv_link *l, int status) {
    l->closing = 1;
    l->close_status = status;
}

srv *srv_link_srv(srv_link *l) {
    (void)l;
    return &g_fsrv;
}

srv_session *srv_link_session(srv_link *l) {
    (void)l;
    return &g_fss;
}

/* compat.c's srv_compat_authorized calls it; the dialects do not. */
int srv_auth_check(srv *s, struct lws *wsi, int *ident) {
    (void)s, (void)wsi;
    if (ident) *ident = -1;
    return 1;
}

/* A session event, as JSON, through the dialect's translator (typed, as the
 * session's ring holds it: ring.h). */
static inline void fuzz_translate(const srv_dialect *d, void *st, srv_link *l, const cJSON *ev) {
    srv_event e;
    if (srv_event_from_json(&e, ev)) return;
    d->translate(st, l, &e);
    srv_event_clear(&e);
}

/* Runs the records of data (after byte 0) through dialect d's state st. */
static inline void fuzz_run_dialect(const srv_dialect *d, void *st, srv_link *l, const uint8_t *data, size_t size) {
    size_t off = 0;
    if (d->welcome) d->welcome(st, l);
    while (size - off >= 3) {
        int flag = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off) len = size - off;
        /* a private copy of exactly len bytes, so that a read past it is caught */
        unsigned char *m = malloc(len ? len : 1);
        if (!m) abort();
        memcpy(m, data + off, len);
        off += len;
        if (flag & 0x80) {
            cJSON *ev = cJSON_ParseWithLength((const char *)m, len);
            if (cJSON_IsObject(ev)) fuzz_translate(d, st, l, ev);
            cJSON_Delete(ev);
        } else {
            d->receive(st, l, flag & 1, m, len);
        }
        free(m);
        for (int i = 0; i < l->n_notes; i++) { /* the session's ring, in order */
            if (l->notes[i]) fuzz_translate(d, st, l, l->notes[i]);
            cJSON_Delete(l->notes[i]);
        }
        l->n_notes = 0;
    }
    d->close(st);
}

static inline void fuzz_link_reset(srv_link *l, int opts) {
    memset(l, 0, sizeof *l);
    memset(&g_fss, 0, sizeof g_fss);
    g_fss.id = 7;
    snprintf(g_fss.id_str, sizeof g_fss.id_str, "7");
    g_fss.srv = &g_fsrv;
    l->start_fails = opts & 1;
}

#endif
