/* compat.h - what the compatibility front ends share: the OpenAI-style batch
 * endpoint (batch.c), the OpenAI Realtime transcription dialect (rt_openai.c)
 * and the Deepgram live dialect (dg_listen.c). docs/COMPAT.md describes them.
 *
 * A dialect is a WebSocket front end over an ordinary sotto session: it turns
 * the client's messages into the session's operations (start, audio, flush,
 * stop; srv_link_* below, implemented by conn_dialect.c) and each session event (typed:
 * ring.h, in order) into its own messages. The
 * session, its resume-free event ring, lag handling and limits are the same
 * as for /v1/stream. Runs on the service thread only.
 */
#ifndef SOTTO_COMPAT_H
#define SOTTO_COMPAT_H

#include "server.h"

#include <stddef.h>

struct lws;

/* ---- API keys and model names ------------------------------------------------------ */

/* 1 if the server has no keys, or the request carries a key or a client
 * token in one of the forms srv_auth_check (server.h) accepts. */
int srv_compat_authorized(srv *s, struct lws *wsi);

/* Model names the compatibility APIs accept: "" / "whisper-1" / OpenAI's
 * transcription models / Deepgram's model names (the default model and
 * weights: live sessions' --stream-weights when `live`, else uploads'
 * --default-weights), "NAME", "NAME:WEIGHTS", "whisper-NAME[:WEIGHTS]". On
 * success sets *model ("" = the default) and *weights; -1 with why otherwise. */
int srv_compat_model(srv *s, const char *name, int live, char *model, size_t model_sz,
                     sotto_wfmt *weights, char *why, size_t why_sz);

/* {"error":{"message":..,"type":..,"param":..,"code":..}} (param/code may be NULL). */
char *srv_openai_error_json(const char *type, const char *code, const char *param, const char *msg);

/* Strict base64 (RFC 4648, padding optional) into a malloc'd buffer; -1 if malformed. */
int srv_b64_decode(const char *in, size_t len, unsigned char **out, size_t *out_len);

/* G.711 (mu-law, or A-law when alaw) to 16-bit little-endian PCM: 2n bytes, malloc'd. */
unsigned char *srv_g711_to_s16le(const unsigned char *in, size_t n, int alaw);

/* ---- WebSocket dialects ---------------------------------------------------------------- */

typedef struct srv_link srv_link; /* the connection (conn.h), as a dialect sees it */

/* Session operations (conn_dialect.c). start takes a sotto.v1 start message; it
 * returns 0 when the session started (its errors become session error
 * events, which the dialect translates). */
int srv_link_start(srv_link *l, const cJSON *start_msg);
int srv_link_started(const srv_link *l);
void srv_link_audio(srv_link *l, const void *data, size_t len);
void srv_link_flush(srv_link *l, int end_of_stream);
/* Puts an event into the session's ring after everything emitted so far, so
 * that the dialect sees it in order when translating (takes ev). */
void srv_link_note(srv_link *l, cJSON *ev);
/* Queues a message for the client now, ahead of untranslated events (takes json). */
void srv_link_send(srv_link *l, char *json);
/* Closes the connection once everything queued is written. */
void srv_link_close_after(srv_link *l, int status);
srv *srv_link_srv(srv_link *l);
srv_session *srv_link_session(srv_link *l);

typedef struct srv_dialect {
    const char *name;
    /* Returns the dialect's state for a new connection (NULL: out of memory). */
    void *(*open)(srv_link *l, struct lws *wsi);
    /* The connection was accepted (key, capacity): the dialect's greeting, or NULL. */
    void (*welcome)(void *st, srv_link *l);
    void (*receive)(void *st, srv_link *l, int binary, const unsigned char *data, size_t len);
    /* One session event (typed, ring.h), in order; sends what the client should see. */
    void (*translate)(void *st, srv_link *l, const srv_event *ev);
    void (*close)(void *st);
} srv_dialect;

extern const srv_dialect srv_dialect_openai_rt; /* /v1/realtime */
extern const srv_dialect srv_dialect_deepgram;  /* /v1/listen */

/* ---- the batch endpoint (batch.c) ------------------------------------------------------ */

typedef struct srv_batch_req srv_batch_req;

void srv_batch_init(srv *s);  /* the queue (before anything else of batch.c) */
int srv_batch_start(srv *s);  /* the transcriber thread */
void srv_batch_stop(srv *s);  /* cancels the running job; open requests keep theirs */
int srv_batch_busy(srv *s);    /* jobs queued or running (drain waits for them) */
/* HTTP callbacks (conn_http.c) for the batch endpoints; *req is per connection. */
int srv_batch_http(srv *s, struct lws *wsi, srv_batch_req **req, const char *uri); /* 1: not ours */
int srv_batch_body(srv *s, struct lws *wsi, srv_batch_req *req, const void *in, size_t len);
int srv_batch_body_done(srv *s, struct lws *wsi, srv_batch_req **req);
int srv_batch_writeable(srv *s, struct lws *wsi, srv_batch_req **req);
void srv_batch_closed(srv *s, srv_batch_req **req);
void srv_batch_wakeup(srv *s); /* service thread: finished jobs get a writeable callback */

/* Decodes an uploaded audio file (WAV, or what libsndfile reads: FLAC, Ogg
 * Vorbis/Opus, MP3, ...) to 16 kHz mono float (malloc'd). */
int srv_decode_upload(const void *data, size_t len, float **out, size_t *n, sotto_err *err);

#endif
