/* main.c - sotto-server: the streaming dictation server. */
#define _POSIX_C_SOURCE 200809L
#include "blas_env.h"
#include "compat.h"
#include "linear.h"
#include "log.h"
#include "server.h"
#include "persist.h"
#include "threads.h"
#include "vad_model.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static srv *g_server;

static void on_signal(int sig) {
    if (!g_server) return;
    if (sig == SIGTERM || sig == SIGINT) {
        if (atomic_load(&g_server->draining)) { /* second signal: stop now */
            atomic_store(&g_server->stop, 1);
        } else {
            atomic_store(&g_server->draining, 1);
        }
        srv_wake(g_server); /* lws_cancel_service is async-signal-safe (a pipe write) */
    }
}

/* One table entry per (model directory, allowed variant); entry 0 is the
 * first model in the live sessions' default variant (loaded at start and
 * kept), then the uploads' default. */
static int build_models(srv *s) {
    const sotto_wfmt live = s->opt.stream_weights, upload = s->opt.default_weights;
    sotto_wfmt order[SOTTO_WFMT_COUNT];
    int n = 0;
    order[n++] = live;
    if (upload != live) order[n++] = upload;
    for (int k = 0; k < SOTTO_WFMT_COUNT; k++)
        if (s->opt.allowed[k] && k != (int)live && k != (int)upload) order[n++] = (sotto_wfmt)k;
    for (int d = 0; d < s->opt.n_models; d++) {
        const char *dir = s->opt.model_dirs[d];
        const char *base = strrchr(dir, '/');
        base = base && base[1] ? base + 1 : dir;
        for (int i = 0; i < n; i++) {
            const sotto_wfmt w = order[i];
            srv_model *sm = &s->models[s->n_models++];
            snprintf(sm->name, sizeof sm->name, "%s", base);
            sm->dir = dir;
            sm->weights = w;
        }
    }
    return 0;
}

/* --default-weights auto: the first variant --weights lists, else the
 * first model's own precision (sotto_checkpoint_weights: f16 for a float16
 * CTranslate2 model, the same transcripts as f32 at half the bytes). */
static int resolve_default_weights(srv *s) {
    if (s->opt.default_weights != SOTTO_WFMT_DEFAULT) return 0;
    if (s->opt.first_listed != SOTTO_WFMT_DEFAULT) {
        s->opt.default_weights = s->opt.first_listed;
        return 0;
    }
    sotto_err err;
    sotto_wfmt w;
    if (sotto_checkpoint_weights(s->opt.model_dirs[0], &w, &err)) {
        SOTTO_ERROR("cannot choose the default weights: %s", err.msg);
        return -1;
    }
    s->opt.default_weights = w;
    return 0;
}

/* --stream-weights auto: q8 where it runs on the CPU's int8 dot product
 * (the fastest variant there: final p95 0.15 s against 0.6 s for f16 at 8
 * real-time streams on 2 cores, docs/PERF.md) unless the operator chose the
 * variants (--weights, or --default-weights: default_chosen), else the
 * default weights. A usable GPU takes the default too. */
static void resolve_stream_weights(srv *s, int default_chosen) {
    if (s->opt.stream_weights != SOTTO_WFMT_DEFAULT) return;
    s->opt.stream_weights = s->opt.default_weights;
    if (!default_chosen && s->opt.first_listed == SOTTO_WFMT_DEFAULT && s->opt.allowed[SOTTO_WFMT_Q8] &&
        sotto_linear_q8_fast() && !sotto_device_is_gpu(s->opt.device))
        s->opt.stream_weights = SOTTO_WFMT_Q8;
}

/* The Silero VAD: an explicit --vad-model must load; the default file is
 * used when present, else sessions fall back to the energy VAD (said once). */
static int load_vad(srv *s) {
    char buf[sizeof s->opt.vad_model];
    const char *path = s->opt.vad_model[0] ? s->opt.vad_model : sotto_vad_model_default(buf, sizeof buf);
    if (!path) {
        if (s->opt.vad_kind_set && s->opt.vad_kind == SOTTO_VAD_SILERO) {
            SOTTO_ERROR("--vad silero: no Silero model at %s (scripts/fetch_models.sh fetches it)", buf);
            return -1;
        }
        if (s->opt.vad_kind == SOTTO_VAD_SILERO)
            SOTTO_WARN("no Silero VAD model at %s (scripts/fetch_models.sh fetches it); sessions "
                       "use the energy VAD", buf);
        s->opt.vad_kind = SOTTO_VAD_ENERGY;
        return 0;
    }
    sotto_err err;
    if (!(s->silero = sotto_silero_load(path, &err))) {
        SOTTO_ERROR("cannot load the VAD model: %s", err.msg);
        return -1;
    }
    SOTTO_INFO("VAD: %s by default (Silero weights %s)",
               s->opt.vad_kind == SOTTO_VAD_SILERO ? "silero" : "energy", path);
    return 0;
}

int main(int argc, char **argv) {
    sotto_blas_check_coretype(argv);
    static srv s;
    srv_options_default(&s.opt);
    int rc = srv_options_parse(&s.opt, argc, argv);
    if (rc) {
        srv_options_free(&s.opt);
        return rc > 0 ? 0 : 2;
    }
    sotto_log_set_level((sotto_log_level)s.opt.log_level);
    const int default_chosen = s.opt.default_weights != SOTTO_WFMT_DEFAULT;
    if (resolve_default_weights(&s) || load_vad(&s)) {
        srv_options_free(&s.opt);
        return 2;
    }
    resolve_stream_weights(&s, default_chosen);
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.work, NULL);
    pthread_cond_init(&s.model_cv, NULL);
    pthread_cond_init(&s.load_cv, NULL);
    pthread_mutex_init(&s.load_lock, NULL);
    pthread_mutex_init(&s.wake_lock, NULL);
    srv_batch_init(&s);
    pthread_mutex_init(&s.tokens_lock, NULL);
    s.load_params = sotto_load_default_params();
    s.load_params.high_wait_s = s.opt.overload_wait_ms / 1000.0;
    s.load_params.reopen_wait_s = s.load_params.high_wait_s / 2;
    s.load_params.low_wait_s = s.load_params.high_wait_s / 4;
    build_models(&s);
    if (!s.opt.instance[0]) snprintf(s.opt.instance, sizeof s.opt.instance, "%.50s:%d",
                                     s.opt.host[0] ? s.opt.host : "0.0.0.0", s.opt.port);
    if (s.opt.redis_url[0]) {
        char why[512];
        /* checkpoints outlive a long pause of a live session, and a resume's grace */
        srv_persist_hooks hooks = {srv_checkpoint_written, srv_checkpoint_reconnected, srv_checkpoint_detached,
                                   srv_checkpoint_superseded, &s};
        if (!(s.persist = srv_persist_create(s.opt.redis_url, 3600 + s.opt.resume_grace_s, &hooks, why,
                                             sizeof why))) {
            SOTTO_ERROR("%s", why);
            srv_options_free(&s.opt);
            return 2;
        }
        if (srv_feed_remote_start(&s, why, sizeof why)) {
            SOTTO_ERROR("%s", why);
            srv_persist_free(s.persist);
            srv_options_free(&s.opt);
            return 2;
        }
        SOTTO_INFO("sessions are checkpointed to %s (instance %s); feeds are shared there", s.opt.redis_url,
                   s.opt.instance);
    }
    g_server = &s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (srv_gateway_create(&s)) {
        srv_options_free(&s.opt);
        return 1;
    }
    if (srv_worker_start(&s)) {
        SOTTO_ERROR("cannot start the inference worker");
        srv_gateway_destroy(&s);
        return 1;
    }
    if (srv_batch_start(&s)) {
        SOTTO_ERROR("cannot start the upload transcriber");
        srv_worker_stop(&s);
        srv_gateway_destroy(&s);
        return 1;
    }
    SOTTO_INFO("model %s, weights %s for live sessions and %s for uploads, device %s, %d CPU threads",
               s.opt.model_dirs[0], sotto_wfmt_name(s.opt.stream_weights),
               sotto_wfmt_name(s.opt.default_weights), sotto_device_name(s.opt.device), sotto_threads_get());
    srv_gateway_loop(&s);
    int failed = !atomic_load(&s.ready);
    if (atomic_load(&s.draining)) SOTTO_INFO("drained; shutting down");
    srv_batch_stop(&s);
    srv_worker_stop(&s);
    srv_gateway_destroy(&s);
    if (s.persist) srv_persist_quiesce(s.persist); /* its hooks look sessions up */
    if (s.persist) srv_feed_remote_stop(&s);        /* its threads read feeds' sessions */
    /* sessions still in the table */
    while (s.sessions) {
        srv_session *ss = s.sessions;
        s.sessions = ss->next;
        ss->refs = 1;
        ss->next = NULL;
        srv_session_unref(&s, ss);
    }
    for (int i = 0; i < s.n_models; i++) {
        srv_model *sm = &s.models[i];
        srv_model_free_states(sm);
        sotto_suppression_free(&sm->sup);
        sotto_model_free(sm->model);
    }
    sotto_silero_model_free(s.silero);
    srv_persist_free(s.persist); /* after the sessions: their last deletions are written */
    srv_options_free(&s.opt);
    return failed ? 1 : 0;
}
