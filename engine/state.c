/* state.c - per-stream state and per-thread workspace management. */
#include "backend.h"
#include "state.h"

#include <stdlib.h>
#include <string.h>

sotto_workspace *sotto_workspace_create(void) { return calloc(1, sizeof(sotto_workspace)); }

void sotto_workspace_free(sotto_workspace *ws) {
    if (!ws) return;
    for (int i = 0; i < WS_COUNT; i++) free(ws->buf[i]);
    if (ws->be_scratch && ws->be_scratch_owner) ws->be_scratch_owner->ws_free(ws->be_scratch);
    free(ws);
}

float *sotto_ws_get(sotto_workspace *ws, int which, size_t n) {
    if (n <= ws->cap[which]) return ws->buf[which];
    size_t cap = n + n / 4 + 64;
    size_t bytes = (cap * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    free(ws->buf[which]);
    ws->buf[which] = p;
    ws->cap[which] = cap;
    return p;
}

float *sotto_alloc_floats(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes);
    return p;
}

sotto_state *sotto_state_create(const sotto_model *m, int max_seqs, sotto_err *err) {
    if (max_seqs < 1 || max_seqs > 64) {
        sotto_err_set(err, SOTTO_E_INVALID, "max_seqs %d out of range 1..64", max_seqs);
        return NULL;
    }
    sotto_state *st = calloc(1, sizeof *st);
    if (!st) goto oom;
    const sotto_hparams *hp = &m->hp;
    st->m = m;
    st->max_seqs = max_seqs;
    st->n_ctx = m->hp.n_audio_ctx;
    st->enc_out = sotto_alloc_floats((size_t)hp->n_audio_ctx * hp->n_audio_state);
    st->seq_len = calloc((size_t)max_seqs, sizeof(int));
    if (!st->enc_out || !st->seq_len) goto oom;
    if (m->be->state_alloc(st, err)) { /* the K/V caches, where the backend keeps them */
        sotto_state_free(st);
        return NULL;
    }
    return st;
oom:
    sotto_state_free(st);
    sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for a decoder state");
    return NULL;
}

void sotto_state_free(sotto_state *st) {
    if (!st) return;
    free(st->enc_out);
    st->m->be->state_free(st); /* st->m is set as soon as st exists */
    free(st->seq_len);
    free(st);
}

int sotto_state_max_seqs(const sotto_state *st) { return st->max_seqs; }

const float *sotto_state_encoder_output(const sotto_state *st) {
    /* a GPU state copies it back on first use after each encode (the state
     * object itself is never const: only the callers' view of it is) */
    const sotto_backend *be = st->m->be;
    if (be->state_fetch_encoder_output && be->state_fetch_encoder_output((sotto_state *)st, NULL))
        return NULL;
    return st->enc_out;
}

int sotto_state_encoded_positions(const sotto_state *st) { return st->n_ctx; }

int sotto_state_seq_len(const sotto_state *st, int seq) {
    return seq >= 0 && seq < st->max_seqs ? st->seq_len[seq] : -1;
}

int sotto_state_seq_truncate(sotto_state *st, int seq, int len) {
    if (seq < 0 || seq >= st->max_seqs || len < 0 || len > st->seq_len[seq])
        return SOTTO_E_INVALID;
    st->seq_len[seq] = len;
    return SOTTO_OK;
}

/* Floats of one parked K (or V) cache: the longest source's rows. */
static size_t gather_per(const sotto_state *st, const int *lens, int n) {
    size_t max_rows = 0;
    for (int i = 0; i < n; i++)
        if ((size_t)lens[i] > max_rows) max_rows = (size_t)lens[i];
    return max_rows * (size_t)st->m->hp.n_text_state;
}

size_t sotto_kv_gather_tmp_floats(const sotto_state *st, const int *lens, int n) {
    return gather_per(st, lens, n) * (size_t)n * 2; /* K and V of each source */
}

int sotto_kv_gather(const sotto_state *st, float *self_k, float *self_v, float *tmp, const int *dst,
                    const int *src, const int *lens, int n,
                    int (*copy)(void *ctx, float *dst, const float *src, size_t bytes), void *ctx) {
    const sotto_hparams *hp = &st->m->hp;
    /* Sources that are also overwritten are first parked in the scratch:
     * the simplest correct scheme is to copy every needed source once into
     * it. Lengths are small (<= n_text_ctx rows). */
    const size_t row = (size_t)hp->n_text_state;
    const size_t per = gather_per(st, lens, n);
    int rc = SOTTO_OK;
    for (int l = 0; l < hp->n_text_layer && !rc; l++) {
        for (int i = 0; i < n && !rc; i++) {
            if (dst[i] == src[i] || lens[i] == 0) continue;
            size_t bytes = sizeof(float) * (size_t)lens[i] * row;
            rc = copy(ctx, tmp + (size_t)(2 * i) * per, sotto_state_self(st, self_k, l, src[i]), bytes);
            if (!rc)
                rc = copy(ctx, tmp + (size_t)(2 * i + 1) * per, sotto_state_self(st, self_v, l, src[i]), bytes);
        }
        for (int i = 0; i < n && !rc; i++) {
            if (dst[i] == src[i] || lens[i] == 0) continue;
            size_t bytes = sizeof(float) * (size_t)lens[i] * row;
            rc = copy(ctx, sotto_state_self(st, self_k, l, dst[i]), tmp + (size_t)(2 * i) * per, bytes);
            if (!rc)
                rc = copy(ctx, sotto_state_self(st, self_v, l, dst[i]), tmp + (size_t)(2 * i + 1) * per, bytes);
        }
    }
    return rc;
}

int sotto_state_seq_gather(sotto_state *st, const int *dst, const int *src, int n) {
    int ms = st->max_seqs;
    if (n < 0 || n > ms) return SOTTO_E_INVALID;
    for (int i = 0; i < n; i++)
        if (dst[i] < 0 || dst[i] >= ms || src[i] < 0 || src[i] >= ms) return SOTTO_E_INVALID;
    int lens[64] = {0}; /* n <= max_seqs <= 64 */
    for (int i = 0; i < n; i++) lens[i] = st->seq_len[src[i]];
    int rc = st->m->be->seq_gather(st, dst, src, lens, n, NULL); /* done when it returns */
    if (rc) return rc;
    for (int i = 0; i < n; i++) st->seq_len[dst[i]] = lens[i];
    return SOTTO_OK;
}
