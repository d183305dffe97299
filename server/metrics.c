/* metrics.c - counters and latency histograms in Prometheus text format. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "persist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds of the histogram buckets, seconds (the last is +Inf). */
static const double k_bounds[SRV_HIST_BUCKETS - 1] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                       1.0,  2.5,   5.0,  10.0, 30.0};

void srv_hist_add(srv_hist *h, double seconds) {
    int b = 0;
    while (b < SRV_HIST_BUCKETS - 1 && seconds > k_bounds[b]) b++;
    atomic_fetch_add(&h->buckets[b], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, (uint64_t)(seconds * 1e6));
}

typedef struct out {
    char *buf;
    size_t len, cap;
    int failed;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    if (o->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *nb = realloc(o->buf, cap);
        if (!nb) {
            o->failed = 1;
            return;
        }
        o->buf = nb;
        o->cap = cap;
    }
}

static void counter(out *o, const char *name, const char *help, uint64_t v) {
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

/* A counter in seconds (fractional). */
static void counter_s(out *o, const char *name, const char *help, double v) {
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %.6g\n", name, help, name, name, v);
}

static void gauge(out *o, const char *name, const char *help, double v) {
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.6g\n", name, help, name, name, v);
}

static void hist(out *o, const char *name, const char *help, srv_hist *h) {
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < SRV_HIST_BUCKETS; b++) {
        cum += atomic_load(&h->buckets[b]);
        if (b < SRV_HIST_BUCKETS - 1)
            put(o, "%s_bucket{le=\"%g\"} %llu\n", name, k_bounds[b], (unsigned long long)cum);
        else
            put(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    put(o, "%s_sum %.6f\n%s_count %llu\n", name, atomic_load(&h->sum_us) / 1e6, name,
        (unsigned long long)atomic_load(&h->count));
}

char *srv_metrics_render(srv *s, size_t *len) {
    out o = {malloc(8192), 0, 8192, 0};
    if (!o.buf) return NULL;
    srv_metrics *m = &s->m;
    int active = 0, detached = 0, queued = 0, viewers = 0;
    pthread_mutex_lock(&s->lock);
    const int held = s->n_sessions;
    for (srv_session *ss = s->sessions; ss; ss = ss->next) {
        if (ss->state == SESS_LOADING || ss->state == SESS_RUNNING || ss->state == SESS_STOPPING) {
            active++;
            if (!ss->wsi) detached++;
        }
        pthread_mutex_lock(&ss->lock);
        if (ss->dict && sotto_dictation_pass_due(ss->dict)) queued++;
        viewers += ss->n_viewers;
        pthread_mutex_unlock(&ss->lock);
    }
    pthread_mutex_unlock(&s->lock);
    gauge(&o, "sotto_ready", "1 once the default model is loaded", atomic_load(&s->ready));
    /* the info-metric idiom: join on it for the instance's name (--instance) */
    put(&o, "# HELP sotto_instance_info this instance (--instance)\n# TYPE sotto_instance_info gauge\n"
            "sotto_instance_info{instance=\"%s\"} 1\n", s->opt.instance);
    gauge(&o, "sotto_sessions_active", "sessions started and not finished", active);
    gauge(&o, "sotto_sessions_detached", "active sessions waiting for their client to resume",
          detached);
    gauge(&o, "sotto_queue_passes", "sessions with a decode pass due", queued);
    gauge(&o, "sotto_sessions_held",
          "sessions in the table: connected (started or not), detached, or not yet reaped", held);
    counter(&o, "sotto_sessions_total", "WebSocket sessions opened", atomic_load(&m->sessions_total));
    counter(&o, "sotto_sessions_rejected_total", "sessions refused (max sessions)",
            atomic_load(&m->sessions_rejected));
    counter(&o, "sotto_sessions_resumed_total", "sessions resumed after a disconnect",
            atomic_load(&m->sessions_resumed));
    counter(&o, "sotto_sessions_restored_total", "sessions resumed here from another instance's checkpoint",
            atomic_load(&m->sessions_restored));
    counter(&o, "sotto_sessions_let_go_total",
            "sessions held here without a connection and dropped because another instance restored them",
            atomic_load(&m->sessions_let_go));
    if (s->persist) {
        srv_persist_stats ps;
        srv_persist_get_stats(s->persist, &ps);
        gauge(&o, "sotto_redis_connected", "1 while the checkpoint writer is connected to Redis", ps.connected);
        counter(&o, "sotto_checkpoints_written_total", "session checkpoints written to Redis", ps.writes);
        counter(&o, "sotto_checkpoint_errors_total",
                "checkpoint writes that failed (Redis unreachable or refusing; retried with the newest)",
                ps.write_errors);
        counter(&o, "sotto_checkpoints_refused_total",
                "checkpoints not written because another instance restored the session since", ps.refused);
        gauge(&o, "sotto_checkpoints_queued", "sessions whose newest checkpoint waits to be written", ps.queued);
        counter(&o, "sotto_checkpoint_read_errors_total", "resumes that could not read Redis", ps.read_errors);
        uint64_t fw, fd;
        srv_feed_remote_stats(s, &fw, &fd);
        counter(&o, "sotto_feed_redis_writes_total", "feed events and finals written to Redis streams and lists", fw);
        counter(&o, "sotto_feed_redis_dropped_total",
                "feed writes dropped because Redis was away too long (the oldest go first)", fd);
        counter_s(&o, "sotto_checkpoint_write_seconds_total",
                  "time the checkpoint writer spent in successful Redis writes (round trips)", ps.write_us / 1e6);
        counter(&o, "sotto_checkpoint_bytes_total", "bytes of checkpoints queued", atomic_load(&m->checkpoint_bytes));
        hist(&o, "sotto_checkpoint_seconds", "building and queueing a checkpoint, on the session's thread",
             &m->checkpoint);
    }
    gauge(&o, "sotto_connections", "WebSocket connections open", atomic_load(&m->connections));
    counter(&o, "sotto_connections_rejected_total",
            "WebSocket connections refused (limits, key, path, draining, no session slot)",
            atomic_load(&m->connections_rejected));
    counter(&o, "sotto_auth_failures_total", "requests without a valid API key or client token",
            atomic_load(&m->auth_failures));
    counter(&o, "sotto_timeouts_total", "connections closed for --start-timeout-s or --idle-timeout-s",
            atomic_load(&m->timeouts));
    counter(&o, "sotto_sessions_evicted_total", "detached sessions dropped for --max-detached",
            atomic_load(&m->sessions_evicted));
    counter(&o, "sotto_client_tokens_total", "client tokens minted", atomic_load(&m->tokens_issued));
    counter_s(&o, "sotto_audio_received_seconds_total", "audio accepted, seconds",
          atomic_load(&m->audio_in_samples) / 16000.0);
    counter_s(&o, "sotto_audio_transcribed_seconds_total", "audio covered by final passes, seconds",
          atomic_load(&m->audio_final_samples) / 16000.0);
    counter_s(&o, "sotto_audio_dropped_seconds_total", "audio dropped because of backlog, seconds",
          atomic_load(&m->audio_dropped_samples) / 16000.0);
    counter(&o, "sotto_speculative_passes_total",
            "final passes decoded before the VAD ended their utterance (--speculate-ms)",
            atomic_load(&m->spec_passes));
    counter(&o, "sotto_speculative_finals_total", "... whose result became the final as the utterance ended",
            atomic_load(&m->spec_used));
    counter(&o, "sotto_final_tails_dropped_total",
            "final text dropped as invented: a segment opening past its pass's audio, or a failed pass "
            "over the rest after a single-timestamp end",
            atomic_load(&m->tails_dropped));
    counter(&o, "sotto_bad_messages_total", "client messages answered with an error",
            atomic_load(&m->bad_messages));
    counter(&o, "sotto_opus_concealed_packets_total", "Opus packets replaced by concealment",
            atomic_load(&m->concealed_packets));
    counter(&o, "sotto_passes_total", "decode passes run", atomic_load(&m->passes));
    counter(&o, "sotto_events_sent_total", "events written to clients", atomic_load(&m->events_sent));
    counter(&o, "sotto_feed_viewers_total", "feed viewer connections accepted",
            atomic_load(&m->feed_viewers_total));
    counter(&o, "sotto_feed_viewers_dropped_total", "feed viewers dropped for falling behind",
            atomic_load(&m->feed_viewers_dropped));
    gauge(&o, "sotto_feed_viewers", "feed viewers connected", viewers);
    counter(&o, "sotto_events_dropped_total", "events dropped for lagging clients",
            atomic_load(&m->events_dropped));
    counter(&o, "sotto_passes_rejected_total",
            "partial passes withdrawn by the guardrails (loop, too many words, low confidence)",
            atomic_load(&m->rejected_passes));
    counter(&o, "sotto_passes_fallback_total",
            "final passes that failed the guardrails and were decoded again at higher temperatures",
            atomic_load(&m->fallback_passes));
    counter(&o, "sotto_finals_beam_total",
            "final passes decoded by beam search (--final-beam; greedy while the server is behind)",
            atomic_load(&m->beam_finals));
    counter(&o, "sotto_finals_between_windows_total",
            "final passes run between the encoder windows of a less urgent batch (partial passes, "
            "or speculative finals) instead of after it",
            atomic_load(&m->finals_between));
    counter(&o, "sotto_partials_superseded_total",
            "partial passes dropped before their decoder because their utterance had ended "
            "(its final ran at once)",
            atomic_load(&m->partials_superseded));
    counter(&o, "sotto_encoder_windows_total", "windows encoded (one per pass)",
            atomic_load(&m->encoded_windows));
    counter_s(&o, "sotto_encoder_seconds_total",
            "audio seconds the encoder ran over (30 per whole window; less per window cut by "
            "--audio-ctx)",
            atomic_load(&m->encoded_positions) / 50.0);
    counter(&o, "sotto_encoder_final_windows_total", "of those windows, the final passes'",
            atomic_load(&m->final_windows));
    counter_s(&o, "sotto_encoder_final_seconds_total",
              "of those seconds, the final passes' (--final-ctx-pad-ms, --final-ctx-min-ms)",
              atomic_load(&m->final_positions) / 50.0);
    gauge(&o, "sotto_step_scale",
          "the overload policy: every session's step is its own times this (1: not behind)",
          atomic_load(&m->step_scale_pm) / 1000.0);
    gauge(&o, "sotto_overloaded", "1 while new sessions are refused because the worker is behind",
          atomic_load(&s->overloaded));
    counter(&o, "sotto_step_grows_total", "times the overload policy stretched the step",
            atomic_load(&m->step_grows));
    counter(&o, "sotto_admission_closes_total", "times the overload policy stopped admitting sessions",
            atomic_load(&m->admission_closes));
    counter(&o, "sotto_sessions_refused_overload_total", "sessions refused while overloaded",
            atomic_load(&m->sessions_refused_overload));
    counter(&o, "sotto_model_loads_total", "weight variants loaded", atomic_load(&m->model_loads));
    hist(&o, "sotto_pass_queue_seconds", "time a due pass waited for the worker", &m->pass_queue);
    hist(&o, "sotto_encode_seconds", "log-mel + encoder per pass", &m->encode);
    hist(&o, "sotto_decode_seconds", "decoder per batch of passes", &m->decode);
    hist(&o, "sotto_pass_seconds", "a pass from due to completed", &m->pass_total);
    hist(&o, "sotto_first_token_seconds", "from a pass being due to its first token", &m->first_token);
    put(&o, "# HELP sotto_weights_bytes weight bytes of each loaded variant\n"
            "# TYPE sotto_weights_bytes gauge\n");
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_models; i++) {
        srv_model *sm = &s->models[i];
        if (sm->model)
            put(&o, "sotto_weights_bytes{model=\"%s\",weights=\"%s\"} %zu\n", sm->name,
                sotto_wfmt_name(sm->weights), sm->bytes);
    }
    pthread_mutex_unlock(&s->lock);
    if (o.failed) {
        free(o.buf);
        return NULL;
    }
    *len = o.len;
    return o.buf;
}
