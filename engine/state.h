/* state.h - internal layout of per-stream states and per-thread workspaces
 * (shared by encoder.c and decoder.c). */
#ifndef SOTTO_STATE_H
#define SOTTO_STATE_H

#include "model.h"

struct sotto_state {
    const sotto_model *m;
    int max_seqs;
    int encoded;
    int n_ctx;               /* encoder positions of the last encode (<= n_audio_ctx) */
    float *enc_out;          /* [n_audio_ctx][d], host memory (backend.h: fetched) */
    /* The backend's part of the state (backend.h), opaque to the rest: its
       K/V caches, in its memory (host arrays on the CPU, device memory on a
       GPU), read and written only by its code, in these layouts:
         cross_v: [n_text_layer][n_audio_ctx][d], rows < n_ctx valid;
         cross_k: on the CPU K transposed, [n_text_layer][d][n_audio_ctx]
           (columns < n_ctx valid), so that a decoder step's few rows read
           16 keys per load (ops.h, sotto_attention_rows_kt); on a GPU as
           cross_v;
         self_k, self_v: [n_text_layer][max_seqs][n_text_ctx][d]. */
    void *be_state;
    int *seq_len;             /* [max_seqs], host memory */
};

/* One decoder row: the token at position `pos` of sequence `seq` of `st`. */
typedef struct sotto_row_ref {
    sotto_state *st;
    int seq;
    int pos;
} sotto_row_ref;

/* Named scratch buffers of a workspace. */
enum {
    WS_X, WS_H, WS_Q, WS_K, WS_V, WS_ATT, WS_FF, WS_COLS, WS_SCRATCH, WS_LOGIT_ROWS, WS_TMP,
    WS_GEN_LOGITS, /* owned by generate.c: step outputs */
    WS_ORDER,      /* decoder: rows grouped by state (ints) */
    WS_COUNT
};

struct sotto_backend;
struct sotto_workspace {
    float *buf[WS_COUNT];
    size_t cap[WS_COUNT];
    void *be_scratch; /* a backend's per-thread scratch (backend.h), or NULL */
    const struct sotto_backend *be_scratch_owner; /* whose ws_free frees it */
};

/* Buffer `which` with room for at least n floats (grown as needed, 64-byte
 * aligned, contents not preserved across growth). NULL when out of memory. */
float *sotto_ws_get(sotto_workspace *ws, int which, size_t n);

/* Floats of one cross-attention K (or V) cache and of one self-attention K
 * (or V) cache of a state: the layout below, for every backend's state_alloc. */
static inline size_t sotto_state_cross_floats(const sotto_state *st) {
    const sotto_hparams *hp = &st->m->hp;
    return (size_t)hp->n_text_layer * hp->n_audio_ctx * hp->n_text_state;
}
static inline size_t sotto_state_self_floats(const sotto_state *st) {
    const sotto_hparams *hp = &st->m->hp;
    return (size_t)hp->n_text_layer * st->max_seqs * hp->n_text_ctx * hp->n_text_state;
}

/* n floats, zeroed, 64-byte aligned (free() them); NULL when out of memory. */
float *sotto_alloc_floats(size_t n);

/* Self-attention K or V cache of (layer, seq): [n_text_ctx][d]. */
static inline float *sotto_state_self(const sotto_state *st, float *base, int layer, int seq) {
    const sotto_hparams *hp = &st->m->hp;
    return base + (((size_t)layer * st->max_seqs + seq) * hp->n_text_ctx) * hp->n_text_state;
}

/* The sequence gather's copying, for a backend's seq_gather: sources are
 * first parked in tmp (in the caches' memory, sotto_kv_gather_tmp_floats
 * floats or more), then written over their destinations, so that a
 * sequence that is both read and overwritten is read first. copy(ctx, dst,
 * src, bytes) copies (or queues a copy) within that memory. */
size_t sotto_kv_gather_tmp_floats(const sotto_state *st, const int *lens, int n);
int sotto_kv_gather(const sotto_state *st, float *self_k, float *self_v, float *tmp, const int *dst,
                    const int *src, const int *lens, int n,
                    int (*copy)(void *ctx, float *dst, const float *src, size_t bytes), void *ctx);

#endif
