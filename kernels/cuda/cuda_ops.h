/* cuda_ops.h - the element-wise operations of ops.h on the GPU: layer norm,
 * exact GELU, row softmax, bias rows. Same semantics as the CPU twins in
 * kernels/ops_cpu.c (a softmax row that is all -INFINITY becomes zeros);
 * tests/gpu/test_cuda_ops.c holds them to double-precision references.
 *
 * All pointers are device pointers owned by the caller. Each call queues its
 * kernel on the default stream (sotto_cuda_sync waits) and returns launch
 * errors as SOTTO_E_INTERNAL with a message.
 */
#ifndef SOTTO_CUDA_OPS_H
#define SOTTO_CUDA_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "sotto_err.h"

int sotto_cuda_layer_norm(const float *x, float *y, int n, int d, const float *gamma, const float *beta,
                          float eps, sotto_err *err);
int sotto_cuda_gelu(float *x, size_t n, sotto_err *err);
int sotto_cuda_softmax_rows(float *x, int n, int d, sotto_err *err);
int sotto_cuda_add_bias_rows(float *x, const float *b, int n, int d, sotto_err *err);

/* Attention of decode steps (the twin of sotto_attention_rows, for all heads
 * at once): nr query rows attend to the same n_kv keys and values, no mask.
 *   q: [nr][q_stride], k, v: [n_kv][kv_stride], out: [nr][out_stride];
 *   head h uses columns h*dh .. h*dh+dh-1 of each. dh <= 256.
 * One block per (head, query row): scores in shared memory (n_kv floats),
 * a warp per key for the dot products, then the softmax and the weighted
 * sum of V with threads along dh. */
int sotto_cuda_attention_rows(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                              float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                              sotto_err *err);

#ifdef __cplusplus
}
#endif

#endif
