/* gpu.h - the engine's GPU backend, between the engine (model.c, state.c,
 * encoder.c, decoder.c) and the CUDA kernels. Not a public header.
 *
 * engine/gpu_cuda.c implements it when the build found nvcc; gpu_none.c
 * otherwise (every call then reports that the build has no CUDA).
 *
 * A GPU model (sotto_model.gpu) holds a device copy of every weight the
 * encoder and decoder layers read, uploaded in the model's packed formats:
 * 4-bit stays 4-bit, so the GPU never holds a dequantized copy of a 4-bit
 * model. The host copy stays too: the token embedding is looked up there
 * (a few rows per step, uploaded with the activations) and the checkpoint
 * tables are kept for snapshots.
 *
 * A GPU state keeps its cross- and self-attention K/V and the encoder output
 * on the device (sotto_state.on_gpu; the same pointer fields, holding device
 * addresses). Per-thread scratch (device buffers and a cuBLAS handle) hangs
 * off sotto_workspace.gpu and is freed with the workspace.
 *
 * All work is queued on the default stream; each call returns once its
 * results are on the host (logits) or queued for the next call (encoder).
 * Errors, including those of kernels queued earlier, come back as SOTTO_E_*
 * codes with a message.
 */
#ifndef SOTTO_GPU_H
#define SOTTO_GPU_H

#include "state.h"

typedef struct sotto_gpu_model sotto_gpu_model;

/* 1 if a GPU can run models (its description in desc); else 0 and why. */
int sotto_gpu_probe(char *desc, size_t desc_sz, char *why, size_t why_sz);

/* Device memory in use (by every process) and in total; SOTTO_E_UNSUPPORTED
 * without a GPU. */
int sotto_gpu_mem_info(size_t *used, size_t *total, sotto_err *err);

/* Uploads the weights of a loaded CPU model. */
sotto_gpu_model *sotto_gpu_model_create(const sotto_model *m, sotto_err *err);
void sotto_gpu_model_free(sotto_gpu_model *g); /* accepts NULL */
size_t sotto_gpu_model_part_bytes(const sotto_gpu_model *g, int part);

/* Device buffers of a state (st->m->gpu must be set): cross_k/v, self_k/v
 * and d_enc_out. Release frees them (accepts a state without them). */
int sotto_gpu_state_alloc(sotto_state *st, sotto_err *err);
void sotto_gpu_state_release(sotto_state *st);
/* Copies the encoder output back into st->enc_out if it is stale. */
int sotto_gpu_state_fetch_encoder_output(sotto_state *st, sotto_err *err);
/* Device scratch for state.c's gather and a device-to-device copy. */
void *sotto_gpu_alloc(size_t bytes, sotto_err *err);
void sotto_gpu_release(void *p);
int sotto_gpu_copy(void *dst, const void *src, size_t bytes, sotto_err *err);
/* Waits for the calling thread's queued GPU work (its copies above). */
int sotto_gpu_sync(sotto_err *err);

void sotto_gpu_ws_free(void *gws);

/* The twins of sotto_encode_batch and of the decoder's layers plus the
 * logits projection: x_host [n][d] holds the embedded tokens (token +
 * position, computed on the host); logits [n_want][n_vocab] are those of
 * rows want[] (all n rows in order when want is NULL). prompt: rows are
 * consecutive positions of one sequence attending causally; else every row
 * is one sequence's next token. */
int sotto_gpu_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                           const float *const *mels, int B, sotto_err *err);
int sotto_gpu_decode(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int n,
                     int prompt, const float *x_host, const int *want, int n_want, float *logits,
                     sotto_err *err);

#endif
