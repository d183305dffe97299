/* link.c - sotto-mic's WebSocket session (docs/PROTOCOL.md) on the
 * libwebsockets client: start, stream packets, show events, resume after a
 * dropped connection (resending from the server's acknowledged offset),
 * stop and wait for `done`. Everything here runs on the main thread. */
#define _POSIX_C_SOURCE 200809L
#include "log.h"
#include "mic.h"

#include <cjson/cJSON.h>
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define STOP_TIMEOUT_S 120.0 /* after `stop`, how long `done` may take */
#define RECONNECT_US 1000000 /* between connection attempts */

typedef struct mlink {
    const mic_link_opts *o;
    mic_packets *pk;
    atomic_int *interrupt;
    struct lws_context *ctx;
    struct lws *wsi;
    lws_sorted_usec_list_t sul_tick, sul_reconnect;
    char url[1024];
    const char *host, *path;
    int port, tls;
    char session[64], token[128];
    long long last_seq;   /* newest event seen (replays after a resume are skipped) */
    long long last_final; /* utterance of the newest final shown (finals a restore replays are skipped) */
    size_t next;          /* next packet to send on this connection */
    int streaming;        /* ready/resumed seen on this connection */
    int stop_sent, done, failed, closing, reconnects, dropped_once;
    double stop_at;
    char ctrl[2048];      /* a control message waiting to be sent */
    int ctrl_len;
    unsigned char tx[LWS_PRE + 4096];
    char *rx;
    size_t rx_len, rx_cap;
    FILE *out;
    int tty;
} mlink;

static struct lws_context *_Atomic g_ctx;

void mic_link_wake(void *unused) {
    (void)unused;
    struct lws_context *c = atomic_load(&g_ctx);
    if (c) lws_cancel_service(c);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- display --------------------------------------------------------------------- */

static int term_cols(void) {
    struct winsize w;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 10) return w.ws_col;
    return 100;
}

/* The current utterance on one line: committed text, then tentative text dimmed. */
static void show_partial(mlink *L, const char *committed, const char *tentative) {
    if (!L->tty || L->o->quiet) return;
    size_t cl = strlen(committed), tl = strlen(tentative), room = (size_t)term_cols() - 1;
    /* keep the end of the line visible */
    size_t skip = cl + tl > room ? cl + tl - room : 0;
    size_t cskip = skip < cl ? skip : cl, tskip = skip > cl ? skip - cl : 0;
    printf("\r\033[K%s\033[2m%s\033[0m", committed + cskip, tentative + tskip);
    fflush(stdout);
}

static void show_final(mlink *L, const char *text) {
    while (*text == ' ') text++;
    if (L->tty && !L->o->quiet) printf("\r\033[K");
    printf("%s\n", text);
    fflush(stdout);
    if (L->out) {
        fprintf(L->out, "%s\n", text);
        fflush(L->out);
    }
}

/* ---- messages ---------------------------------------------------------------------- */

static void queue_ctrl(mlink *L, cJSON *msg) {
    char *s = msg ? cJSON_PrintUnformatted(msg) : NULL;
    cJSON_Delete(msg);
    if (!s) return;
    size_t n = strlen(s);
    if (n < sizeof L->ctrl) {
        memcpy(L->ctrl, s, n);
        L->ctrl_len = (int)n;
    }
    free(s);
    if (L->wsi) lws_callback_on_writable(L->wsi);
}

static void send_hello(mlink *L) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return;
    if (L->session[0]) {
        cJSON_AddStringToObject(m, "type", "resume");
        cJSON_AddStringToObject(m, "session", L->session);
        cJSON_AddStringToObject(m, "token", L->token);
        cJSON_AddNumberToObject(m, "last_seq", (double)L->last_seq);
    } else {
        cJSON_AddStringToObject(m, "type", "start");
        cJSON_AddStringToObject(m, "encoding", "opus");
        cJSON_AddNumberToObject(m, "sample_rate", L->pk->rate);
        cJSON_AddNumberToObject(m, "channels", 1);
        if (L->o->weights) cJSON_AddStringToObject(m, "weights", L->o->weights);
        if (L->o->language) cJSON_AddStringToObject(m, "language", L->o->language);
        if (L->o->task) cJSON_AddStringToObject(m, "task", L->o->task);
    }
    queue_ctrl(L, m);
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void on_event(mlink *L, const cJSON *e) {
    const char *type = jstr(e, "type");
    long long seq = (long long)jnum(e, "seq");
    if (!strcmp(type, "hello")) return; /* per connection; its seq is the connection's own */
    if (seq <= L->last_seq) return;     /* already seen (replayed after a resume) */
    L->last_seq = seq;
    if (!strcmp(type, "ready")) {
        if (L->session[0] && !strcmp(L->session, jstr(e, "session"))) return; /* resumed: not a new session */
        snprintf(L->session, sizeof L->session, "%s", jstr(e, "session"));
        snprintf(L->token, sizeof L->token, "%s", jstr(e, "token"));
        L->streaming = 1;
        L->next = 0;
        L->last_final = 0;
        SOTTO_INFO("session %s: model %s, weights %s (%.1f MB), language %s", L->session,
                   jstr(e, "model"), jstr(e, "weights"), jnum(e, "weights_bytes") / 1e6,
                   jstr(e, "language"));
    } else if (!strcmp(type, "resumed")) {
        L->next = (size_t)jnum(e, "offset");
        L->streaming = 1;
        L->stop_sent = 0; /* after the audio from the offset, `stop` again (another instance may not have it) */
        SOTTO_INFO("resumed session %s at packet %zu%s%s", L->session, L->next,
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "restored")) ? " on another instance" : "",
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "events_lost"))
                       ? " (some events were lost)"
                       : "");
    } else if (!strcmp(type, "ack")) {
        /* the server may need the audio from `durable` on for a resume (on another
           instance); older servers send only `offset` */
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "durable");
        mic_packets_ack(L->pk, (size_t)(cJSON_IsNumber(d) ? d->valuedouble : jnum(e, "offset")));
    } else if (!strcmp(type, "reconnect")) {
        SOTTO_WARN("server: %s; resuming", jstr(e, "message"));
    } else if (!strcmp(type, "partial")) {
        show_partial(L, jstr(e, "committed"), jstr(e, "tentative"));
    } else if (!strcmp(type, "commit")) {
        show_partial(L, jstr(e, "committed"), "");
    } else if (!strcmp(type, "final")) {
        long long utt = (long long)jnum(e, "utterance");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "replayed")) && utt <= L->last_final) return;
        if (utt > L->last_final) L->last_final = utt;
        show_final(L, jstr(e, "text"));
    } else if (!strcmp(type, "warning")) {
        SOTTO_WARN("server: %s: %s", jstr(e, "code"), jstr(e, "message"));
    } else if (!strcmp(type, "error")) {
        int fatal = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "fatal"));
        SOTTO_ERROR("server: %s: %s%s", jstr(e, "code"), jstr(e, "message"), fatal ? " (fatal)" : "");
        const char *c = jstr(e, "code");
        if (fatal || !strcmp(c, "unknown_session") || !strcmp(c, "session_attached") ||
            !strcmp(c, "bad_resume") || !strcmp(c, "bad_start"))
            L->failed = 1;
    } else if (!strcmp(type, "done")) {
        L->done = 1;
        SOTTO_INFO("done: %.1f s of audio transcribed, %.1f s dropped", jnum(e, "audio_seconds"),
                   jnum(e, "dropped_seconds"));
    }
    if ((L->done || L->failed) && L->wsi) {
        L->closing = 1;
        lws_callback_on_writable(L->wsi);
    }
}

/* ---- connection ---------------------------------------------------------------------- */

static void connect_now(mlink *L);

static void reconnect_cb(lws_sorted_usec_list_t *sul) {
    mlink *L = lws_container_of(sul, mlink, sul_reconnect);
    connect_now(L);
}

static void connection_lost(mlink *L, const char *why) {
    L->wsi = NULL;
    L->streaming = 0;
    L->ctrl_len = 0;
    if (L->done || L->failed) return;
    if (atomic_load(L->interrupt) && !L->session[0]) {
        SOTTO_ERROR("interrupted before a session started");
        L->failed = 1;
        return;
    }
    if (L->reconnects >= L->o->max_reconnects) {
        SOTTO_ERROR("connection lost (%s); gave up after %d attempts", why, L->reconnects);
        L->failed = 1;
        return;
    }
    L->reconnects++;
    SOTTO_WARN("connection lost (%s); reconnecting (%d/%d)", why, L->reconnects, L->o->max_reconnects);
    lws_sul_schedule(L->ctx, 0, &L->sul_reconnect, reconnect_cb, RECONNECT_US);
}

static void connect_now(mlink *L) {
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = L->ctx;
    ci.address = L->host;
    ci.port = L->port;
    ci.path = L->path;
    ci.host = L->host;
    ci.origin = L->host;
    ci.local_protocol_name = "sotto-mic";
    if (L->tls) {
        ci.ssl_connection = LCCSCF_USE_SSL;
        if (L->o->insecure)
            ci.ssl_connection |= LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
                                 LCCSCF_ALLOW_INSECURE | LCCSCF_ALLOW_EXPIRED;
    }
    ci.pwsi = &L->wsi;
    L->streaming = 0;
    if (!lws_client_connect_via_info(&ci)) connection_lost(L, "cannot connect");
}

/* Sends the control message, else the next packet, else `stop` when the
 * input has ended and everything was sent. */
static int writeable(mlink *L, struct lws *wsi) {
    if (L->closing) {
        lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"bye", 3);
        return -1;
    }
    if (L->ctrl_len) {
        int n = L->ctrl_len;
        memcpy(L->tx + LWS_PRE, L->ctrl, (size_t)n);
        L->ctrl_len = 0;
        if (lws_write(wsi, L->tx + LWS_PRE, (size_t)n, LWS_WRITE_TEXT) < n) return -1;
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (!L->streaming) return 0;
    size_t total = 0;
    int eof = 0;
    int len = mic_packets_get(L->pk, L->next, L->tx + LWS_PRE, (int)(sizeof L->tx - LWS_PRE), &total, &eof);
    if (len > 0) {
        if (lws_write(wsi, L->tx + LWS_PRE, (size_t)len, LWS_WRITE_BINARY) < len) return -1;
        L->next++;
        if (L->o->drop_after_s > 0 && !L->dropped_once && L->next * 0.02 >= L->o->drop_after_s) {
            L->dropped_once = 1; /* testing: the connection breaks without a close */
            SOTTO_WARN("dropping the connection after %.1f s of audio (--test-drop-after)",
                       L->next * 0.02);
            return -1;
        }
        if (L->next < total) lws_callback_on_writable(wsi);
        return 0;
    }
    if (len < 0) {
        SOTTO_ERROR("packet %zu too large", L->next);
        return -1;
    }
    if (L->next < total) { /* not acknowledged any more, yet not sent on this connection */
        SOTTO_ERROR("packet %zu was freed before it was sent", L->next);
        L->failed = 1;
        return -1;
    }
    if ((eof || atomic_load(L->interrupt)) && !L->stop_sent && L->next >= total) {
        if (!eof) return 0; /* interrupted: the source flushes and sets eof */
        L->stop_sent = 1;
        L->stop_at = now_s();
        sotto_log(SOTTO_LOG_DEBUG, 0, "all %zu packets sent; stop", total);
        static const char stop[] = "{\"type\":\"stop\"}";
        memcpy(L->tx + LWS_PRE, stop, sizeof stop - 1);
        if (lws_write(wsi, L->tx + LWS_PRE, sizeof stop - 1, LWS_WRITE_TEXT) < (int)sizeof stop - 1)
            return -1;
    }
    return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
    (void)user;
    mlink *L = wsi ? lws_context_user(lws_get_context(wsi)) : NULL;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        L->wsi = wsi;
        L->rx_len = 0;
        send_hello(L);
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (L->rx_len + len + 1 > L->rx_cap) {
            size_t cap = (L->rx_len + len + 1) * 2;
            char *nb = realloc(L->rx, cap);
            if (!nb) return -1;
            L->rx = nb, L->rx_cap = cap;
        }
        memcpy(L->rx + L->rx_len, in, len);
        L->rx_len += len;
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            L->rx[L->rx_len] = 0;
            cJSON *e = cJSON_ParseWithLength(L->rx, L->rx_len);
            if (cJSON_IsObject(e)) on_event(L, e);
            else SOTTO_WARN("server sent something that is not a JSON object");
            cJSON_Delete(e);
            L->rx_len = 0;
        }
        return 0;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        return writeable(L, wsi);
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        connection_lost(L, in && len ? (const char *)in : "connection error");
        return 0;
    case LWS_CALLBACK_CLIENT_CLOSED:
        connection_lost(L, "closed by the server");
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED: /* a packet is ready, or Ctrl-C */
        L = g_ctx ? lws_context_user(g_ctx) : NULL;
        if (L && L->wsi) lws_callback_on_writable(L->wsi);
        return 0;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols k_protocols[] = {
    {"sotto-mic", callback, 0, 65536, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* Twice a second: timeouts, and a nudge to the writer. */
static void tick_cb(lws_sorted_usec_list_t *sul) {
    mlink *L = lws_container_of(sul, mlink, sul_tick);
    if (L->stop_sent && !L->done && now_s() - L->stop_at > STOP_TIMEOUT_S) {
        SOTTO_ERROR("no `done` %.0f s after stop", STOP_TIMEOUT_S);
        L->failed = 1;
    }
    if (L->wsi) lws_callback_on_writable(L->wsi);
    lws_sul_schedule(L->ctx, 0, &L->sul_tick, tick_cb, 500000);
}

static void lws_logger(int level, const char *line) {
    sotto_log(level & LLL_ERR ? SOTTO_LOG_ERROR : SOTTO_LOG_DEBUG, 0, "lws: %.*s",
              (int)strcspn(line, "\n"), line);
}

int mic_link_run(const mic_link_opts *o, mic_packets *pk, atomic_int *interrupt) {
    static mlink L; /* one per process */
    memset(&L, 0, sizeof L);
    L.o = o;
    L.pk = pk;
    L.interrupt = interrupt;
    L.tty = isatty(STDOUT_FILENO);
    snprintf(L.url, sizeof L.url, "%s", o->url);
    const char *proto = NULL, *path = NULL;
    if (lws_parse_uri(L.url, &proto, &L.host, &L.port, &path) || !proto ||
        (strcmp(proto, "ws") && strcmp(proto, "wss"))) {
        SOTTO_ERROR("bad server URL '%s' (ws://HOST:PORT/v1/stream or wss://...)", o->url);
        return 1;
    }
    L.tls = !strcmp(proto, "wss");
    static char full_path[1024];
    snprintf(full_path, sizeof full_path, "/%s", path ? path : "");
    if (!strcmp(full_path, "/")) snprintf(full_path, sizeof full_path, "/v1/stream");
    L.path = full_path;
    if (o->output && !(L.out = fopen(o->output, "w"))) {
        SOTTO_ERROR("cannot write %s", o->output);
        return 1;
    }
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_logger);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = k_protocols;
    info.user = &L;
    if (L.tls) info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    L.ctx = lws_create_context(&info);
    if (!L.ctx) {
        SOTTO_ERROR("cannot create the libwebsockets context");
        if (L.out) fclose(L.out);
        return 1;
    }
    atomic_store(&g_ctx, L.ctx);
    lws_sul_schedule(L.ctx, 0, &L.sul_tick, tick_cb, 500000);
    connect_now(&L);
    while (!L.failed && !(L.done && !L.wsi))
        if (lws_service(L.ctx, 0) < 0) break;
    atomic_store(&g_ctx, NULL);
    lws_context_destroy(L.ctx);
    free(L.rx);
    if (L.out) fclose(L.out);
    if (L.tty && !o->quiet) printf("\r\033[K");
    return L.done ? 0 : 1;
}
