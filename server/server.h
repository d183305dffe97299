/* server.h - internals shared by the parts of sotto-server.
 *
 * Threads:
 *   - the libwebsockets service thread (main): every socket, JSON parsing,
 *     audio decoding, VAD; it never runs the model;
 *   - one inference worker (worker.c): encoder passes and batched decoder
 *     steps, scheduled oldest-due-first per weight variant under the
 *     overload policy of include/scheduler.h; it never touches sockets. It
 *     appends events to session queues and wakes the service thread with
 *     lws_cancel_service();
 *   - one model loader (worker.c): loads the variants that starting
 *     sessions ask for, so that a load does not pause the sessions being
 *     served; the worker initializes a session once its variant is loaded;
 *   - the upload transcriber (batch.c).
 * Locks: srv->lock guards the session table and the worker's queue;
 * each session's lock guards its dictation state and event queue. Order:
 * srv->lock before a session's lock, never the reverse.
 */
#ifndef SOTTO_SERVER_H
#define SOTTO_SERVER_H

#include "audio_in.h"
#include "dictation.h"
#include "scheduler.h"
#include "linear.h"
#include "ring.h"
#include "silero.h"
#include "transcribe.h"
#include "whisper.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct lws;
struct lws_context;

/* ---- options ----------------------------------------------------------------- */

#define SRV_MAX_MODELS 8
#define SRV_MAX_API_KEYS 16

/* --audio-ctx: which passes encode only the audio they hold (issue 19). */
typedef enum { SRV_AUDIO_CTX_FULL, SRV_AUDIO_CTX_PARTIALS, SRV_AUDIO_CTX_ALL } srv_audio_ctx;

typedef struct srv_options {
    char host[128];           /* listen address ("" = all) */
    int port;
    char *model_dirs[SRV_MAX_MODELS];
    int n_models;
    int allowed[SOTTO_WFMT_COUNT]; /* weight variants sessions may pick */
    sotto_wfmt default_weights;   /* SOTTO_WFMT_DEFAULT (auto) until main resolves it */
    sotto_wfmt first_listed;      /* the first variant of --weights, SOTTO_WFMT_DEFAULT if none */
    sotto_wfmt stream_weights;    /* live sessions that do not choose; SOTTO_WFMT_DEFAULT (auto)
                                     until main resolves it (uploads keep default_weights) */
    sotto_device device;      /* where models run (CPU, AUTO, CUDA) */
    double memory_budget_mb;  /* resident weights, all variants together */
    int max_sessions;         /* started sessions with a connection */
    int max_connections;      /* WebSocket connections, of every kind */
    int max_connections_per_ip; /* ... from one client address */
    int max_detached;         /* sessions kept without a connection (resume, finished feeds) */
    double start_timeout_s;   /* a connection must start (or resume) its session by then */
    double idle_timeout_s;    /* a running session's client must complete a message this often */
    double max_buffer_s;      /* audio waiting for transcription, per session */
    double resume_grace_s;    /* a disconnected session is kept this long */
    double idle_unload_s;     /* unused variants are unloaded after this */
    double drain_s;           /* SIGTERM: time running sessions get to finish */
    int max_frame_bytes;      /* largest websocket message accepted */
    int threads;
    int max_batch;            /* sessions decoded together */
    double overload_wait_ms;  /* the overload policy: a pass that waited longer is behind */
    int audio_ctx;            /* srv_audio_ctx: which passes encode only their audio */
    double audio_ctx_pad_ms;  /* padding kept after the audio of such a window */
    double final_ctx_pad_ms;  /* padding kept after the audio of a cut final window */
    double final_ctx_min_ms;  /* a cut final window encodes at least this much */
    double speculate_ms;      /* silence after which a final pass is decoded before the VAD
                                 ends the utterance (0: off; include/dictation.h) */
    double speculate_load_ms; /* the same while steps are stretched (overload) */
    int final_beam;           /* beam size of final passes (1: greedy) while not behind */
    char web_dir[1024];
    char tls_cert[1024], tls_key[1024];
    char *api_keys[SRV_MAX_API_KEYS]; /* every endpoint but health, metrics, info, viewers; none = open */
    int n_api_keys;
    double max_upload_mb;     /* /v1/audio/transcriptions */
    double max_upload_s;      /* longest decoded upload (seconds) */
    int batch_queue;          /* uploads queued or running */
    int batch_threads;        /* CPU threads of the upload transcriber */
    int log_level;
    char vad_model[1024];     /* Silero VAD weights ("" = the default file, if present) */
    int vad_kind;             /* sessions' default VAD: SOTTO_VAD_SILERO or _ENERGY */
    int vad_kind_set;         /* --vad given */
    char redis_url[512];      /* --redis: session checkpoints ("" = none) */
    char instance[64];        /* --instance: the name in /metrics ("" = host:port) */
} srv_options;

void srv_options_default(srv_options *o);
/* argv / config file; returns 0, 1 (printed help) or -1 (error printed). */
int srv_options_parse(srv_options *o, int argc, char **argv);
void srv_options_free(srv_options *o);

/* ---- loaded models ------------------------------------------------------------- */

/* Beam search of final passes (--final-beam): the largest beam, and the finals
 * of one batch that get it (the rest of that batch decode greedily). */
#define SRV_BEAM_MAX 8
#define SRV_BEAM_STATES 4

typedef struct srv_model {
    char name[64];          /* directory basename: "tiny.en" */
    const char *dir;
    sotto_wfmt weights;
    sotto_model *model;     /* NULL while not loaded (srv->lock) */
    int loading;            /* a thread is loading it; others wait on srv->model_cv (srv->lock) */
    int refs;               /* sessions using it (srv->lock) */
    double last_used;       /* monotonic seconds */
    size_t bytes;
    char policy[512];
    /* worker thread only: per-pass decoder states and suppression lists */
    sotto_state **states;
    int n_states;
    /* states of --final-beam sequences for beam-searched finals, per batch level
       (0 partial, 1 speculative finals, 2 finals: a batch runs finals of higher
       levels between its windows, so each level has its own), created on first use */
    sotto_state *beam_states[3][SRV_BEAM_STATES];
    sotto_suppression sup;
} srv_model;

/* ---- metrics ------------------------------------------------------------------- */

#define SRV_HIST_BUCKETS 12

typedef struct srv_hist {
    _Atomic uint64_t buckets[SRV_HIST_BUCKETS]; /* cumulative at render time */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} srv_hist;

typedef struct srv_metrics {
    _Atomic uint64_t sessions_total, sessions_rejected, sessions_resumed;
    _Atomic uint64_t sessions_restored; /* resumed here from another instance's checkpoint */
    _Atomic uint64_t sessions_let_go;   /* detached here, restored elsewhere, dropped before their grace ran out */
    _Atomic uint64_t audio_in_samples, audio_final_samples, audio_dropped_samples;
    _Atomic uint64_t spec_passes, spec_used; /* speculative final passes run / that became finals */
    _Atomic uint64_t tails_dropped;          /* final text dropped as invented (dictation.h) */
    _Atomic uint64_t bad_messages, concealed_packets, passes, events_sent, events_dropped;
    _Atomic uint64_t rejected_passes, fallback_passes; /* the decoding guardrails */
    _Atomic uint64_t beam_finals; /* final passes decoded by beam search (--final-beam) */
    /* finals run between the windows of a partial batch (worker.c), and partial
       passes abandoned there because their utterance had ended */
    _Atomic uint64_t finals_between, partials_superseded;
    _Atomic uint64_t encoded_positions, encoded_windows; /* --audio-ctx: encoder work done */
    _Atomic uint64_t final_positions, final_windows;     /* the part of it for final passes */
    _Atomic uint64_t feed_viewers_total, feed_viewers_dropped;
    _Atomic uint64_t connections_rejected, auth_failures, timeouts, sessions_evicted, tokens_issued;
    _Atomic int connections; /* WebSocket connections open now */
    /* the overload policy (worker.c, include/scheduler.h) */
    _Atomic int step_scale_pm;    /* every session's step scale, per mille (1000: none) */
    _Atomic uint64_t step_grows, admission_closes, sessions_refused_overload;
    _Atomic uint64_t model_loads;  /* variants loaded (the loader thread and uploads) */
    srv_hist pass_queue, encode, decode, pass_total, first_token;
    srv_hist checkpoint;          /* building and queueing a checkpoint (the session's thread) */
    _Atomic uint64_t checkpoint_bytes;
} srv_metrics;

void srv_hist_add(srv_hist *h, double seconds);

/* ---- sessions ------------------------------------------------------------------ */

typedef enum srv_sess_state {
    SESS_NEW = 0,    /* connected, no start yet */
    SESS_LOADING,    /* start accepted, waiting for its model */
    SESS_RUNNING,
    SESS_STOPPING,   /* stop received: finishing the transcript */
    SESS_DONE        /* everything sent; closing */
} srv_sess_state;


/* A connection more than this many events behind skips superseded partials. */
#define SRV_LAG_SKIP 64

#define SRV_EVENT_RING 1024
#define SRV_FEED_NAME_MAX 64
#define SRV_FEEDS_ENDED_MAX 64    /* ended feeds kept for their captions (feed.c) */
#define SRV_FEEDS_OWNED_MAX 4096  /* feed names whose publishing key is remembered */

/* A final of a published session, for feed captions (.vtt/.srt). */
typedef struct srv_caption {
    char *text;
    double start, end;
    int utterance;
} srv_caption;

typedef struct srv srv;

/* A point of a session's audio: units the client sent (acked offsets) and
 * the 16 kHz samples they decoded to. */
typedef struct srv_mark {
    uint64_t units, samples;
} srv_mark;

#define SRV_MARKS 2048      /* >= 100 s of marks 50 ms apart: the backlog bound plus a window */
#define SRV_FINALS_KEPT 64  /* finals a checkpoint carries for replay */

typedef struct srv_session {
    struct srv_session *next;
    srv *srv;
    /* the wake-up list (srv->wake_lock): sessions with something for the service
       thread to do (new events, a state change); only sessions in the table */
    struct srv_session *wake_next;
    int on_wake_list;
    int in_table;
    uint64_t id;
    char id_str[24], token[40];
    pthread_mutex_t lock;
    int refs;                 /* srv->lock: table + worker + connection */
    struct lws *wsi;          /* service thread only; NULL when detached */
    int owner;                /* the API key it was opened with (index; -1: none configured) */
    double detached_at;       /* monotonic; 0 while attached */
    srv_sess_state state;
    int closing;              /* close the connection after the queue drains */
    int fatal;                /* an error ended the session */

    /* what the client asked for */
    sotto_encoding encoding;
    int sample_rate, channels;
    srv_model *sm;            /* its model variant (refs held) */
    char language[16];
    sotto_task task;
    char *prompt;
    sotto_dictation_params dp;

    sotto_audio_in *ain;      /* service thread only */
    float *pending;           /* audio decoded before the model was ready */
    int flush_pending;        /* a flush (commit) arrived before the model was ready (session lock) */
    size_t n_pending, cap_pending;
    uint64_t units_in;        /* PCM frames / opus packets accepted (acked) */
    uint64_t units_acked_sent;
    sotto_dictation *dict;    /* session lock */
    int32_t *prompt_tokens;   /* language/task/prompt for passes */
    int n_prompt_tokens;
    int worker_busy;          /* a pass of this session is running (srv->lock) */
    double pass_due_since;    /* when a pass became due: when its audio arrived, or its previous pass ended
                                 (session lock; the scheduler's age, the overload policy, metrics) */
    sotto_pace pace;          /* audio per wall second (scheduler.h): is the client real-time? */
    int language_detected;    /* "auto" resolved on the first pass */
    uint64_t final_samples_seen;
    uint64_t spec_passes_seen, spec_used_seen; /* dictation stats already added to the metrics */
    uint64_t tails_dropped_seen;
    int engine_failures;      /* passes in a row the engine could not run (worker) */
    uint64_t dropped_samples_seen; /* samples_dropped already added to the metric */

    /* events (session lock) */
    uint64_t next_seq;
    srv_event ring[SRV_EVENT_RING]; /* last events, for sending and resume */
    uint64_t first_kept;      /* seq of the oldest event still in the ring */
    uint64_t sent_upto;       /* events with seq <= this were written */
    uint64_t last_ack_seq, last_partial_seq; /* newest ack / partial event emitted */
    uint64_t dropped_events;

    /* live-caption feed (feed.c; session lock) */
    char feed[SRV_FEED_NAME_MAX + 1]; /* published name, "" if not published */
    char feed_key[SRV_FEED_NAME_MAX + 1];
    srv_caption *captions;
    int n_captions, cap_captions;
    struct lws **viewers;     /* service thread adds/removes; wakes read them */
    int n_viewers, cap_viewers;
    uint64_t viewers_woken_seq; /* newest event viewers were woken for */

    /* durability (checkpoint.c; session lock): where the client may resend
       audio from after a restore on any instance (the `durable` offset) */
    char *start_json;         /* the start message as accepted (a restore replays it) */
    srv_mark marks[SRV_MARKS]; /* (units, samples) after audio messages, >= 50 ms apart */
    int n_marks, mark_head;   /* ring: mark_head is the oldest */
    srv_mark mark_base;       /* the timeline's start: (0, 0), or a restore's point */
    uint64_t samples_out;     /* 16 kHz samples the client's audio decoded to, on the timeline */
    uint64_t skip_samples;    /* restored: decoded samples dropped to reach the durable point */
    int restore;              /* restored: init_session continues the dictation from restore_at */
    uint64_t restore_at, restore_utterance;
    int32_t *restore_ctx;
    int n_restore_ctx;
    int32_t *restore_committed;  /* the committed tokens of the utterance open at restore_at */
    int n_restore_committed;
    uint64_t restore_bound;
    uint64_t epoch;           /* restores of this session so far (persist.h) */
    cJSON *finals;            /* the latest finals (events with their seq), replayed after a restore */
    int ckpt_due;             /* a final was emitted since the last checkpoint */
    int moved;                /* handed over on SIGTERM: its checkpoint is kept for the resume */
    int superseded;           /* restored on another instance since: let go of it (persist.h) */
    uint64_t durable_written; /* units of the newest checkpoint Redis has: the `durable` of acks */
    uint64_t ckpt_gen_seen;   /* srv->ckpt_gen when it last checkpointed */
    uint64_t ckpt_durable;    /* durable point of the last checkpoint (samples) */
    double ckpt_at;           /* when (monotonic) */
} srv_session;

/* ---- the server ----------------------------------------------------------------- */

#define SRV_TOKEN_PREFIX "ek_"
#define SRV_TOKEN_LEN 40 /* "ek_" + 32 hex + NUL, rounded */
#define SRV_TOKENS_MAX 1024

/* A short-lived client token (auth.c): the key it stands for, until when. */
typedef struct srv_token {
    char value[SRV_TOKEN_LEN]; /* "" when the slot is free */
    double expires;            /* monotonic */
    int ident;                 /* the API key's index */
} srv_token;

/* The batch endpoint's queue and its transcriber thread (batch.c). */
typedef struct srv_batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct batch_job *jobs; /* every job not yet released by both sides */
    int n_queued;           /* waiting or running */
    int stop;
    int started;
    pthread_t thread;
} srv_batch;

struct srv {
    srv_options opt;
    struct lws_context *ctx;
    void *evloop; /* the service thread's libev loop (struct ev_loop *); NULL: lws's poll() */
    pthread_mutex_t lock;
    pthread_cond_t work;      /* the worker waits on it */
    pthread_cond_t model_cv;  /* a variant finished loading (srv_model.loading) */
    pthread_mutex_t load_lock; /* held for the whole of a load: one load at a time, since a
                                  load in progress is not in the memory budget (registry.c);
                                  taken before srv->lock, never while holding it */
    srv_session *sessions;
    int n_sessions;
    uint64_t next_id;
    /* Sessions to look at in the next wake-up (srv_session_wake): the service thread
       visits these instead of every session. wake_lock is taken last (after srv->lock
       and a session's lock), never held while taking another. */
    pthread_mutex_t wake_lock;
    srv_session *wake_list;
    _Atomic int wake_all;     /* srv_wake: the next wake-up visits every session */
    double scanned_all_at;    /* when it last did (service thread) */
    /* Feeds (feed.c), under lock: the records of ended feeds, kept for their
       captions (at most SRV_FEEDS_ENDED_MAX; references of their own), and the
       key that first published each name (at most SRV_FEEDS_OWNED_MAX). */
    srv_session *feeds_ended[SRV_FEEDS_ENDED_MAX];
    int n_feeds_ended;
    struct {
        char name[SRV_FEED_NAME_MAX + 1];
        int owner;
    } feeds_owned[SRV_FEEDS_OWNED_MAX];
    int n_feeds_owned;
    srv_batch batch; /* its own lock (batch.c), taken without srv->lock */
    /* Admission (gateway.c, the service thread only): open connections, in all and
       per client address. */
    struct srv_ip_count *conn_ips;
    int n_conn_ips, cap_conn_ips, n_conns;
    double feeds_refreshed; /* --redis: when live feeds' records were last renewed (wakeup.c) */
    struct srv_remote *remote; /* --redis: the fleet's connections and threads (fleet.c) */
    /* Client tokens minted here or adopted from the fleet (auth.c), under tokens_lock. */
    pthread_mutex_t tokens_lock;
    srv_token tokens[SRV_TOKENS_MAX];
    srv_model models[SRV_MAX_MODELS * SOTTO_WFMT_COUNT];
    int n_models;
    _Atomic int ready;        /* the default model is loaded */
    _Atomic int draining;
    _Atomic int stop;
    double drain_started;
    pthread_t worker;
    int worker_started;
    pthread_t loader;         /* loads variants that starting sessions ask for (worker.c) */
    int loader_started;
    pthread_cond_t load_cv;   /* the loader waits on it (srv->lock) */
    _Atomic int overloaded;   /* 1 while the worker is behind at the longest step: new
                                 sessions get `overloaded` (the overload policy) */
    sotto_load_params load_params; /* the overload policy's thresholds (--overload-wait-ms) */
    srv_metrics m;
    struct srv_persist *persist; /* --redis: session checkpoints (persist.h); NULL without */
    _Atomic uint64_t ckpt_gen;   /* bumped when Redis is back after an outage: everyone checkpoints again */
    sotto_silero_model *silero; /* the sessions' Silero VAD weights (NULL: none) */
};

double srv_now(void); /* monotonic seconds */
/* Wakes the service thread (any thread; async-signal-safe) to look at every
 * session: for changes that are not one session's (a signal, a model load
 * failing, Redis back, housekeeping). */
void srv_wake(srv *s);
/* Wakes the service thread to look at ss only (its new events, its state);
 * any thread, with or without ss's lock, holding a reference to ss. A session
 * no longer in the table is not queued. */
void srv_session_wake(srv *s, srv_session *ss);
/* Takes the queued sessions (srv->lock held): the first, then each next one
 * from srv_wake_list_next_locked, which also unmarks the one given (so that
 * its next wake queues it again). Every taken session must be passed to it
 * before srv->lock is let go; until then they are all valid. */
srv_session *srv_wake_list_take_locked(srv *s);
srv_session *srv_wake_list_next_locked(srv *s, srv_session *ss);

/* sessions (session.c) */
srv_session *srv_session_new(srv *s);
void srv_session_ref(srv *s, srv_session *ss);
void srv_session_unref(srv *s, srv_session *ss);
srv_session *srv_session_find(srv *s, const char *id_str);
/* 1 for a session without a connection that is kept: awaiting resume, or a
 * finished feed whose captions can still be fetched (never one whose start
 * was not processed). srv->lock held. */
int srv_session_detached_locked(const srv_session *ss);
/* Queues an event (takes ownership of ev; adds "seq") and wakes the
 * service thread. Callable from any thread; locks the session itself. */
void srv_session_emit(srv *s, srv_session *ss, cJSON *ev);
/* Same, session lock already held. */
void srv_session_emit_locked(srv *s, srv_session *ss, cJSON *ev);
/* A dictation event (borrowed): its sotto.v1 JSON (v1_event.c) is queued as
 * above, and a final's caption kept for the feed. Session lock held. */
void srv_session_emit_event_locked(srv *s, srv_session *ss, const sotto_event *ev);
void srv_session_error(srv *s, srv_session *ss, const char *code, const char *msg, int fatal);
/* Audio into the session's dictation (session lock held, ss->dict set);
 * what the backlog bound drops, and a final a held speculative pass gave, are
 * added to /metrics (a final is also checkpointed). */
void srv_session_push_locked(srv *s, srv_session *ss, const float *x, size_t n);
/* Adds the dictation's new stats (final, dropped audio, speculative passes) to
 * the metrics; *st gets them. 1 if a final came since the last call. */
int srv_session_count_locked(srv *s, srv_session *ss, sotto_dictation_stats *st);
/* Drops detached sessions past the grace period. */
void srv_sessions_reap(srv *s);

/* A session's operations (control.c; the service thread). Errors become the
 * session's error events. */
/* Starts ss with a start message: every check of a client's start, a session
 * slot, the overload policy, the feed claim; the model loads on the loader. */
void srv_session_start(srv *s, srv_session *ss, const cJSON *msg);
/* A binary audio message in the session's encoding. */
void srv_session_audio(srv *s, srv_session *ss, const unsigned char *data, size_t len);
/* flush (end_of_stream 0: commit what was heard) or stop (1: finish, then done). */
void srv_session_stop(srv *s, srv_session *ss, int end_of_stream);
/* Started sessions that have a connection (the --max-sessions slots), except self. */
int srv_sessions_busy(srv *s, const srv_session *self);
/* 1 if a session slot is free; else the `overloaded` error on ss (counted) and 0. */
int srv_session_slot_free(srv *s, srv_session *ss);

/* durability (checkpoint.c) */
/* Records the timeline after an audio message (service thread, session lock). */
void srv_mark_add_locked(srv_session *ss);
/* The durable point: *units the client resends from, and the sample it
 * decodes from (*at_sample <= *durable, the dictation's durable sample). */
void srv_durable_locked(srv_session *ss, uint64_t *units, uint64_t *at_sample, uint64_t *durable);
/* A final was emitted (from srv_session_emit_locked, with the event). */
void srv_checkpoint_note_final_locked(srv_session *ss, const cJSON *final_event);
/* A commit was emitted: the next checkpoint keeps it (committed text never changes, even on
   another instance). */
void srv_checkpoint_note_commit_locked(srv_session *ss);
/* Queues a checkpoint if one is due: a final since the last one, or the
 * durable point moved by 5 s (force: always). Session lock held; no-op without --redis. */
void srv_checkpoint_maybe_locked(srv *s, srv_session *ss, int force);
/* The durable offset clients are given: with --redis the newest one Redis
 * has (a restore elsewhere can start there), else this process's. */
uint64_t srv_durable_units_locked(srv *s, srv_session *ss);
/* The persist hooks (persist.h): user is the srv. */
void srv_checkpoint_written(void *user, const char *id, uint64_t epoch, uint64_t units);
struct srv_persist_watch;
/* persist.h's detached and superseded hooks: the sessions held here without a
 * connection, and one of them restored on another instance (let go of it). */
int srv_checkpoint_detached(void *user, struct srv_persist_watch *out, int max);
void srv_checkpoint_superseded(void *user, const char *id);
void srv_checkpoint_reconnected(void *user);
/* The session ended for good: its checkpoint is deleted. */
void srv_checkpoint_forget(srv *s, srv_session *ss);
/* A resume of a session this instance does not hold: restores it from its
 * checkpoint onto the connection's new session ss (SESS_NEW). Returns 0 when
 * restored, 1 when there is no such checkpoint (the caller says unknown_session),
 * -1 when an error event was already sent. */
int srv_checkpoint_restore(srv *s, srv_session *ss, const char *id, const char *token, uint64_t last_seq);

/* feeds (feed.c) */
int srv_feed_name_ok(const char *name);
/* Publishes ss under name (unique among sessions in the table); -1 if taken. */
/* Publishes ss under name: 0, -1 if a live session has it, -2 if the name
 * belongs to another key (the first key to publish a name owns it while the
 * server runs; sessions without keys configured have owner -1 and own nothing). */
int srv_feed_claim(srv *s, srv_session *ss, const char *name, const char *key);
/* The live session publishing name, else the record of an ended one (its
 * finals, key and owner only; kept for 1 h, at most 64: feed.c); takes a ref. */
srv_session *srv_feed_find(srv *s, const char *name);
/* A final's caption (text without its leading space; nothing for an empty text);
 * times in seconds. Session lock held. */
void srv_feed_add_final(srv_session *ss, const char *text, double start, double end, int utterance);
/* The same from a final event's sotto.v1 JSON (a replayed or remote final). */
void srv_feed_add_final_json(srv_session *ss, const cJSON *final_event);
/* Called by session_free: a published session's finals move into an ended
 * feed's record (see srv_feed_find) instead of being freed. */
void srv_feed_free_captions(srv_session *ss);
/* .vtt (vtt=1) or .srt of the finals so far; malloc'd. */
char *srv_feed_captions(srv_session *ss, int vtt, size_t *len);
/* The viewer's first event: {"type":"feed", "finals":[...]}; session lock held. */
char *srv_feed_history_locked(srv_session *ss);
int srv_feed_viewer_add(srv_session *ss, struct lws *wsi);
void srv_feed_viewer_remove(srv_session *ss, struct lws *wsi);

/* feeds across instances with --redis (fleet.c) */
int srv_feed_remote_start(srv *s, char *why, size_t why_sz); /* after s->persist */
void srv_feed_remote_stop(srv *s); /* after the service thread has stopped */
/* The fleet-wide claim of a name for ss (service thread): 0, -1 (a live
 * session elsewhere has it), -2 (another key owns it), 1 (Redis unreachable:
 * the local claim stands alone). */
int srv_feed_remote_claim(srv *s, srv_session *ss, const char *name);
/* A viewer event of a published session, queued for its Redis stream (and
 * finals for its list); json is the event as sent. Session lock held. */
void srv_feed_remote_publish_locked(srv *s, srv_session *ss, const char *json, size_t len, const cJSON *ev,
                                    int is_final, int is_done);
/* Keeps a live published session's claim from expiring (every 20 s). */
void srv_feed_remote_refresh(srv *s, srv_session *ss);
/* A feed another instance publishes (or published), as a proxy record that
 * viewers read like a session; takes a ref; NULL if Redis has no such feed. */
srv_session *srv_feed_remote_find(srv *s, const char *name);
/* Service thread, after a wake-up: proxies' viewers with new events. */
void srv_feed_remote_wake(srv *s);
void srv_feed_remote_stats(srv *s, uint64_t *written, uint64_t *dropped);
/* Client tokens across the fleet (fleet.c; service thread): stored at mint,
 * looked up by an instance that does not know one. 0, or -1 (none, or Redis
 * unreachable). */
int srv_fleet_token_put(srv *s, const char *value, int ident, double ttl_s);
int srv_fleet_token_get(srv *s, const char *value, int *ident, double *ttl_left);

/* API keys and client tokens (auth.c). With keys configured, a request is
 * authorized by a key or an unexpired token in "Authorization: Bearer X" /
 * "Authorization: Token X", the Sec-WebSocket-Protocol list
 * ("openai-insecure-api-key.X", "sotto-key.X", or X after "token" / "bearer"),
 * or the query (?api_key=X, ?token=X). Returns 1 and the key's index in
 * *ident (-1 with no keys configured), or 0. */
int srv_auth_check(srv *s, struct lws *wsi, int *ident);
/* Same, but only long-lived keys count (minting tokens). */
int srv_auth_check_key(srv *s, struct lws *wsi, int *ident);
#define SRV_TOKEN_TTL_DEFAULT 600
#define SRV_TOKEN_TTL_MAX 7200
/* A short-lived token for key ident, valid ttl_s seconds; *expires_at is Unix
 * time. -1 if the token table is full of live tokens. */
int srv_token_mint(srv *s, int ident, double ttl_s, char out[SRV_TOKEN_LEN], double *expires_at);
/* POST /v1/realtime/client_secrets (HTTP callbacks of conn_http.c; *req is per
 * connection): mints a token for the request's key (not a token). srv_secret_http
 * returns 1 when the URI is another endpoint's. */
typedef struct srv_secret_req srv_secret_req;
int srv_secret_http(srv *s, struct lws *wsi, srv_secret_req **req, const char *uri);
int srv_secret_body(srv_secret_req *req, const void *in, size_t len);
int srv_secret_done(srv *s, struct lws *wsi, srv_secret_req **req);
void srv_secret_closed(srv_secret_req **req);

/* models (registry.c) */
srv_model *srv_model_find(srv *s, const char *name, sotto_wfmt w);
/* Loads the variant if it is not loaded. Any thread: a second caller while a
 * load is in progress waits for it instead of loading a second copy. */
int srv_model_acquire(srv *s, srv_model *sm, sotto_err *err);
void srv_model_release(srv *s, srv_model *sm);
void srv_models_unload_idle(srv *s);
/* Frees a variant's decoder states (per-slot and beam); the worker must not be using them. */
void srv_model_free_states(srv_model *sm);

/* worker (worker.c) */
int srv_worker_start(srv *s);
void srv_worker_stop(srv *s);
void srv_worker_kick(srv *s); /* a pass may be due (called for every audio message: cheap) */
/* A session entered SESS_LOADING: the loader looks for variants to load
 * (it scans every session, so it is not woken per audio message), and the
 * worker may initialize a session whose variant is already loaded. */
void srv_loader_kick(srv *s);
/* 0 while the overload policy refuses new sessions (sets the `overloaded`
 * error on ss and counts it), else 1. */
int srv_admission_check(srv *s, srv_session *ss);

/* gateway (gateway.c, http.c; conn.h has the connection kinds) */
int srv_gateway_create(srv *s);  /* binds the port; s->ctx */
void srv_gateway_loop(srv *s);   /* until s->stop */
void srv_gateway_destroy(srv *s);
int srv_http_route(srv *s, struct lws *wsi, const char *uri);
/* Sends a complete response (no-store); returns what the HTTP callback
 * should: -1 to close, 0 to keep the connection. */
int srv_http_respond(struct lws *wsi, unsigned int status, const char *type, const char *body,
                     size_t len);
char *srv_metrics_render(srv *s, size_t *len);
/* The service thread's wake-up (wakeup.c): writeable callbacks for the sessions
 * with news, checkpoints of detached ones, the drain. */
void srv_service_wakeup(srv *s);

#endif
