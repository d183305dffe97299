/* conn_dialect.c - the compatibility dialects' connections (/v1/realtime,
 * /v1/listen; compat.h): the dialect turns the client's messages into session
 * operations through srv_link_*, and each session event into its own
 * messages (the kind's translator). Dialects have no resume: a session ends
 * with its connection. The service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"
#include "conn.h"

#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

struct srv_link { srv_conn c; }; /* a dialect's view of a connection is the connection itself */

static srv_conn *L(srv_link *l) { return (srv_conn *)l; }
/* a dialect's connection always has its wsi (srv_conn_write, the gateway), and through it the server */
srv *srv_link_srv(srv_link *l) { return lws_context_user(lws_get_context(L(l)->wsi)); }
srv_session *srv_link_session(srv_link *l) { return L(l)->ss; }
int srv_link_started(const srv_link *l) { return ((const srv_conn *)l)->ss->state != SESS_NEW; }

int srv_link_start(srv_link *l, const cJSON *start_msg) {
    srv_session *ss = L(l)->ss;
    srv_session_start(srv_link_srv(l), ss, start_msg);
    pthread_mutex_lock(&ss->lock); /* dialects have no resume: no checkpoints */
    free(ss->start_json);
    ss->start_json = NULL;
    pthread_mutex_unlock(&ss->lock);
    return ss->state != SESS_NEW ? 0 : -1;
}

void srv_link_audio(srv_link *l, const void *data, size_t len) {
    srv_session_audio(srv_link_srv(l), L(l)->ss, data, len);
}
void srv_link_flush(srv_link *l, int end_of_stream) { srv_session_stop(srv_link_srv(l), L(l)->ss, end_of_stream); }
void srv_link_note(srv_link *l, cJSON *ev) { srv_session_emit(srv_link_srv(l), L(l)->ss, ev); }

void srv_link_send(srv_link *l, char *json) {
    srv_conn *c = L(l);
    if (srv_conn_say(c, json)) return;
    if (c->wsi) lws_callback_on_writable(c->wsi);
}

void srv_link_close_after(srv_link *l, int status) {
    L(l)->close_after = status ? status : LWS_CLOSE_STATUS_NORMAL;
}

/* ---- the kinds ------------------------------------------------------------------------- */

/* The dialect of a URI (gateway.c routes only these two here). */
static const srv_dialect *dialect_for(const char *uri) {
    return !strcmp(uri, "/v1/realtime") ? &srv_dialect_openai_rt : &srv_dialect_deepgram;
}

static int dialect_open(srv *s, srv_conn *c, const char *uri, const char *full) {
    if (srv_conn_session_open(s, c)) return -1;
    const srv_dialect *d = c->d = dialect_for(uri);
    if (!(c->dst = d->open((srv_link *)c, c->wsi))) return -1;
    srv_conn_session_admit(s, c, full, 1, 1); /* a dialect's session starts with its connection */
    if (!c->ss->closing && d->welcome) d->welcome(c->dst, (srv_link *)c);
    return 0;
}

static void dialect_receive(srv *s, srv_conn *c, int binary) {
    if (srv_conn_session_ready(s, c)) c->d->receive(c->dst, (srv_link *)c, binary, c->rx, c->rx_len);
}

static void dialect_translate(srv *s, srv_conn *c, const srv_event *ev) {
    (void)s;
    c->d->translate(c->dst, (srv_link *)c, ev);
}

static void dialect_close(srv *s, srv_conn *c) {
    srv_conn_session_close(s, c, 1); /* no resume: the session goes at the next reap */
    if (c->d && c->dst) c->d->close(c->dst);
    c->dst = NULL;
}

/* /v1/realtime and /v1/listen: the dialect (compat.h) is the connection's c->d. */
const srv_conn_kind srv_conn_dialect = {
    .name = "dialect",
    .read = SRV_READ_SESSION,
    .open = dialect_open,
    .receive = dialect_receive,
    .translate = dialect_translate,
    .timer = srv_conn_session_timer,
    .close = dialect_close,
};
