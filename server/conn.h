/* conn.h - a WebSocket connection and the kinds it can be (the service
 * thread only).
 *
 * The gateway (gateway.c) owns the lws callback: it counts connections,
 * assembles messages within the size limits, runs timers, and writes. What a
 * connection does with a message, and what it reads from its session, comes
 * from its kind, chosen by URI when the WebSocket opens:
 *   /v1/stream, /          sotto.v1 dictation        conn_v1.c
 *   /v1/realtime           OpenAI Realtime dialect   conn_dialect.c (rt_openai.c)
 *   /v1/listen             Deepgram live dialect     conn_dialect.c (dg_listen.c)
 *   /v1/feeds/NAME         read-only caption viewer  conn_viewer.c
 * HTTP requests (upload transcription, client tokens, health, metrics, the
 * page) never become WebSockets: conn_http.c.
 *
 * Writing is one loop for every kind (srv_conn_write): the connection's own
 * queue first (greetings, errors, a dialect's translated messages), then the
 * events of a session's ring from the connection's cursor, as JSON or through
 * the kind's translator. A session's own connection reads with the session's
 * cursor (sent_upto: a resume continues from it); a viewer has a cursor of its
 * own.
 */
#ifndef SOTTO_SERVER_CONN_H
#define SOTTO_SERVER_CONN_H

#include "server.h"

#include <stddef.h>
#include <stdint.h>

struct lws;
typedef struct srv_conn srv_conn;
struct srv_dialect;

/* How a connection reads a session's ring. */
typedef enum srv_read_mode {
    /* The session's own connection: every event, from ss->sent_upto; events
     * that left the ring are skipped (a resume reports them lost); it closes
     * once the session is closing and everything is written. */
    SRV_READ_SESSION,
    /* A feed viewer: the viewer events only, from its own cursor; one that
     * falls out of the ring is dropped (never slows the speaker); it closes
     * after the session's `done`. */
    SRV_READ_FEED,
} srv_read_mode;

typedef struct srv_conn_kind {
    const char *name;
    srv_read_mode read;
    /* The WebSocket is established. full is NULL, or why the connection slots
     * refuse it (the kind then says so and closes). -1 closes at once. */
    int (*open)(srv *s, srv_conn *c, const char *uri, const char *full);
    /* A complete message: c->rx[0..c->rx_len), truncated to
     * --max-frame-bytes when c->rx_overflow. */
    void (*receive)(srv *s, srv_conn *c, int binary);
    /* One ring event (typed, ring.h; a copy, without the session lock) turned
     * into the kind's own messages (srv_conn_say); NULL: its sotto.v1 JSON is
     * written as it is. */
    void (*translate)(srv *s, srv_conn *c, const srv_event *ev);
    void (*timer)(srv *s, srv_conn *c); /* NULL: no timer */
    void (*close)(srv *s, srv_conn *c); /* before the gateway frees what it owns */
} srv_conn_kind;

extern const srv_conn_kind srv_conn_v1;        /* conn_v1.c */
extern const srv_conn_kind srv_conn_dialect;   /* conn_dialect.c: OpenAI and Deepgram */
extern const srv_conn_kind srv_conn_viewer;    /* conn_viewer.c */

/* lws's per-connection memory (zeroed by lws; the gateway zeroes it again when
 * the WebSocket opens). */
struct srv_conn {
    const srv_conn_kind *kind; /* NULL: HTTP, or not open */
    struct lws *wsi;
    srv_session *ss;           /* its session; a viewer's: the published one (a ref) */
    uint64_t cursor;           /* SRV_READ_FEED: newest event sent (or skipped) */
    char **outq;               /* own messages, written before ring events (owned) */
    int n_outq, cap_outq;
    int close_after;           /* close once the own queue is written (the close status) */
    int close_status;          /* SRV_READ_SESSION: the status when the session closes (0: normal) */
    int peer_closed;           /* the client sent a close: nothing more is written */
    unsigned char *rx;         /* the message being assembled */
    size_t rx_len, rx_cap;
    int rx_overflow;
    size_t rx_total;           /* bytes of the message being received, kept or not */
    unsigned char *tx;         /* LWS_PRE + the message being written */
    size_t tx_cap;
    /* admission */
    char ip[64];               /* the client's address */
    int counted;               /* in the connection counts */
    double t_open, t_last_msg; /* monotonic: connected, last complete message */
    /* a dialect */
    const struct srv_dialect *d;
    void *dst;
    /* HTTP (conn_http.c) */
    struct srv_batch_req *breq; /* an upload being transcribed (batch.c) */
    struct srv_secret_req *sreq; /* POST /v1/realtime/client_secrets (auth.c) */
};

/* ---- the gateway (gateway.c) ------------------------------------------------------- */

/* Queues a message for the client (takes json; NULL is ignored). -1 (json
 * freed) when out of memory, or when bounded and max messages are waiting. */
int srv_conn_say(srv_conn *c, char *json);
int srv_conn_say_bounded(srv_conn *c, char *json, int max);
/* {"type":"error","code":..,"message":..,"fatal":..}, malloc'd (NULL: no memory). */
char *srv_conn_error_json(const char *code, const char *msg, int fatal);
/* The next ring event after *cursor for a reader (superseded ones skipped
 * when it lags), or 0 with *cursor moved to the newest. Session lock held. */
uint64_t srv_ring_next_locked(srv_session *ss, uint64_t *cursor, int viewer_only);
/* Writes what the connection has to send (a writeable callback); -1: close. */
int srv_conn_write(srv *s, srv_conn *c);

/* ---- what the session kinds share (conn_session.c) ------------------------------------ */

/* A new session for the connection (the connection's ref); -1: no memory. */
int srv_conn_session_open(srv *s, srv_conn *c);
/* Decides whether the connection may have its session: a connection slot
 * (full: why not), a known path, a key or token, not draining, a free session
 * slot, and with starts_now (a dialect's session starts with its connection)
 * the overload policy; otherwise a fatal error is queued and the session
 * closes. Sets the session's owner. */
void srv_conn_session_admit(srv *s, srv_conn *c, const char *full, int path_ok, int starts_now);
/* A fatal error; the connection closes with status once it is written. */
void srv_conn_session_refuse(srv *s, srv_conn *c, const char *code, const char *msg, int status);
/* 1 if a complete message may be acted on; 0 if the session has failed (the
 * connection is closing) or the message was too large (an error is queued). */
int srv_conn_session_ready(srv *s, srv_conn *c);
/* --start-timeout-s and --idle-timeout-s. */
void srv_conn_session_timer(srv *s, srv_conn *c);
/* Detaches the session (resumable for --resume-grace-s unless now_gone). */
void srv_conn_session_close(srv *s, srv_conn *c, int now_gone);

/* ---- HTTP (conn_http.c) ------------------------------------------------------------------ */

int srv_conn_http(srv *s, struct lws *wsi, srv_conn *c, const char *uri);
int srv_conn_http_body(srv *s, struct lws *wsi, srv_conn *c, const void *in, size_t len);
int srv_conn_http_body_done(srv *s, struct lws *wsi, srv_conn *c);
int srv_conn_http_writeable(srv *s, struct lws *wsi, srv_conn *c);
void srv_conn_http_closed(srv *s, srv_conn *c);

#endif
