/* conn_v1.c - the sotto.v1 dictation connection (/v1/stream, docs/PROTOCOL.md):
 * JSON control messages (start, flush, stop, resume, ping) and binary audio
 * into its session; the session's events out as they are. The service
 * thread only. */
#define _POSIX_C_SOURCE 200809L
#include "conn.h"
#include "json_get.h"

#include "start_parse.h"

#include "log.h"

#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

/* A resume may arrive before the connection's hello is written (the client
 * need not wait for it): the events its placeholder session has not written
 * yet move to the connection's own queue, so that they still come first
 * whichever session the connection ends up with (PROTOCOL.md: every
 * connection opens with hello, seq 1). */
static void carry_unsent(srv_conn *c) {
    srv_session *ss = c->ss;
    pthread_mutex_lock(&ss->lock);
    uint64_t seq;
    while ((seq = srv_ring_next_locked(ss, &ss->sent_upto, 0)) != 0) {
        const srv_event *ev = &ss->ring[seq % SRV_EVENT_RING];
        char *json = malloc(ev->len + 1);
        if (json) {
            memcpy(json, ev->json, ev->len);
            json[ev->len] = 0;
            srv_conn_say(c, json);
        }
        ss->sent_upto = seq;
    }
    pthread_mutex_unlock(&ss->lock);
}

/* Attaches an existing (detached) session to this connection. */
static void on_resume(srv *s, srv_conn *c, const cJSON *msg) {
    const char *id, *token;
    uint64_t last_seq;
    char why[128];
    if (srv_resume_parse(msg, &id, &token, &last_seq, why, sizeof why)) { /* start_parse.c */
        srv_session_error(s, c->ss, "bad_resume", why, 0);
        return;
    }
    if (c->ss->state != SESS_NEW) {
        srv_session_error(s, c->ss, "bad_resume", "resume must be the first message", 0);
        return;
    }
    carry_unsent(c);
    srv_session *old = srv_session_find(s, id);
    if (!old && s->persist) { /* another instance's session? */
        int rc = srv_checkpoint_restore(s, c->ss, id, token, last_seq);
        if (rc <= 0) return;
    }
    if (!old || strcmp(old->token, token) != 0 || old == c->ss) {
        if (old) srv_session_unref(s, old);
        srv_session_error(s, c->ss, "unknown_session", "no such session, or a wrong token", 0);
        return;
    }
    if (old->owner != c->ss->owner) { /* another key's session: as if it did not exist */
        srv_session_unref(s, old);
        srv_session_error(s, c->ss, "unknown_session", "no such session, or a wrong token", 0);
        return;
    }
    if (old->wsi) {
        srv_session_unref(s, old);
        srv_session_error(s, c->ss, "session_attached", "the session has a live connection", 0);
        return;
    }
    if (!srv_session_slot_free(s, c->ss)) {
        srv_session_unref(s, old);
        return;
    }
    /* drop the placeholder session of this connection, adopt the old one */
    srv_session *placeholder = c->ss;
    placeholder->wsi = NULL;
    placeholder->detached_at = srv_now();
    srv_session_unref(s, placeholder);
    c->ss = old; /* keeps the ref taken by find */
    pthread_mutex_lock(&old->lock);
    old->wsi = c->wsi;
    old->detached_at = 0;
    old->closing = 0;
    uint64_t have = last_seq;
    if (have >= old->next_seq) have = old->next_seq - 1;
    int lost = have + 1 < old->first_kept;
    old->sent_upto = have < old->first_kept ? old->first_kept - 1 : have;
    cJSON *e = cJSON_CreateObject();
    if (e) {
        cJSON_AddStringToObject(e, "type", "resumed");
        cJSON_AddStringToObject(e, "session", old->id_str);
        cJSON_AddNumberToObject(e, "offset", (double)old->units_in);
        cJSON_AddNumberToObject(e, "durable", (double)srv_durable_units_locked(s, old));
        cJSON_AddBoolToObject(e, "events_lost", lost);
        srv_session_emit_locked(s, old, e);
    }
    pthread_mutex_unlock(&old->lock);
    atomic_fetch_add(&s->m.sessions_resumed, 1);
    sotto_log(SOTTO_LOG_INFO, old->id, "resumed at offset %llu", (unsigned long long)old->units_in);
}

static void on_text(srv *s, srv_conn *c) {
    cJSON *msg = cJSON_ParseWithLength((const char *)c->rx, c->rx_len);
    const char *type = msg ? srv_jstr(msg, "type") : NULL;
    if (!msg || !cJSON_IsObject(msg)) {
        srv_session_error(s, c->ss, "bad_json", "control messages must be JSON objects", 0);
    } else if (!type) {
        srv_session_error(s, c->ss, "bad_message", "a control message needs a \"type\"", 0);
    } else if (!strcmp(type, "start")) {
        srv_session_start(s, c->ss, msg);
    } else if (!strcmp(type, "flush")) {
        srv_session_stop(s, c->ss, 0);
    } else if (!strcmp(type, "stop")) {
        srv_session_stop(s, c->ss, 1);
    } else if (!strcmp(type, "resume")) {
        on_resume(s, c, msg);
    } else if (!strcmp(type, "ping")) {
        srv_session_emit(s, c->ss, cJSON_Parse("{\"type\":\"pong\"}"));
    } else {
        char why[160];
        snprintf(why, sizeof why, "unknown message type '%.64s'", type);
        srv_session_error(s, c->ss, "unknown_type", why, 0);
    }
    cJSON_Delete(msg);
}

static void v1_receive(srv *s, srv_conn *c, int binary) {
    if (!srv_conn_session_ready(s, c)) return;
    if (binary)
        srv_session_audio(s, c->ss, c->rx, c->rx_len);
    else
        on_text(s, c);
}

static int v1_open(srv *s, srv_conn *c, const char *uri, const char *full) {
    if (srv_conn_session_open(s, c)) return -1;
    srv_conn_session_admit(s, c, full, !strcmp(uri, "/v1/stream") || !strcmp(uri, "/"), 0);
    cJSON *e = cJSON_CreateObject();
    if (e && !c->ss->closing) {
        cJSON_AddStringToObject(e, "type", "hello");
        cJSON_AddStringToObject(e, "protocol", "sotto.v1");
        srv_session_emit(s, c->ss, e);
    } else {
        cJSON_Delete(e);
    }
    return 0;
}

static void v1_close(srv *s, srv_conn *c) { srv_conn_session_close(s, c, 0); /* resumable */ }

const srv_conn_kind srv_conn_v1 = {
    .name = "sotto.v1",
    .read = SRV_READ_SESSION,
    .open = v1_open,
    .receive = v1_receive,
    .timer = srv_conn_session_timer,
    .close = v1_close,
};
