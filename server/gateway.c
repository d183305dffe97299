/* gateway.c - the libwebsockets gateway: the one protocol callback, the
 * connection counts, message assembly within the size limits, and the one
 * writer loop. What a connection does is its kind's (conn.h). Runs on the
 * service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "conn.h"

#include "log.h"

#include <ev.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

/* ---- admission: connection counts, per client address (service thread) -------------- */

typedef struct srv_ip_count ip_count;
struct srv_ip_count {
    char ip[64];
    int n;
};

static ip_count *ip_find(srv *s, const char *ip) {
    for (int i = 0; i < s->n_conn_ips; i++)
        if (!strcmp(s->conn_ips[i].ip, ip)) return &s->conn_ips[i];
    return NULL;
}

/* Counts c's connection, or says why not: NULL (admitted) or the reason. */
static const char *conn_admit(srv *s, struct lws *wsi, srv_conn *c) {
    lws_get_peer_simple(wsi, c->ip, sizeof c->ip);
    ip_count *ic = ip_find(s, c->ip);
    if (s->n_conns >= s->opt.max_connections) return "the server has no free connection slot (--max-connections)";
    if (ic && ic->n >= s->opt.max_connections_per_ip)
        return "too many connections from this address (--max-connections-per-ip)";
    if (!ic) {
        if (s->n_conn_ips == s->cap_conn_ips) {
            int cap = s->cap_conn_ips ? s->cap_conn_ips * 2 : 64;
            ip_count *n = realloc(s->conn_ips, sizeof *n * (size_t)cap);
            if (!n) return "out of memory";
            s->conn_ips = n;
            s->cap_conn_ips = cap;
        }
        ic = &s->conn_ips[s->n_conn_ips++];
        snprintf(ic->ip, sizeof ic->ip, "%s", c->ip);
        ic->n = 0;
    }
    ic->n++;
    s->n_conns++;
    c->counted = 1;
    atomic_store(&s->m.connections, s->n_conns);
    return NULL;
}

static void conn_release(srv *s, srv_conn *c) {
    if (!c->counted) return;
    c->counted = 0;
    s->n_conns--;
    atomic_store(&s->m.connections, s->n_conns);
    ip_count *ic = ip_find(s, c->ip);
    if (ic && --ic->n == 0) *ic = s->conn_ips[--s->n_conn_ips];
}


/* ---- writing ---------------------------------------------------------------------- */

/* Makes room for a message of len bytes (after LWS_PRE) in c->tx. */
static int ensure_tx(srv_conn *c, size_t len) {
    if (c->tx_cap >= LWS_PRE + len) return 0;
    unsigned char *nb = realloc(c->tx, LWS_PRE + len + 256);
    if (!nb) return -1;
    c->tx = nb;
    c->tx_cap = LWS_PRE + len + 256;
    return 0;
}

int srv_conn_say_bounded(srv_conn *c, char *json, int max) {
    if (!json) return -1;
    if (max > 0 && c->n_outq >= max) {
        free(json);
        return -1;
    }
    if (c->n_outq == c->cap_outq) {
        int cap = c->cap_outq ? c->cap_outq * 2 : 16;
        char **nq = realloc(c->outq, sizeof(char *) * (size_t)cap);
        if (!nq) {
            free(json);
            return -1;
        }
        c->outq = nq;
        c->cap_outq = cap;
    }
    c->outq[c->n_outq++] = json;
    return 0;
}

int srv_conn_say(srv_conn *c, char *json) { return srv_conn_say_bounded(c, json, 0); }

char *srv_conn_error_json(const char *code, const char *msg, int fatal) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    cJSON_AddStringToObject(e, "type", "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddBoolToObject(e, "fatal", fatal);
    char *j = cJSON_PrintUnformatted(e);
    cJSON_Delete(e);
    return j;
}

uint64_t srv_ring_next_locked(srv_session *ss, uint64_t *cursor, int viewer_only) {
    uint64_t last = ss->next_seq - 1, seq = *cursor + 1;
    if (seq < ss->first_kept) seq = ss->first_kept;
    while (seq <= last) {
        const srv_event *ev = &ss->ring[seq % SRV_EVENT_RING];
        if (!(viewer_only && !ev->viewer) && !(ev->superseded && last - seq > SRV_LAG_SKIP)) break;
        seq++;
    }
    if (seq <= last) return seq;
    *cursor = last;
    return 0;
}

/* Writes the first message of the connection's own queue; -1: close. */
static int write_outq_one(srv *s, srv_conn *c) {
    char *msg = c->outq[0];
    memmove(c->outq, c->outq + 1, sizeof(char *) * (size_t)--c->n_outq);
    size_t len = strlen(msg);
    int bad = ensure_tx(c, len);
    if (!bad) memcpy(c->tx + LWS_PRE, msg, len);
    free(msg);
    if (bad || lws_write(c->wsi, c->tx + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len) return -1;
    atomic_fetch_add(&s->m.events_sent, 1);
    return 0;
}

/* Every kind's writer: the own queue, then ring events from the cursor (as
 * they are, or through the kind's translator), up to 64 per callback while
 * the socket takes them; then another callback if more may follow. A close
 * comes in a writeable callback of its own, never in the one that wrote the
 * last message (a browser may otherwise see the close before the message). */
int srv_conn_write(srv *s, srv_conn *c) {
    struct lws *wsi = c->wsi;
    int feed = c->kind->read == SRV_READ_FEED, wrote = 0;
    for (int n = 0; n < 64; n++) {
        if (c->n_outq) {
            if (write_outq_one(s, c)) return -1;
            wrote = 1;
            if (lws_send_pipe_choked(wsi)) break;
            continue;
        }
        if (c->close_after || !c->ss) {
            if (wrote) break;
            lws_close_reason(wsi, (enum lws_close_status)(c->close_after ? c->close_after : LWS_CLOSE_STATUS_NORMAL),
                             (unsigned char *)"bye", 3);
            return -1;
        }
        srv_session *ss = c->ss;
        pthread_mutex_lock(&ss->lock);
        uint64_t *cursor = feed ? &c->cursor : &ss->sent_upto;
        if (feed && *cursor + 1 < ss->first_kept) { /* fell out of the ring: never slows the speaker */
            pthread_mutex_unlock(&ss->lock);
            srv_conn_say(c, srv_conn_error_json("too_slow", "the viewer fell too far behind; reconnect", 1));
            c->close_after = LWS_CLOSE_STATUS_NORMAL;
            atomic_fetch_add(&s->m.feed_viewers_dropped, 1);
            continue;
        }
        uint64_t seq = srv_ring_next_locked(ss, cursor, feed);
        if (!seq) { /* everything written: the end, or wait for more */
            int end = feed ? ss->state == SESS_DONE : ss->closing;
            pthread_mutex_unlock(&ss->lock);
            if (!end) return 0;
            if (wrote) break;
            if (!feed && c->close_status)
                lws_close_reason(wsi, (enum lws_close_status)c->close_status, (unsigned char *)"error", 5);
            else
                lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"done", 4);
            return -1;
        }
        const srv_event *ev = &ss->ring[seq % SRV_EVENT_RING];
        *cursor = seq;
        if (c->kind->translate) { /* typed, without the lock; its messages join the own queue */
            srv_event copy;
            int ok = srv_event_copy_fields(&copy, ev) == 0;
            pthread_mutex_unlock(&ss->lock);
            if (!ok) return -1;
            c->kind->translate(s, c, &copy);
            srv_event_clear(&copy);
            continue;
        }
        size_t len = ev->len;
        int is_done = ev->type == SRV_EV_DONE;
        if (ensure_tx(c, len)) {
            pthread_mutex_unlock(&ss->lock);
            return -1;
        }
        memcpy(c->tx + LWS_PRE, ev->json, len); /* straight from the ring */
        pthread_mutex_unlock(&ss->lock);
        if (lws_write(wsi, c->tx + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len) return -1;
        wrote = 1;
        atomic_fetch_add(&s->m.events_sent, 1);
        if (feed && is_done) c->close_after = LWS_CLOSE_STATUS_NORMAL;
        if (lws_send_pipe_choked(wsi)) break;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* ---- opening ------------------------------------------------------------------------ */

static const srv_conn_kind *kind_for(const char *uri) {
    if (!strncmp(uri, "/v1/feeds/", 10)) return &srv_conn_viewer;
    if (!strcmp(uri, "/v1/realtime") || !strcmp(uri, "/v1/listen")) return &srv_conn_dialect;
    return &srv_conn_v1; /* which refuses paths it does not serve */
}

static int on_established(srv *s, struct lws *wsi, srv_conn *c) {
    memset(c, 0, sizeof *c);
    c->wsi = wsi;
    char uri[256] = "";
    lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
    const char *full = conn_admit(s, wsi, c);
    c->t_open = c->t_last_msg = srv_now();
    c->kind = kind_for(uri);
    int rc = c->kind->open(s, c, uri, full);
    if (!rc) lws_callback_on_writable(wsi);
    return rc;
}

/* ---- receiving ----------------------------------------------------------------------------- */

/* Messages over --max-frame-bytes are discarded with a non-fatal error, up to
 * this much; one that is (or announces a frame that would be) larger closes
 * the connection with 1009 at once. */
static size_t hard_frame_limit(const srv *s) {
    size_t lim = (size_t)s->opt.max_frame_bytes * 16;
    return lim < (size_t)s->opt.max_frame_bytes ? (size_t)s->opt.max_frame_bytes : lim;
}

static int on_receive(srv *s, struct lws *wsi, srv_conn *c, const void *in, size_t len) {
    if (!c->kind) return -1;
    if (lws_is_first_fragment(wsi)) c->rx_len = 0, c->rx_overflow = 0, c->rx_total = 0;
    size_t remaining = lws_remaining_packet_payload(wsi);
    c->rx_total += len;
    if (c->rx_total > hard_frame_limit(s) || remaining > hard_frame_limit(s) - c->rx_total) {
        char why[96];
        int n = snprintf(why, sizeof why, "message over %zu bytes", hard_frame_limit(s));
        lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)why, (size_t)n);
        return -1;
    }
    if (!c->rx_overflow) {
        if (c->rx_len + len > (size_t)s->opt.max_frame_bytes) {
            c->rx_overflow = 1;
        } else {
            if (c->rx_len + len > c->rx_cap) {
                size_t cap = (c->rx_len + len) * 2;
                if (cap > (size_t)s->opt.max_frame_bytes) cap = (size_t)s->opt.max_frame_bytes;
                unsigned char *nb = realloc(c->rx, cap);
                if (!nb) return -1;
                c->rx = nb;
                c->rx_cap = cap;
            }
            if (len) memcpy(c->rx + c->rx_len, in, len); /* c->rx is NULL before the first byte */
            c->rx_len += len;
        }
    }
    if (!lws_is_final_fragment(wsi) || remaining) return 0;
    c->t_last_msg = srv_now();
    c->kind->receive(s, c, lws_frame_is_binary(wsi));
    c->rx_len = 0;
    lws_callback_on_writable(wsi);
    return 0;
}

/* RFC 6455 7.4: the close codes an endpoint may send. */
static int close_code_ok(unsigned code) {
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

/* The peer's close frame, which lws echoes: an invalid code (or a 1-byte
 * body) is answered with 1002 instead. */
static int on_peer_close(struct lws *wsi, srv_conn *c, unsigned char *in, size_t len) {
    if (c) c->peer_closed = 1;
    if (len == 0) return 0;
    if (len >= 2 && close_code_ok((unsigned)(in[0] << 8 | in[1]))) return 0;
    if (len >= 2) { /* rewrite the echo in place */
        in[0] = LWS_CLOSE_STATUS_PROTOCOL_ERR >> 8;
        in[1] = LWS_CLOSE_STATUS_PROTOCOL_ERR & 0xff;
        return 0;
    }
    lws_close_reason(wsi, LWS_CLOSE_STATUS_PROTOCOL_ERR, (unsigned char *)"bad close", 9);
    return -1;
}

static void on_closed(srv *s, srv_conn *c) {
    conn_release(s, c);
    if (c->kind && c->kind->close) c->kind->close(s, c);
    c->kind = NULL;
    for (int i = 0; i < c->n_outq; i++) free(c->outq[i]);
    free(c->outq);
    c->outq = NULL;
    c->n_outq = c->cap_outq = 0;
    free(c->rx);
    free(c->tx);
    c->rx = c->tx = NULL;
}

/* ---- the callback ------------------------------------------------------------------ */

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
    /* the server is the context's user pointer (srv_gateway_create) */
    srv *s = wsi ? lws_context_user(lws_get_context(wsi)) : NULL;
    if (!s) return 0;
    srv_conn *c = user;
    int r;
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT: /* lws hands a CONNECT request over as a raw socket: refuse it */
        return -1;
    case LWS_CALLBACK_HTTP:
        return srv_conn_http(s, wsi, c, in ? (const char *)in : "/");
    case LWS_CALLBACK_HTTP_BODY:
        if ((r = srv_conn_http_body(s, wsi, c, in, len)) != 1) return r;
        break;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if ((r = srv_conn_http_body_done(s, wsi, c)) != 1) return r;
        break;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if ((r = srv_conn_http_writeable(s, wsi, c)) != 1) return r;
        break;
    case LWS_CALLBACK_CLOSED_HTTP:
        srv_conn_http_closed(s, c);
        break;
    case LWS_CALLBACK_ESTABLISHED:
        return on_established(s, wsi, c);
    case LWS_CALLBACK_RECEIVE:
        return on_receive(s, wsi, c, in, len);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        return on_peer_close(wsi, c, in, len);
    case LWS_CALLBACK_TIMER:
        if (c && c->kind && c->kind->timer && !c->peer_closed) c->kind->timer(s, c);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (!c || !c->kind || c->peer_closed) return -1;
        return srv_conn_write(s, c);
    case LWS_CALLBACK_CLOSED:
        if (c) on_closed(s, c);
        if (atomic_load(&s->draining)) srv_wake(s); /* maybe the last one */
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        srv_service_wakeup(s);
        return 0;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* The same endpoints under the subprotocol names browsers offer with a key
 * (OpenAI: "realtime", "openai-insecure-api-key.KEY", "openai-beta.realtime-v1";
 * Deepgram: "token", KEY or "bearer", TOKEN): lws accepts a handshake only
 * with a protocol it knows and echoes the one it selected, which browsers
 * require. The wake-up broadcast is handled once, by protocol 0. */
static int alias_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                          size_t len) {
    if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED) return 0;
    return callback(wsi, reason, user, in, len);
}

static const struct lws_protocols k_protocols[] = {
    {"sotto.v1", callback, sizeof(srv_conn), 65536, 0, NULL, 0},
    {"realtime", alias_callback, sizeof(srv_conn), 65536, 0, NULL, 0},
    {"openai-beta.realtime-v1", alias_callback, sizeof(srv_conn), 65536, 0, NULL, 0},
    {"token", alias_callback, sizeof(srv_conn), 65536, 0, NULL, 0},
    {"bearer", alias_callback, sizeof(srv_conn), 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void lws_logger(int level, const char *line) {
    sotto_log(level & LLL_ERR ? SOTTO_LOG_ERROR : SOTTO_LOG_DEBUG, 0, "lws: %.*s",
              (int)strcspn(line, "\n"), line);
}

int srv_gateway_create(srv *s) {
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_logger);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = s->opt.port;
    info.iface = s->opt.host[0] ? s->opt.host : NULL;
    info.protocols = k_protocols;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
    info.user = s; /* every callback finds the server through its context */
    info.pt_serv_buf_size = 32 * 1024;
    /* lws's own timeouts: handshakes and HTTP requests (timeout_secs), idle
       HTTP/1.1 keep-alive connections, headers held idle, dead peers (TCP
       keep-alive probes) */
    info.timeout_secs = 10;
    info.timeout_secs_ah_idle = 10;
    info.keepalive_timeout = 5;
    info.ka_time = 60;
    info.ka_probes = 3;
    info.ka_interval = 10;
    if (s->opt.tls_cert[0]) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = s->opt.tls_cert;
        info.ssl_private_key_filepath = s->opt.tls_key;
    }
    /* The service thread runs a libev loop (epoll) that lws joins through its event-lib
       plugin (libwebsockets-evlib-ev). lws's own loop is poll(), which walks every open
       connection on every wake-up: with 1,000 idle connections a ping's round trip cost
       the server 15x the CPU (docs/PERF.md). Without the plugin, the poll() loop serves. */
    void *loops[1] = {ev_loop_new(EVFLAG_AUTO)};
    if (loops[0]) {
        info.options |= LWS_SERVER_OPTION_LIBEV;
        info.foreign_loops = loops;
        s->ctx = lws_create_context(&info);
        if (s->ctx) {
            s->evloop = loops[0];
        } else {
            ev_loop_destroy(loops[0]);
            SOTTO_WARN("lws did not start on the libev loop (no libwebsockets-evlib-ev? the port in use? "
                       "unreadable TLS files?): trying its poll() loop");
            info.options &= ~(uint64_t)LWS_SERVER_OPTION_LIBEV;
            info.foreign_loops = NULL;
        }
    }
    if (!s->ctx) s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        SOTTO_ERROR("cannot listen on %s:%d (port in use? unreadable TLS files?)",
                    s->opt.host[0] ? s->opt.host : "*", s->opt.port);
        return -1;
    }
    SOTTO_INFO("listening on %s://%s:%d", s->opt.tls_cert[0] ? "https" : "http",
               s->opt.host[0] ? s->opt.host : "0.0.0.0", s->opt.port);
    return 0;
}

void srv_gateway_loop(srv *s) {
    while (!atomic_load(&s->stop)) {
        if (s->evloop) ev_run(s->evloop, 0); /* until service_wakeup sees stop */
        else if (lws_service(s->ctx, 0) < 0) break;
    }
}

void srv_gateway_destroy(srv *s) {
    if (s->ctx) lws_context_destroy(s->ctx);
    if (s->evloop) ev_loop_destroy(s->evloop);
    s->evloop = NULL;
    free(s->conn_ips);
    s->conn_ips = NULL;
    s->n_conn_ips = s->cap_conn_ips = 0;
    s->ctx = NULL;
}
