/* backend.h - where a model's layers run: a table of operations on the
 * model (sotto_model.be), chosen when the model is placed (model.c) and
 * never again. Not a public header.
 *
 * The CPU is one entry (backend_cpu.c: OpenBLAS and sotto's own kernels),
 * CUDA another (gpu_cuda.c: a GPU, or in test builds the CPU emulation of
 * CUDA under kernels/cuda/emu). Adding a backend means one new file that
 * defines its table, and one line in model.c's place_model; encoder.c,
 * decoder.c and state.c call only the table.
 *
 * Ownership:
 *  - the model's copy on the backend is sotto_model.be_model, opaque,
 *    created by model_upload and freed by model_free (NULL on the CPU,
 *    whose layers read the host weights);
 *  - a state's K/V caches (layouts in state.h) are the backend's, in
 *    sotto_state.be_state, allocated by state_alloc and freed by
 *    state_free: host arrays on the CPU (sotto_cpu_kv below), device
 *    memory on a GPU, read and written only by that backend's code;
 *    sotto_state itself holds only host memory (enc_out, seq_len);
 *  - per-thread scratch is sotto_workspace.be_scratch, created by the
 *    backend on first use and freed with the workspace (ws_free of the
 *    backend recorded in be_scratch_owner).
 *
 * Every operation returns SOTTO_OK or an error code with a message in err.
 * A backend may queue work (on queues it keeps in the workspace or the
 * state, never per thread), but every operation has finished it when it
 * returns. */
#ifndef SOTTO_BACKEND_H
#define SOTTO_BACKEND_H

#include "state.h"

typedef struct sotto_backend {
    const char *name; /* "cpu", "cuda" */

    /* The weights of a loaded host model onto the backend (be_model); NULL
       when the backend reads the host weights. */
    int (*model_upload)(sotto_model *m, sotto_err *err);
    void (*model_free)(sotto_model *m);
    /* Bytes of a part (SOTTO_PART_*) held by the backend; 0 on the CPU. */
    size_t (*model_part_bytes)(const sotto_model *m, int part);

    /* A state's K/V caches, in st->be_state (st->m, st->max_seqs set).
       state_free accepts a state whose allocation failed half-way. */
    int (*state_alloc)(sotto_state *st, sotto_err *err);
    void (*state_free)(sotto_state *st);
    /* Brings st->enc_out up to date after an encode (NULL: always is). */
    int (*state_fetch_encoder_output)(sotto_state *st, sotto_err *err);

    /* A beam step's reorder (sotto_state_seq_gather): for i < n, the
       self-attention caches of sequence src[i] (its first lens[i]
       positions, every layer) over those of dst[i], all read before any is
       written. state.c has checked the indices and keeps seq_len;
       sotto_kv_gather (state.h) is the copying both backends share. */
    int (*seq_gather)(sotto_state *st, const int *dst, const int *src, const int *lens, int n,
                      sotto_err *err);

    /* The encoder over B windows, and the cross-attention K/V of each state.
       n_ctx[b] (NULL: every window whole) is how many positions window b
       needs; a backend may encode more (it sets st->n_ctx to what it did). */
    int (*encode_batch)(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                        const float *const *mels, const int *n_ctx, int B, sotto_err *err);
    /* The decoder layers and the logits projection for n rows whose embedded
       tokens (token + position, computed on the host) are x [n][d], host
       memory the backend may overwrite;
       logits [n_want][n_vocab] are those of rows want[] (all n rows in order
       when want is NULL). prompt: the rows are consecutive positions of one
       sequence attending causally; else every row is one sequence's next
       token. Appends the rows' K/V to their sequences' caches; seq_len is
       the caller's. */
    int (*decode)(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int n,
                  int prompt, float *x, const int *want, int n_want, float *logits,
                  sotto_err *err);

    /* Frees this backend's per-thread scratch (sotto_workspace.be_scratch). */
    void (*ws_free)(void *scratch);
} sotto_backend;

/* The CPU (backend_cpu.c); every model starts there. */
extern const sotto_backend sotto_backend_cpu;

/* The CPU's K/V caches of a state (its be_state; layouts in state.h), for
 * the CPU's layers in encoder.c and decoder.c. */
typedef struct sotto_cpu_kv {
    float *cross_k, *cross_v, *self_k, *self_v;
    float *gather_tmp; /* the sequence gather's scratch, kept: beam search gathers every step */
    size_t gather_cap; /* its floats */
} sotto_cpu_kv;

static inline sotto_cpu_kv *sotto_cpu_kv_of(const sotto_state *st) { return (sotto_cpu_kv *)st->be_state; }

/* The CUDA backend, or NULL in a build without CUDA (gpu_none.c). */
const sotto_backend *sotto_backend_cuda(void);

/* The CPU's encoder and decoder (encoder.c, decoder.c), for its table. */
int sotto_cpu_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                           const float *const *mels, const int *n_ctx, int B, sotto_err *err);
int sotto_cpu_decode(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int n,
                     int prompt, float *x, const int *want, int n_want, float *logits,
                     sotto_err *err);

#endif
