/* ws.c - the libwebsockets gateway: one protocol callback for HTTP and the
 * dictation WebSocket endpoint /v1/stream (docs/PROTOCOL.md). Runs on the
 * service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "compat.h"
#include "start_parse.h"

#include "log.h"

#include <ev.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

#define VIEWER_OUTBOX 8

typedef struct conn {
    srv_session *ss;          /* its session; for a feed viewer, the published one */
    int viewer;               /* a read-only feed viewer (feed.c) */
    uint64_t cursor;          /* viewer: newest event of ss it has been sent (or skipped) */
    char *outbox[VIEWER_OUTBOX]; /* viewer: its own messages (history, errors, pong) first */
    int n_outbox;
    int close_after_outbox;
    unsigned char *rx; /* message being assembled */
    size_t rx_len, rx_cap;
    int rx_overflow;
    unsigned char *tx; /* LWS_PRE + event being written */
    size_t tx_cap;
    srv_batch_req *breq; /* HTTP: an upload being transcribed (batch.c) */
    /* a compatibility dialect (compat.h): its state and messages ready to send */
    const srv_dialect *d;
    void *dst;
    struct lws *wsi;
    char **outq;
    int n_outq, cap_outq;
    int close_after;
    /* admission (service thread) */
    char ip[64];              /* the client's address */
    int counted;              /* in the connection counts */
    int close_status;         /* the close code once the queue drains (0: normal) */
    double t_open, t_last_msg; /* monotonic: connected, last complete message */
    size_t rx_total;          /* bytes of the message being received, kept or not */
    int peer_closed;          /* the client sent a close: nothing more is written */
    srv_secret_req *sreq; /* HTTP: POST /v1/realtime/client_secrets (auth.c) */
} conn;

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
static const char *conn_admit(srv *s, struct lws *wsi, conn *c) {
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

static void conn_release(srv *s, conn *c) {
    if (!c->counted) return;
    c->counted = 0;
    s->n_conns--;
    atomic_store(&s->m.connections, s->n_conns);
    ip_count *ic = ip_find(s, c->ip);
    if (ic && --ic->n == 0) *ic = s->conn_ips[--s->n_conn_ips];
}

/* Started sessions that have a connection (the --max-sessions slots), except self. */
static int sessions_busy(srv *s, const srv_session *self) {
    int busy = 0;
    pthread_mutex_lock(&s->lock);
    for (srv_session *ss = s->sessions; ss; ss = ss->next)
        busy += ss != self && ss->wsi &&
                (ss->state == SESS_LOADING || ss->state == SESS_RUNNING || ss->state == SESS_STOPPING);
    pthread_mutex_unlock(&s->lock);
    return busy;
}

static int session_slot_free(srv *s, srv_session *ss) {
    if (sessions_busy(s, ss) < s->opt.max_sessions) return 1;
    atomic_fetch_add(&s->m.sessions_rejected, 1);
    srv_session_error(s, ss, "overloaded", "the server has no free session slot", 1);
    return 0;
}

/* ---- small helpers --------------------------------------------------------------- */

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void ack(srv *s, srv_session *ss, int force) {
    uint64_t step = ss->encoding == SOTTO_ENCODING_OPUS ? 12 : (uint64_t)ss->sample_rate / 4;
    if (!force && ss->units_in - ss->units_acked_sent < step) return;
    cJSON *e = cJSON_CreateObject();
    if (!e) return;
    cJSON_AddStringToObject(e, "type", "ack");
    cJSON_AddNumberToObject(e, "offset", (double)ss->units_in);
    ss->units_acked_sent = ss->units_in;
    pthread_mutex_lock(&ss->lock);
    srv_checkpoint_maybe_locked(s, ss, 0);
    /* audio the client may forget: a restore never needs it */
    cJSON_AddNumberToObject(e, "durable", (double)srv_durable_units_locked(s, ss));
    srv_session_emit_locked(s, ss, e);
    pthread_mutex_unlock(&ss->lock);
}

/* ---- control messages ------------------------------------------------------------ */

static void on_start(srv *s, srv_session *ss, const cJSON *msg) {
    char why[256];
    if (ss->state != SESS_NEW) {
        srv_session_error(s, ss, "already_started", "the session has already started", 0);
        return;
    }
    if (!session_slot_free(s, ss) || !srv_admission_check(s, ss)) return;
    srv_start st; /* start_parse.c: every check that needs no session */
    const char *code = srv_start_parse(msg, &s->opt, s->silero, &st, why, sizeof why);
    if (code) {
        srv_session_error(s, ss, code, why, 0);
        return;
    }
    srv_model *sm = st.model_too_long ? NULL : srv_model_find(s, st.has_model ? st.model : NULL, st.weights);
    if (!sm) {
        snprintf(why, sizeof why, "unknown model '%s'", st.model);
        srv_session_error(s, ss, "unknown_model", why, 0);
        return;
    }
    int claim = st.has_feed ? srv_feed_claim(s, ss, st.feed, st.has_feed_key ? st.feed_key : NULL) : 0;
    if (claim == 0 && st.has_feed && s->persist) { /* and across the fleet */
        claim = srv_feed_remote_claim(s, ss, st.feed);
        if (claim == 1) {
            sotto_log(SOTTO_LOG_WARN, ss->id, "feed %s: Redis unreachable; published on this instance only", st.feed);
            claim = 0;
        }
        if (claim) {
            pthread_mutex_lock(&s->lock);
            ss->feed[0] = '\0'; /* give the local claim back */
            pthread_mutex_unlock(&s->lock);
        }
    }
    if (claim == -1) {
        snprintf(why, sizeof why, "the feed name '%s' is taken", st.feed);
        srv_session_error(s, ss, "feed_taken", why, 0);
        return;
    }
    if (claim == -2) {
        snprintf(why, sizeof why, "the feed name '%s' belongs to another API key", st.feed);
        srv_session_error(s, ss, "feed_owned", why, 0);
        return;
    }
    ss->dp = st.dp;
    sotto_err err;
    ss->ain = sotto_audio_in_create(st.encoding, st.sample_rate, st.channels, &err);
    if (!ss->ain) {
        srv_session_error(s, ss, "bad_start", err.msg, 0);
        return;
    }
    ss->encoding = st.encoding;
    ss->sample_rate = st.sample_rate;
    ss->channels = st.channels;
    snprintf(ss->language, sizeof ss->language, "%s", st.language);
    ss->task = st.task;
    if (st.has_prompt && !(ss->prompt = strdup(st.prompt))) {
        srv_session_error(s, ss, "internal", "out of memory", 1);
        return;
    }
    pthread_mutex_lock(&s->lock);
    ss->sm = sm;
    sm->refs++;
    ss->state = SESS_LOADING;
    pthread_mutex_unlock(&s->lock);
    char *start_json = cJSON_PrintUnformatted(msg); /* for checkpoints (a restore replays it) */
    pthread_mutex_lock(&ss->lock);
    free(ss->start_json);
    ss->start_json = start_json;
    pthread_mutex_unlock(&ss->lock);
    sotto_log(SOTTO_LOG_INFO, ss->id, "start: %s %d Hz x%d, model %s (%s)", sotto_encoding_name(st.encoding),
              ss->sample_rate, ss->channels, sm->name, sotto_wfmt_name(st.weights));
    srv_loader_kick(s);
}

void srv_session_start(srv *s, srv_session *ss, const cJSON *msg) { on_start(s, ss, msg); }

static void on_stop(srv *s, srv_session *ss, int end_of_stream) {
    if (ss->state == SESS_NEW) {
        if (end_of_stream) {
            srv_session_emit(s, ss, cJSON_Parse("{\"type\":\"done\"}"));
            pthread_mutex_lock(&ss->lock);
            ss->state = SESS_DONE;
            ss->closing = 1;
            pthread_mutex_unlock(&ss->lock);
        }
        return;
    }
    if (end_of_stream && ss->ain) { /* the resampler's tail */
        float tail[256];
        size_t n = 0;
        sotto_audio_in_flush(ss->ain, tail, 256, &n);
        pthread_mutex_lock(&ss->lock);
        ss->samples_out += n;
        if (ss->dict) srv_session_push_locked(s, ss, tail, n);
        pthread_mutex_unlock(&ss->lock);
    }
    ack(s, ss, 1);
    pthread_mutex_lock(&ss->lock);
    if (end_of_stream && ss->state != SESS_DONE) ss->state = SESS_STOPPING;
    if (ss->dict)
        sotto_dictation_flush(ss->dict, end_of_stream);
    else if (!end_of_stream)
        ss->flush_pending = 1; /* the model is loading: flush once the audio kept is pushed */
    pthread_mutex_unlock(&ss->lock);
    srv_worker_kick(s);
}

static uint64_t next_seq_locked(srv_session *ss);
static int outq_push(conn *c, char *json);

/* A resume may arrive before the connection's hello is written (the client
 * need not wait for it): the events its placeholder session has not written
 * yet move to the connection's own queue, so that they still come first
 * whichever session the connection ends up with (PROTOCOL.md: every
 * connection opens with hello, seq 1). */
static void carry_unsent(conn *c) {
    srv_session *ss = c->ss;
    pthread_mutex_lock(&ss->lock);
    uint64_t seq;
    while ((seq = next_seq_locked(ss)) != 0) {
        const srv_event *ev = &ss->ring[seq % SRV_EVENT_RING];
        char *json = malloc(ev->len + 1);
        if (json) {
            memcpy(json, ev->json, ev->len);
            json[ev->len] = 0;
            outq_push(c, json);
        }
        ss->sent_upto = seq;
    }
    pthread_mutex_unlock(&ss->lock);
}

/* Attaches an existing (detached) session to this connection. */
static void on_resume(srv *s, struct lws *wsi, conn *c, const cJSON *msg) {
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
    if (!session_slot_free(s, c->ss)) {
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
    old->wsi = wsi;
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

static void on_text(srv *s, struct lws *wsi, conn *c) {
    cJSON *msg = cJSON_ParseWithLength((const char *)c->rx, c->rx_len);
    const char *type = msg ? jstr(msg, "type") : NULL;
    if (!msg || !cJSON_IsObject(msg)) {
        srv_session_error(s, c->ss, "bad_json", "control messages must be JSON objects", 0);
    } else if (!type) {
        srv_session_error(s, c->ss, "bad_message", "a control message needs a \"type\"", 0);
    } else if (!strcmp(type, "start")) {
        on_start(s, c->ss, msg);
    } else if (!strcmp(type, "flush")) {
        on_stop(s, c->ss, 0);
    } else if (!strcmp(type, "stop")) {
        on_stop(s, c->ss, 1);
    } else if (!strcmp(type, "resume")) {
        on_resume(s, wsi, c, msg);
    } else if (!strcmp(type, "ping")) {
        srv_session_emit(s, c->ss, cJSON_Parse("{\"type\":\"pong\"}"));
    } else {
        char why[160];
        snprintf(why, sizeof why, "unknown message type '%.64s'", type);
        srv_session_error(s, c->ss, "unknown_type", why, 0);
    }
    cJSON_Delete(msg);
}

static void on_audio(srv *s, srv_session *ss, const unsigned char *data, size_t len) {
    if (ss->state == SESS_NEW) {
        srv_session_error(s, ss, "not_started", "audio before start: send a start message first", 0);
        return;
    }
    if (ss->state >= SESS_STOPPING) {
        srv_session_error(s, ss, "stopped", "audio after stop is ignored", 0);
        return;
    }
    size_t cap = sotto_audio_in_max_out(ss->ain, len);
    float *out = malloc(sizeof(float) * (cap ? cap : 1));
    size_t n = 0;
    sotto_err err;
    if (!out) {
        srv_session_error(s, ss, "internal", "out of memory", 0);
        return;
    }
    sotto_audio_in_stats before, after;
    sotto_audio_in_get_stats(ss->ain, &before);
    int rc = sotto_audio_in_push(ss->ain, data, len, out, cap, &n, &err);
    sotto_audio_in_get_stats(ss->ain, &after);
    if (rc) {
        srv_session_error(s, ss, "bad_audio", err.msg, 0);
        free(out);
        return;
    }
    if (after.bad_packets > before.bad_packets) {
        atomic_fetch_add(&s->m.concealed_packets, after.bad_packets - before.bad_packets);
        cJSON *e = cJSON_CreateObject();
        if (e) {
            cJSON_AddStringToObject(e, "type", "warning");
            cJSON_AddStringToObject(e, "code", "bad_packet");
            cJSON_AddStringToObject(e, "message", "an Opus packet could not be decoded; concealed");
            cJSON_AddNumberToObject(e, "bad_packets", (double)after.bad_packets);
            srv_session_emit(s, ss, e);
        }
    }
    ss->units_in += ss->encoding == SOTTO_ENCODING_OPUS ? 1 : after.input_frames - before.input_frames;
    atomic_fetch_add(&s->m.audio_in_samples, n);
    pthread_mutex_lock(&ss->lock);
    ss->samples_out += n;
    srv_mark_add_locked(ss);
    if (ss->dict) {
        srv_session_push_locked(s, ss, out, n);
    } else { /* model still loading: keep it, bounded */
        size_t limit = (size_t)(s->opt.max_buffer_s * 16000);
        if (ss->n_pending + n > ss->cap_pending && ss->n_pending + n <= limit) {
            size_t cap2 = (ss->n_pending + n) * 2 < limit ? (ss->n_pending + n) * 2 : limit;
            float *np = realloc(ss->pending, sizeof(float) * cap2);
            if (np) ss->pending = np, ss->cap_pending = cap2;
        }
        size_t take = ss->cap_pending - ss->n_pending < n ? ss->cap_pending - ss->n_pending : n;
        if (take) memcpy(ss->pending + ss->n_pending, out, sizeof(float) * take); /* pending is NULL until needed */
        ss->n_pending += take;
        if (take < n) atomic_fetch_add(&s->m.audio_dropped_samples, n - take);
    }
    pthread_mutex_unlock(&ss->lock);
    free(out);
    ack(s, ss, 0);
    srv_worker_kick(s);
}

/* ---- writing ---------------------------------------------------------------------- */

/* Makes room for a message of len bytes (after LWS_PRE) in c->tx. */
static int ensure_tx(conn *c, size_t len) {
    if (c->tx_cap >= LWS_PRE + len) return 0;
    unsigned char *nb = realloc(c->tx, LWS_PRE + len + 256);
    if (!nb) return -1;
    c->tx = nb;
    c->tx_cap = LWS_PRE + len + 256;
    return 0;
}

/* The next event a connection writes after sent_upto (a lagging connection
 * skips events that newer ones replace), or 0 when it has written everything
 * (sent_upto then moves to the newest). Session lock held. */
static uint64_t next_seq_locked(srv_session *ss) {
    uint64_t last = ss->next_seq - 1, seq = ss->sent_upto + 1;
    if (seq < ss->first_kept) seq = ss->first_kept;
    while (seq <= last && ss->ring[seq % SRV_EVENT_RING].superseded && last - seq > SRV_LAG_SKIP) seq++;
    if (seq <= last) return seq;
    ss->sent_upto = last;
    return 0;
}

/* Everything is written: close a closing session's connection, else wait.
 * Unlocks the session. */
static int drained_unlock(srv_session *ss, struct lws *wsi, const conn *c) {
    int close_now = ss->closing;
    pthread_mutex_unlock(&ss->lock);
    if (!close_now) return 0;
    if (c->close_status)
        lws_close_reason(wsi, (enum lws_close_status)c->close_status, (unsigned char *)"error", 5);
    else
        lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"done", 4);
    return -1;
}

/* Appends a message (owned, freed once written) to the connection's own queue,
 * which is written before the session's events. Returns -1 (json freed) when
 * out of memory. */
static int outq_push(conn *c, char *json) {
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

/* Writes the first message of the connection's own queue; -1: close. */
static int write_outq_one(srv *s, struct lws *wsi, conn *c) {
    char *msg = c->outq[0];
    memmove(c->outq, c->outq + 1, sizeof(char *) * (size_t)--c->n_outq);
    size_t len = strlen(msg);
    int bad = ensure_tx(c, len);
    if (!bad) memcpy(c->tx + LWS_PRE, msg, len);
    free(msg);
    if (bad || lws_write(wsi, c->tx + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len) return -1;
    atomic_fetch_add(&s->m.events_sent, 1);
    return 0;
}

/* Writes queued events while the socket takes them (up to 64 per callback), then
 * asks for another callback if more are queued; closes once a closing session
 * has written everything. */
static int write_next(srv *s, struct lws *wsi, conn *c) {
    srv_session *ss = c->ss;
    for (int n = 0; n < 64; n++) {
        if (c->n_outq) { /* the hello a resume carried over (carry_unsent) */
            if (write_outq_one(s, wsi, c)) return -1;
            if (lws_send_pipe_choked(wsi)) break;
            continue;
        }
        pthread_mutex_lock(&ss->lock);
        uint64_t seq = next_seq_locked(ss);
        if (!seq) return drained_unlock(ss, wsi, c);
        srv_event *ev = &ss->ring[seq % SRV_EVENT_RING];
        if (ensure_tx(c, ev->len)) {
            pthread_mutex_unlock(&ss->lock);
            return -1;
        }
        size_t len = ev->len;
        memcpy(c->tx + LWS_PRE, ev->json, len);
        ss->sent_upto = seq;
        pthread_mutex_unlock(&ss->lock);
        if (lws_write(wsi, c->tx + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len) return -1;
        atomic_fetch_add(&s->m.events_sent, 1);
        if (lws_send_pipe_choked(wsi)) break;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* ---- compatibility dialects (compat.h) -------------------------------------------- */

struct srv_link { conn c; }; /* a dialect's view of a connection is the conn itself */

static conn *L(srv_link *l) { return (conn *)l; }
/* a dialect's connection always has its wsi (on_established), and through it the server */
srv *srv_link_srv(srv_link *l) { return lws_context_user(lws_get_context(L(l)->wsi)); }
srv_session *srv_link_session(srv_link *l) { return L(l)->ss; }
int srv_link_started(const srv_link *l) { return ((const conn *)l)->ss->state != SESS_NEW; }

int srv_link_start(srv_link *l, const cJSON *start_msg) {
    on_start(srv_link_srv(l), L(l)->ss, start_msg);
    pthread_mutex_lock(&L(l)->ss->lock); /* dialects have no resume: no checkpoints */
    free(L(l)->ss->start_json);
    L(l)->ss->start_json = NULL;
    pthread_mutex_unlock(&L(l)->ss->lock);
    return L(l)->ss->state != SESS_NEW ? 0 : -1;
}

void srv_link_audio(srv_link *l, const void *data, size_t len) { on_audio(srv_link_srv(l), L(l)->ss, data, len); }
void srv_link_flush(srv_link *l, int end_of_stream) { on_stop(srv_link_srv(l), L(l)->ss, end_of_stream); }
void srv_link_note(srv_link *l, cJSON *ev) { srv_session_emit(srv_link_srv(l), L(l)->ss, ev); }

void srv_link_send(srv_link *l, char *json) {
    conn *c = L(l);
    if (!json) return;
    if (outq_push(c, json)) return;
    if (c->wsi) lws_callback_on_writable(c->wsi);
}

void srv_link_close_after(srv_link *l, int status) {
    L(l)->close_after = status ? status : LWS_CLOSE_STATUS_NORMAL;
}

/* Dialect connections: their own queued messages first, then the session's
 * events one by one through the translator. */
static int dialect_write(srv *s, struct lws *wsi, conn *c) {
    srv_session *ss = c->ss;
    for (int n = 0; n < 64;) {
        if (c->n_outq) {
            if (write_outq_one(s, wsi, c)) return -1;
            n++;
            if (lws_send_pipe_choked(wsi)) break;
            continue;
        }
        if (c->close_after) {
            lws_close_reason(wsi, (enum lws_close_status)c->close_after, (unsigned char *)"bye", 3);
            return -1;
        }
        pthread_mutex_lock(&ss->lock);
        uint64_t seq = next_seq_locked(ss);
        if (!seq) return drained_unlock(ss, wsi, c);
        cJSON *ev = cJSON_ParseWithLength(ss->ring[seq % SRV_EVENT_RING].json, ss->ring[seq % SRV_EVENT_RING].len);
        ss->sent_upto = seq;
        pthread_mutex_unlock(&ss->lock);
        if (ev) c->d->translate(c->dst, (srv_link *)c, ev);
        cJSON_Delete(ev);
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* ---- waking up ------------------------------------------------------------------------ */

/* SIGTERM with --redis: a running session is not finished here but moved:
 * checkpointed, its client told to `reconnect` (a resume through the load
 * balancer lands on another instance, which restores it), and closed.
 * Returns 0 if it cannot move (no checkpoints, not started). */
static int move_session(srv *s, srv_session *ss) {
    if (!s->persist) return 0;
    pthread_mutex_lock(&ss->lock);
    if (!ss->start_json || (ss->state != SESS_RUNNING && ss->state != SESS_LOADING)) {
        pthread_mutex_unlock(&ss->lock);
        return 0;
    }
    srv_checkpoint_maybe_locked(s, ss, 1);
    uint64_t units = srv_durable_units_locked(s, ss); /* Redis has it; the newer one follows */
    cJSON *e = cJSON_CreateObject();
    if (e) {
        cJSON_AddStringToObject(e, "type", "reconnect");
        cJSON_AddStringToObject(e, "reason", "draining");
        cJSON_AddStringToObject(e, "message", "this server is shutting down: resume the session "
                                             "(another instance continues it)");
        cJSON_AddNumberToObject(e, "durable", (double)units);
        srv_session_emit_locked(s, ss, e);
    }
    ss->state = SESS_DONE;
    ss->moved = 1;
    ss->closing = 1;
    pthread_mutex_unlock(&ss->lock);
    sotto_log(SOTTO_LOG_INFO, ss->id, "draining: moved (checkpointed at offset %llu, client told to reconnect)",
              (unsigned long long)units);
    return 1;
}

/* What a wake-up does for one session (srv->lock and its lock held): ask for a
 * writable callback if it has events to send or is closing, checkpoint it if it
 * is detached (or Redis came back), renew its feed record, wake its viewers.
 * Returns 1 while the session is busy (for the drain). */
static int wake_session_locked(srv *s, srv_session *ss, int refresh_feeds) {
    int pending = ss->sent_upto + 1 < ss->next_seq || ss->closing;
    if (ss->wsi && pending) lws_callback_on_writable(ss->wsi);
    /* live sessions checkpoint from their acks and passes; here: detached ones, and every
       one after a Redis outage (wake-ups come with every event: keep this cheap) */
    if (s->persist && (!ss->wsi || ss->ckpt_gen_seen != atomic_load(&s->ckpt_gen)))
        srv_checkpoint_maybe_locked(s, ss, 0);
    if (refresh_feeds && ss->feed[0] && ss->state >= SESS_LOADING && ss->state <= SESS_STOPPING)
        srv_feed_remote_refresh(s, ss);
    if (ss->n_viewers && (ss->next_seq - 1 > ss->viewers_woken_seq || ss->state == SESS_DONE)) {
        /* feed viewers: new events, or the end */
        ss->viewers_woken_seq = ss->next_seq - 1;
        for (int v = 0; v < ss->n_viewers; v++) lws_callback_on_writable(ss->viewers[v]);
    }
    /* a session is busy until it is done and its connection has written everything
       and closed */
    return ss->state == SESS_LOADING || ss->state == SESS_RUNNING || ss->state == SESS_STOPPING ||
           (ss->wsi && pending);
}

/* The service thread's wake-up (lws_cancel_service from any thread): connections
 * with something to send get a writeable callback, expired sessions go, a
 * draining server stops its sessions. Usually it
 * visits only the sessions that asked (srv_session_wake: new events, a state
 * change), so a wake-up costs the same with 10 or 10,000 idle sessions. It
 * visits (and reaps) every session after srv_wake, while draining, when live
 * feeds' records are due for renewal, and at least once a second (detached
 * sessions' grace, their checkpoints). */
static void service_wakeup(srv *s) {
    int draining = atomic_load(&s->draining);
    if (draining && s->drain_started == 0) s->drain_started = srv_now();
    double now = srv_now();
    int refresh_feeds = s->persist && now - s->feeds_refreshed > 20;
    if (refresh_feeds) s->feeds_refreshed = now;
    int all = atomic_exchange(&s->wake_all, 0) || draining || refresh_feeds ||
              now - s->scanned_all_at >= 1.0;
    if (all) srv_sessions_reap(s); /* detached sessions past their grace, --max-detached */
    srv_session *to_stop[256];
    int n_stop = 0, active = 0;
    pthread_mutex_lock(&s->lock);
    srv_session *list = srv_wake_list_take_locked(s); /* in the table: valid under srv->lock */
    if (all) { /* every session instead: the queued ones are unmarked */
        while (list) list = srv_wake_list_next_locked(s, list);
        s->scanned_all_at = now;
        list = s->sessions;
    }
    for (srv_session *ss = list, *next; ss; ss = next) {
        next = all ? ss->next : srv_wake_list_next_locked(s, ss);
        pthread_mutex_lock(&ss->lock);
        active += wake_session_locked(s, ss, refresh_feeds);
        if (draining && n_stop < 256 &&
            (ss->state == SESS_RUNNING || ss->state == SESS_LOADING ||
             (ss->state == SESS_NEW && ss->wsi && !ss->closing))) {
            ss->refs++;
            to_stop[n_stop++] = ss;
        }
        pthread_mutex_unlock(&ss->lock);
    }
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < n_stop; i++) { /* SIGTERM: finish what was heard, then close */
        if (!move_session(s, to_stop[i])) on_stop(s, to_stop[i], 1);
        srv_session_unref(s, to_stop[i]);
    }
    srv_feed_remote_wake(s);
    srv_batch_wakeup(s);
    active += srv_batch_busy(s);
    if (draining && (active == 0 || srv_now() - s->drain_started > s->opt.drain_s))
        atomic_store(&s->stop, 1);
    if (atomic_load(&s->stop) && s->evloop) ev_break(s->evloop, EVBREAK_ALL); /* srv_gateway_loop returns */
}

/* ---- feed viewers ---------------------------------------------------------------------- */

static void viewer_say(conn *c, char *json) { /* takes json */
    if (!json) return;
    if (c->n_outbox == VIEWER_OUTBOX) {
        free(json);
        return;
    }
    c->outbox[c->n_outbox++] = json;
}

static char *error_json(const char *code, const char *msg, int fatal) {
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

/* /v1/feeds/NAME[?key=KEY]: attach c to the published session as a viewer,
 * or explain why not (fatal error, then close). */
static void viewer_open(srv *s, struct lws *wsi, conn *c, const char *name) {
    char key[SRV_FEED_NAME_MAX + 8] = "";
    const char *kv = lws_get_urlarg_by_name(wsi, "key=", key, (int)sizeof key);
    c->viewer = 1;
    srv_session *ss = srv_feed_name_ok(name) ? srv_feed_find(s, name) : NULL;
    if (!ss) {
        viewer_say(c, error_json("not_found", "no such feed", 1));
        c->close_after_outbox = 1;
        return;
    }
    pthread_mutex_lock(&ss->lock);
    int key_ok = !ss->feed_key[0] || (kv && strcmp(kv, ss->feed_key) == 0);
    pthread_mutex_unlock(&ss->lock);
    if (!key_ok) {
        srv_session_unref(s, ss);
        viewer_say(c, error_json("forbidden", "this feed needs its viewer key (?key=...)", 1));
        c->close_after_outbox = 1;
        return;
    }
    if (srv_feed_viewer_add(ss, wsi)) {
        srv_session_unref(s, ss);
        viewer_say(c, error_json("internal", "out of memory", 1));
        c->close_after_outbox = 1;
        return;
    }
    c->ss = ss; /* keeps the ref taken by find */
    pthread_mutex_lock(&ss->lock);
    c->cursor = ss->next_seq - 1;
    viewer_say(c, srv_feed_history_locked(ss));
    pthread_mutex_unlock(&ss->lock);
    atomic_fetch_add(&s->m.feed_viewers_total, 1);
}

/* A viewer may only ping; anything else is answered read_only. */
static void viewer_receive(conn *c, struct lws *wsi) {
    cJSON *msg = lws_frame_is_binary(wsi) ? NULL : cJSON_ParseWithLength((const char *)c->rx, c->rx_len);
    const cJSON *t = msg ? cJSON_GetObjectItemCaseSensitive(msg, "type") : NULL;
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "ping")) {
        char *p = strdup("{\"type\":\"pong\"}");
        viewer_say(c, p);
    } else {
        viewer_say(c, error_json("read_only", "feed viewers cannot send audio or control messages", 0));
    }
    cJSON_Delete(msg);
}

/* Writes the viewer's own messages, then the session's viewer events from its
 * cursor (superseded partials skipped when it lags); drops a viewer that fell
 * out of the ring; closes after the session's `done`. A close comes in a
 * writeable callback of its own, never in the one that wrote the last
 * message (a browser may otherwise see the close before the message). */
static int viewer_write(srv *s, struct lws *wsi, conn *c) {
    int wrote = 0;
    for (int n = 0; n < 64; n++) {
        size_t len = 0;
        int close_now = 0, is_done = 0;
        if (c->n_outbox) {
            char *msg = c->outbox[0];
            memmove(c->outbox, c->outbox + 1, sizeof(char *) * (size_t)--c->n_outbox);
            len = strlen(msg);
            int bad = ensure_tx(c, len);
            if (!bad) memcpy(c->tx + LWS_PRE, msg, len);
            free(msg);
            if (bad) return -1;
        } else if (c->close_after_outbox || !c->ss) {
            if (wrote) break; /* close in the next callback */
            lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"bye", 3);
            return -1;
        } else {
            srv_session *ss = c->ss;
            pthread_mutex_lock(&ss->lock);
            uint64_t last = ss->next_seq - 1, seq = c->cursor + 1;
            if (seq < ss->first_kept) { /* fell out of the ring: never slows the speaker */
                pthread_mutex_unlock(&ss->lock);
                viewer_say(c, error_json("too_slow", "the viewer fell too far behind; reconnect", 1));
                c->close_after_outbox = 1;
                atomic_fetch_add(&s->m.feed_viewers_dropped, 1);
                continue;
            }
            while (seq <= last && (!ss->ring[seq % SRV_EVENT_RING].viewer ||
                                   (ss->ring[seq % SRV_EVENT_RING].superseded &&
                                    last - seq > SRV_LAG_SKIP)))
                seq++;
            if (seq > last) {
                c->cursor = last;
                close_now = ss->state == SESS_DONE;
                pthread_mutex_unlock(&ss->lock);
                if (close_now && wrote) break; /* close in the next callback */
                if (close_now) {
                    lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"done", 4);
                    return -1;
                }
                return 0;
            }
            srv_event *ev = &ss->ring[seq % SRV_EVENT_RING];
            if (ensure_tx(c, ev->len)) {
                pthread_mutex_unlock(&ss->lock);
                return -1;
            }
            memcpy(c->tx + LWS_PRE, ev->json, ev->len); /* straight from the ring */
            len = ev->len;
            is_done = ev->done;
            c->cursor = seq;
            pthread_mutex_unlock(&ss->lock);
        }
        if (lws_write(wsi, c->tx + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len) return -1;
        wrote = 1;
        atomic_fetch_add(&s->m.events_sent, 1);
        if (is_done) c->close_after_outbox = 1;
        if (lws_send_pipe_choked(wsi)) break;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* ---- admission of a WebSocket ---------------------------------------------------------- */

/* A fatal error before the session starts; the connection closes with status
 * once it is written. */
static void refuse(srv *s, conn *c, const char *code, const char *msg, int status) {
    srv_session_error(s, c->ss, code, msg, 1);
    c->close_status = status;
}

/* Decides whether the connection may have a session: path, key or token,
 * draining, a session slot (sessions count once started: see on_start). */
static void admit_session(srv *s, struct lws *wsi, conn *c, const char *uri, const char *full) {
    int ident = -1;
    if (full) {
        refuse(s, c, "too_many_connections", full, 1013);
    } else if (!c->d && strcmp(uri, "/v1/stream") != 0 && strcmp(uri, "/") != 0) {
        srv_session_error(s, c->ss, "not_found",
                          "WebSocket endpoints: /v1/stream, /v1/feeds/NAME, /v1/realtime, /v1/listen", 1);
    } else if (!srv_auth_check(s, wsi, &ident)) {
        refuse(s, c, "unauthorized",
               "a valid API key or client token is needed (Authorization: Bearer KEY, the "
               "Sec-WebSocket-Protocol forms or ?api_key=; docs/SECURITY.md)",
               LWS_CLOSE_STATUS_POLICY_VIOLATION);
    } else if (atomic_load(&s->draining)) {
        srv_session_error(s, c->ss, "shutting_down", "the server is shutting down", 1);
    } else if (sessions_busy(s, c->ss) >= s->opt.max_sessions) { /* fail fast: no slot now */
        atomic_fetch_add(&s->m.sessions_rejected, 1);
        srv_session_error(s, c->ss, "overloaded", "the server has no free session slot", 1);
    } else if (c->d) { /* a dialect's session starts with its connection: a new session */
        srv_admission_check(s, c->ss);
    }
    c->ss->owner = ident;
    if (c->ss->closing) atomic_fetch_add(&s->m.connections_rejected, 1);
}

static int on_established(srv *s, struct lws *wsi, conn *c) {
    memset(c, 0, sizeof *c);
    char uri[256] = "";
    lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
    const char *full = conn_admit(s, wsi, c);
    c->t_open = c->t_last_msg = srv_now();
    if (strncmp(uri, "/v1/feeds/", 10) == 0) { /* viewers need the feed's key, not an API key */
        if (full) {
            c->viewer = 1;
            viewer_say(c, error_json("too_many_connections", full, 1));
            c->close_after_outbox = 1;
            atomic_fetch_add(&s->m.connections_rejected, 1);
        } else {
            viewer_open(s, wsi, c, uri + 10);
        }
        lws_callback_on_writable(wsi);
        return 0;
    }
    c->ss = srv_session_new(s);
    if (!c->ss) return -1;
    c->ss->wsi = wsi;
    c->wsi = wsi;
    srv_session_ref(s, c->ss); /* the connection's */
    if (!strcmp(uri, "/v1/realtime")) c->d = &srv_dialect_openai_rt;
    if (!strcmp(uri, "/v1/listen")) c->d = &srv_dialect_deepgram;
    if (c->d && !(c->dst = c->d->open((srv_link *)c, wsi))) return -1;
    admit_session(s, wsi, c, uri, full);
    lws_set_timer_usecs(wsi, (lws_usec_t)(s->opt.start_timeout_s * 1e6));
    if (c->d) {
        if (!c->ss->closing && c->d->welcome) c->d->welcome(c->dst, (srv_link *)c);
        lws_callback_on_writable(wsi);
        return 0;
    }
    cJSON *e = cJSON_CreateObject();
    if (e && !c->ss->closing) {
        cJSON_AddStringToObject(e, "type", "hello");
        cJSON_AddStringToObject(e, "protocol", "sotto.v1");
        srv_session_emit(s, c->ss, e);
    } else {
        cJSON_Delete(e);
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* ---- timeouts ---------------------------------------------------------------------------- */

/* The connection's timer: a session not started (or resumed) within
 * --start-timeout-s, or a running one whose client completed no message for
 * --idle-timeout-s (this also bounds a frame that stalls half-way; the time a
 * model takes to load does not count), gets a
 * fatal error and is closed; lws closes the socket 5 s later if the client
 * does not read it. Otherwise the timer is set for the next deadline. */
static void on_timer(srv *s, struct lws *wsi, conn *c) {
    if (c->viewer || !c->ss || c->peer_closed) return;
    srv_session *ss = c->ss;
    pthread_mutex_lock(&ss->lock);
    srv_sess_state st = ss->state;
    int closing = ss->closing;
    pthread_mutex_unlock(&ss->lock);
    if (closing || st >= SESS_STOPPING) return; /* ends by itself */
    if (st == SESS_LOADING) { /* the client waits for its model, not idle: look again in 1 s */
        c->t_last_msg = srv_now();
        lws_set_timer_usecs(wsi, 1000000);
        return;
    }
    int started = st != SESS_NEW;
    double due = started ? c->t_last_msg + s->opt.idle_timeout_s : c->t_open + s->opt.start_timeout_s;
    double now = srv_now();
    if (now < due) {
        lws_set_timer_usecs(wsi, (lws_usec_t)((due - now) * 1e6) + 1000);
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
    refuse(s, c, started ? "idle_timeout" : "start_timeout", why, LWS_CLOSE_STATUS_POLICY_VIOLATION);
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, 5);
    lws_callback_on_writable(wsi);
}

/* ---- receiving ----------------------------------------------------------------------------- */

/* Messages over --max-frame-bytes are discarded with a non-fatal error, up to
 * this much; one that is (or announces a frame that would be) larger closes
 * the connection with 1009 at once. */
static size_t hard_frame_limit(const srv *s) {
    size_t lim = (size_t)s->opt.max_frame_bytes * 16;
    return lim < (size_t)s->opt.max_frame_bytes ? (size_t)s->opt.max_frame_bytes : lim;
}

static int session_fatal(srv_session *ss) {
    pthread_mutex_lock(&ss->lock);
    int f = ss->fatal;
    pthread_mutex_unlock(&ss->lock);
    return f;
}

static int on_receive(srv *s, struct lws *wsi, conn *c, const void *in, size_t len) {
    if (!c->ss && !c->viewer) return -1;
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
    if (c->viewer) {
        viewer_receive(c, wsi);
    } else if (session_fatal(c->ss)) {
        /* refused or failed: the connection closes once the error is written */
    } else if (c->rx_overflow) {
        char why[128];
        snprintf(why, sizeof why, "messages are limited to %d bytes", s->opt.max_frame_bytes);
        srv_session_error(s, c->ss, "frame_too_large", why, 0);
    } else if (c->d) {
        c->d->receive(c->dst, (srv_link *)c, lws_frame_is_binary(wsi), c->rx, c->rx_len);
    } else if (lws_frame_is_binary(wsi)) {
        on_audio(s, c->ss, c->rx, c->rx_len);
    } else {
        on_text(s, wsi, c);
    }
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
static int on_peer_close(struct lws *wsi, conn *c, unsigned char *in, size_t len) {
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

static void on_closed(srv *s, struct lws *wsi, conn *c) {
    conn_release(s, c);
    if (c->viewer) {
        if (c->ss) {
            srv_feed_viewer_remove(c->ss, wsi);
            srv_session_unref(s, c->ss);
            c->ss = NULL;
        }
        for (int i = 0; i < c->n_outbox; i++) free(c->outbox[i]);
        c->n_outbox = 0;
    } else if (c->ss) {
        pthread_mutex_lock(&c->ss->lock);
        c->ss->wsi = NULL;
        c->ss->detached_at = srv_now();
        /* dialects have no resume: the session goes at the next reap */
        if (c->d) c->ss->detached_at -= s->opt.resume_grace_s + 1;
        pthread_mutex_unlock(&c->ss->lock);
        sotto_log(SOTTO_LOG_DEBUG, c->ss->id, "connection closed");
        srv_session_unref(s, c->ss);
        c->ss = NULL;
        srv_wake(s); /* reaps: expired, or more detached than --max-detached */
    }
    if (c->d && c->dst) c->d->close(c->dst);
    c->dst = NULL;
    for (int i = 0; i < c->n_outq; i++) free(c->outq[i]);
    free(c->outq);
    c->outq = NULL;
    c->n_outq = c->cap_outq = 0;
    free(c->rx);
    free(c->tx);
    c->rx = c->tx = NULL;
}

/* ---- the callback ------------------------------------------------------------------ */

static int on_http(srv *s, struct lws *wsi, conn *c, const char *uri) {
    if (c) {
        int r = srv_secret_http(s, wsi, &c->sreq, uri);
        if (r != 1) return r;
    }
    int r = c ? srv_batch_http(s, wsi, &c->breq, uri) : 1;
    return r != 1 ? r : srv_http_route(s, wsi, uri);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len) {
    /* the server is the context's user pointer (srv_gateway_create) */
    srv *s = wsi ? lws_context_user(lws_get_context(wsi)) : NULL;
    if (!s) return 0;
    conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT: /* lws hands a CONNECT request over as a raw socket: refuse it */
        return -1;
    case LWS_CALLBACK_HTTP:
        return on_http(s, wsi, c, in ? (const char *)in : "/");
    case LWS_CALLBACK_HTTP_BODY:
        if (c && c->sreq) return srv_secret_body(c->sreq, in, len);
        if (c && c->breq) return srv_batch_body(s, wsi, c->breq, in, len);
        break;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        if (c && c->sreq) return srv_secret_done(s, wsi, &c->sreq);
        if (c && c->breq) return srv_batch_body_done(s, wsi, &c->breq);
        break;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (c && c->breq) return srv_batch_writeable(s, wsi, &c->breq);
        break;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (c && c->breq) srv_batch_closed(s, &c->breq);
        if (c) srv_secret_closed(&c->sreq);
        break;
    case LWS_CALLBACK_ESTABLISHED:
        return on_established(s, wsi, c);
    case LWS_CALLBACK_RECEIVE:
        return on_receive(s, wsi, c, in, len);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        return on_peer_close(wsi, c, in, len);
    case LWS_CALLBACK_TIMER:
        if (c) on_timer(s, wsi, c);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (c->peer_closed) return -1;
        if (c->viewer) return viewer_write(s, wsi, c);
        if (!c->ss) return -1;
        return c->d ? dialect_write(s, wsi, c) : write_next(s, wsi, c);
    case LWS_CALLBACK_CLOSED:
        on_closed(s, wsi, c);
        if (atomic_load(&s->draining)) srv_wake(s); /* maybe the last one */
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        service_wakeup(s);
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
    {"sotto.v1", callback, sizeof(conn), 65536, 0, NULL, 0},
    {"realtime", alias_callback, sizeof(conn), 65536, 0, NULL, 0},
    {"openai-beta.realtime-v1", alias_callback, sizeof(conn), 65536, 0, NULL, 0},
    {"token", alias_callback, sizeof(conn), 65536, 0, NULL, 0},
    {"bearer", alias_callback, sizeof(conn), 65536, 0, NULL, 0},
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
