/* conn_http.c - HTTP requests: the upload transcription endpoints (batch.c),
 * client tokens (auth.c), then the fixed routes (http.c: health, metrics,
 * info, the page, captions). lws hands every request the same per-connection
 * memory as a WebSocket (c may be NULL for requests it serves without one).
 * Each function returns 1 when the request is not one of these, for lws's
 * default handling. The service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"
#include "conn.h"

int srv_conn_http(srv *s, struct lws *wsi, srv_conn *c, const char *uri) {
    if (c) {
        int r = srv_secret_http(s, wsi, &c->sreq, uri);
        if (r != 1) return r;
        r = srv_batch_http(s, wsi, &c->breq, uri);
        if (r != 1) return r;
    }
    return srv_http_route(s, wsi, uri);
}

int srv_conn_http_body(srv *s, struct lws *wsi, srv_conn *c, const void *in, size_t len) {
    if (c && c->sreq) return srv_secret_body(c->sreq, in, len);
    if (c && c->breq) return srv_batch_body(s, wsi, c->breq, in, len);
    return 1;
}

int srv_conn_http_body_done(srv *s, struct lws *wsi, srv_conn *c) {
    if (c && c->sreq) return srv_secret_done(s, wsi, &c->sreq);
    if (c && c->breq) return srv_batch_body_done(s, wsi, &c->breq);
    return 1;
}

int srv_conn_http_writeable(srv *s, struct lws *wsi, srv_conn *c) {
    if (c && c->breq) return srv_batch_writeable(s, wsi, &c->breq);
    return 1;
}

void srv_conn_http_closed(srv *s, srv_conn *c) {
    if (!c) return;
    if (c->breq) srv_batch_closed(s, &c->breq);
    srv_secret_closed(&c->sreq);
}
