/* conn_session.c - what the connection kinds that own a session (sotto.v1 and
 * the dialects) share: opening it, admitting it, its timeouts, letting go of
 * it. The service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "conn.h"

#include "log.h"

#include <libwebsockets.h>
#include <stdio.h>

int srv_conn_session_open(srv *s, srv_conn *c) {
    c->ss = srv_session_new(s);
    if (!c->ss) return -1;
    c->ss->wsi = c->wsi;
    srv_session_ref(s, c->ss); /* the connection's */
    lws_set_timer_usecs(c->wsi, (lws_usec_t)(s->opt.start_timeout_s * 1e6));
    return 0;
}

void srv_conn_session_refuse(srv *s, srv_conn *c, const char *code, const char *msg, int status) {
    srv_session_error(s, c->ss, code, msg, 1);
    c->close_status = status;
}

void srv_conn_session_admit(srv *s, srv_conn *c, const char *full, int path_ok, int starts_now) {
    int ident = -1;
    if (full) {
        srv_conn_session_refuse(s, c, "too_many_connections", full, 1013);
    } else if (!path_ok) {
        srv_session_error(s, c->ss, "not_found",
                          "WebSocket endpoints: /v1/stream, /v1/feeds/NAME, /v1/realtime, /v1/listen", 1);
    } else if (!srv_auth_check(s, c->wsi, &ident)) {
        srv_conn_session_refuse(s, c, "unauthorized",
                                "a valid API key or client token is needed (Authorization: Bearer KEY, the "
                                "Sec-WebSocket-Protocol forms or ?api_key=; docs/SECURITY.md)",
                                LWS_CLOSE_STATUS_POLICY_VIOLATION);
    } else if (atomic_load(&s->draining)) {
        srv_session_error(s, c->ss, "shutting_down", "the server is shutting down", 1);
    } else if (srv_sessions_busy(s, c->ss) >= s->opt.max_sessions) { /* fail fast: no slot now */
        atomic_fetch_add(&s->m.sessions_rejected, 1);
        srv_session_error(s, c->ss, "overloaded", "the server has no free session slot", 1);
    } else if (starts_now) {
        srv_admission_check(s, c->ss);
    }
    c->ss->owner = ident;
    if (c->ss->closing) atomic_fetch_add(&s->m.connections_rejected, 1);
}

int srv_conn_session_ready(srv *s, srv_conn *c) {
    if (!c->ss) return 0;
    pthread_mutex_lock(&c->ss->lock);
    int fatal = c->ss->fatal;
    pthread_mutex_unlock(&c->ss->lock);
    if (fatal) return 0; /* refused or failed: the connection closes once the error is written */
    if (c->rx_overflow) {
        char why[128];
        snprintf(why, sizeof why, "messages are limited to %d bytes", s->opt.max_frame_bytes);
        srv_session_error(s, c->ss, "frame_too_large", why, 0);
        return 0;
    }
    return 1;
}

/* The connection's timer: a session not started (or resumed) within
 * --start-timeout-s, or a running one whose client completed no message for
 * --idle-timeout-s (this also bounds a frame that stalls half-way; the time a
 * model takes to load does not count), gets a fatal error and is closed; lws
 * closes the socket 5 s later if the client does not read it. Otherwise the
 * timer is set for the next deadline. */
void srv_conn_session_timer(srv *s, srv_conn *c) {
    srv_session *ss = c->ss;
    if (!ss) return;
    pthread_mutex_lock(&ss->lock);
    srv_sess_state st = ss->state;
    int closing = ss->closing;
    pthread_mutex_unlock(&ss->lock);
    if (closing || st >= SESS_STOPPING) return; /* ends by itself */
    if (st == SESS_LOADING) { /* the client waits for its model, not idle: look again in 1 s */
        c->t_last_msg = srv_now();
        lws_set_timer_usecs(c->wsi, 1000000);
        return;
    }
    int started = st != SESS_NEW;
    double due = started ? c->t_last_msg + s->opt.idle_timeout_s : c->t_open + s->opt.start_timeout_s;
    double now = srv_now();
    if (now < due) {
        lws_set_timer_usecs(c->wsi, (lws_usec_t)((due - now) * 1e6) + 1000);
        return;
    }
    char why[200];
    if (started)
        snprintf(why, sizeof why, "no message for %g s (--idle-timeout-s): send audio, or stop",
                 s->opt.idle_timeout_s);
    else
        snprintf(why, sizeof why, "no start (or resume) within %g s of connecting (--start-timeout-s)",
                 s->opt.start_timeout_s);
    atomic_fetch_add(&s->m.timeouts, 1);
    srv_conn_session_refuse(s, c, started ? "idle_timeout" : "start_timeout", why,
                            LWS_CLOSE_STATUS_POLICY_VIOLATION);
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 5);
    lws_callback_on_writable(c->wsi);
}

void srv_conn_session_close(srv *s, srv_conn *c, int now_gone) {
    srv_session *ss = c->ss;
    if (!ss) return;
    pthread_mutex_lock(&ss->lock);
    ss->wsi = NULL;
    ss->detached_at = srv_now();
    if (now_gone) ss->detached_at -= s->opt.resume_grace_s + 1; /* goes at the next reap */
    pthread_mutex_unlock(&ss->lock);
    sotto_log(SOTTO_LOG_DEBUG, ss->id, "connection closed");
    srv_session_unref(s, ss);
    c->ss = NULL;
    srv_wake(s); /* reaps: expired, or more detached than --max-detached */
}
