/* registry.c - model variants: loaded on demand (by the loader thread for
 * sessions, by the upload thread for uploads) within the memory budget,
 * shared by every session that uses them, unloaded when idle. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "log.h"
#include "transcribe.h"

#include <stdlib.h>
#include <string.h>

srv_model *srv_model_find(srv *s, const char *name, sotto_wfmt w) {
    const char *want = name && *name ? name : s->n_models ? s->models[0].name : "";
    for (int i = 0; i < s->n_models; i++)
        if (strcmp(s->models[i].name, want) == 0 && s->models[i].weights == w) return &s->models[i];
    return NULL;
}

static size_t loaded_bytes_locked(const srv *s) {
    size_t total = 0;
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].model) total += s->models[i].bytes;
    return total;
}

void srv_model_free_states(srv_model *sm) {
    for (int i = 0; i < sm->n_states; i++) sotto_state_free(sm->states[i]);
    free(sm->states);
    sm->states = NULL;
    sm->n_states = 0;
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < SRV_BEAM_STATES; i++) {
            sotto_state_free(sm->beam_states[l][i]);
            sm->beam_states[l][i] = NULL;
        }
}

static void unload(srv *s, srv_model *sm) {
    /* srv->lock held by the caller; frees outside would be nicer, but
     * unloading is rare and fast */
    srv_model_free_states(sm);
    sotto_suppression_free(&sm->sup);
    sotto_model_free(sm->model);
    sm->model = NULL;
    SOTTO_INFO("unloaded %s (%s)", sm->name, sotto_wfmt_name(sm->weights));
    (void)s;
}

/* The load itself; sm->loading is set by the caller, so no other thread loads sm,
 * and srv->load_lock is held, so no other variant loads meanwhile (a load in
 * progress is not counted in the budget until it is installed below). */
static int load_variant(srv *s, srv_model *sm, sotto_err *err) {
    double t0 = srv_now();
    sotto_model_params p = sotto_model_default_params();
    p.weights = sm->weights;
    p.device = s->opt.device;
    sotto_model *m = sotto_model_load(sm->dir, &p, err);
    if (!m) return err ? err->code : SOTTO_E_INTERNAL;
    sotto_suppression sup;
    if (sotto_suppression_init(&sup, m, 1, 1, err)) {
        sotto_model_free(m);
        return err ? err->code : SOTTO_E_INTERNAL;
    }
    size_t bytes = sotto_model_weight_bytes(m);
    pthread_mutex_lock(&s->lock);
    double budget = s->opt.memory_budget_mb * 1e6;
    /* make room: unload idle variants, least recently used first */
    while (budget > 0 && (double)(loaded_bytes_locked(s) + bytes) > budget) {
        srv_model *lru = NULL;
        for (int i = 0; i < s->n_models; i++) {
            srv_model *o = &s->models[i];
            /* the default variant stays, as in srv_models_unload_idle */
            if (o->model && o->refs == 0 && o != sm && o != &s->models[0] &&
                (!lru || o->last_used < lru->last_used))
                lru = o;
        }
        if (!lru) break;
        unload(s, lru);
    }
    if (budget > 0 && (double)(loaded_bytes_locked(s) + bytes) > budget) {
        pthread_mutex_unlock(&s->lock);
        sotto_suppression_free(&sup);
        sotto_model_free(m);
        return sotto_err_set(err, SOTTO_E_RANGE,
                             "%s (%s) needs %.1f MB; the memory budget of %.0f MB is taken by "
                             "variants in use",
                             sm->name, sotto_wfmt_name(sm->weights), bytes / 1e6,
                             s->opt.memory_budget_mb);
    }
    sm->model = m;
    sm->bytes = bytes;
    sm->sup = sup;
    sotto_model_policy_string(m, sm->policy, sizeof sm->policy);
    sm->last_used = srv_now();
    pthread_mutex_unlock(&s->lock);
    atomic_fetch_add(&s->m.model_loads, 1);
    SOTTO_INFO("loaded %s (%s): %.1f MB of weights in %.2f s", sm->name, sotto_wfmt_name(sm->weights),
               bytes / 1e6, srv_now() - t0);
    return SOTTO_OK;
}

int srv_model_acquire(srv *s, srv_model *sm, sotto_err *err) {
    pthread_mutex_lock(&s->lock);
    sm->last_used = srv_now();
    /* one load at a time per variant: the loader and the upload thread may ask
       for the same variant at once, and a check-then-load would load it twice */
    while (sm->loading && !sm->model) pthread_cond_wait(&s->model_cv, &s->lock);
    if (sm->model) {
        pthread_mutex_unlock(&s->lock);
        return SOTTO_OK;
    }
    sm->loading = 1;
    pthread_mutex_unlock(&s->lock);
    /* one load at a time of any variant (the loader and the upload thread may load
       two different ones): a load's memory counts in the budget only once installed */
    pthread_mutex_lock(&s->load_lock);
    int rc = load_variant(s, sm, err);
    pthread_mutex_unlock(&s->load_lock);
    pthread_mutex_lock(&s->lock);
    sm->loading = 0;
    pthread_cond_broadcast(&s->model_cv);
    pthread_cond_signal(&s->work); /* sessions waiting for it can be initialized */
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void srv_model_release(srv *s, srv_model *sm) {
    pthread_mutex_lock(&s->lock);
    if (sm->refs > 0) sm->refs--;
    sm->last_used = srv_now();
    pthread_mutex_unlock(&s->lock);
}

void srv_models_unload_idle(srv *s) {
    double now = srv_now();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_models; i++) {
        srv_model *sm = &s->models[i];
        /* the default variant stays: the server is "ready" with it */
        if (sm->model && sm->refs == 0 && i != 0 && now - sm->last_used > s->opt.idle_unload_s)
            unload(s, sm);
    }
    pthread_mutex_unlock(&s->lock);
}
