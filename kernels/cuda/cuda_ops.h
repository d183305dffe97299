/* cuda_ops.h - the element-wise operations of ops.h on the GPU (layer norm,
 * exact GELU, row softmax, bias rows, adds, im2col) and attention. Same
 * semantics as the CPU twins in kernels/ops_cpu.c (a softmax row that is all
 * -INFINITY becomes zeros); tests/gpu/test_cuda_ops.c holds them to
 * double-precision references.
 *
 * All pointers are device pointers owned by the caller. Each call queues its
 * kernel on the stream it is given (sotto_cuda_stream, cuda_linear.h;
 * sotto_cuda_sync waits for it) and returns launch errors as SOTTO_E_INTERNAL
 * with a message.
 */
#ifndef SOTTO_CUDA_OPS_H
#define SOTTO_CUDA_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "cuda_linear.h"
#include "sotto_err.h"

int sotto_cuda_layer_norm(const float *x, float *y, int n, int d, const float *gamma, const float *beta,
                          float eps, sotto_cuda_stream stream, sotto_err *err);
int sotto_cuda_gelu(float *x, size_t n, sotto_cuda_stream stream, sotto_err *err);
int sotto_cuda_softmax_rows(float *x, int n, int d, sotto_cuda_stream stream, sotto_err *err);
int sotto_cuda_add_bias_rows(float *x, const float *b, int n, int d, sotto_cuda_stream stream, sotto_err *err);

/* Attention of decode steps (the twin of sotto_attention_rows, for all heads
 * at once): nr query rows attend to the same n_kv keys and values, no mask.
 *   q: [nr][q_stride], k, v: [n_kv][kv_stride], out: [nr][out_stride];
 *   head h uses columns h*dh .. h*dh+dh-1 of each. dh <= 256.
 * One block per (head, query row): scores in shared memory (n_kv floats),
 * a warp per key for the dot products, then the softmax and the weighted
 * sum of V with threads along dh. */
int sotto_cuda_attention_rows(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                              float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                              sotto_cuda_stream stream, sotto_err *err);

/* The same kernel for prompt processing: query row r sits at absolute
 * position q_pos0 + r and attends causally to keys 0 .. q_pos0 + r only
 * (the twin of sotto_attention with causal = 1); n_kv >= q_pos0 + nr. */
int sotto_cuda_attention_causal(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                                float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                                int q_pos0, sotto_cuda_stream stream, sotto_err *err);

/* y[i] += x[i] for n floats (residual adds of the skinny path). */
int sotto_cuda_add(float *y, const float *x, size_t n, sotto_cuda_stream stream, sotto_err *err);

/* im2col of sotto_conv1d_k3: x [t_in][c_in] (time-major) ->
 * cols [t_out][c_in * 3], cols[t][c*3 + j] = x[t*stride - 1 + j][c] or 0
 * outside, t_out = (t_in - 1) / stride + 1. */
int sotto_cuda_im2col_k3(const float *x, int t_in, int c_in, int stride, float *cols, sotto_cuda_stream stream,
                         sotto_err *err);

/* ---- decoder steps driven by per-row metadata in device memory ----------
 * Nothing that changes from one step to the next is passed by value, so a
 * step's launches can be captured once in a CUDA graph and replayed: each
 * step only rewrites the rows' metadata (and the embedded tokens). */
typedef struct sotto_cuda_row {
    float *self_k, *self_v;         /* layer 0 of the row's self-attention cache, [n_text_ctx][d] */
    const float *cross_k, *cross_v; /* layer 0 of its state's cross-attention K/V, [n_audio_ctx][d] */
    long long self_layer_stride;    /* floats from one layer's cache to the next */
    long long cross_layer_stride;
    int pos;                        /* position of the row's token */
    int pad_;
} sotto_cuda_row;

/* Row i's k and v ([n][d]) into its cache at (layer, pos). */
int sotto_cuda_kv_append(const float *k, const float *v, int n, int d, const sotto_cuda_row *rows, int layer,
                         sotto_cuda_stream stream, sotto_err *err);
/* Self-attention of row i (q, out: [n][n_head * dh]) over its cache's
 * pos + 1 keys of `layer`; max_kv bounds pos + 1 (shared memory). */
int sotto_cuda_attention_self(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows,
                              int layer, int max_kv, float scale, sotto_cuda_stream stream, sotto_err *err);
/* Cross-attention of row i over its stream's n_kv encoder positions. With
 * scratch (device memory of sotto_cuda_attention_cross_scratch(n, n_head, dh)
 * floats or more, owned by the caller, one per stream of work) each row's
 * keys are split over several blocks and combined by a second kernel, which
 * keeps the GPU busy when there are few rows; NULL: one block per head and
 * row. The scratch is sized for any row count up to n, so one buffer serves
 * every step of a captured graph. */
int sotto_cuda_attention_cross(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows,
                               int layer, int n_kv, float scale, float *scratch, sotto_cuda_stream stream,
                               sotto_err *err);
/* Blocks the split aims at (two per multiprocessor of an H100/H200); a
 * step of n rows uses at most this many plus n * n_head chunks. */
#define SOTTO_CUDA_XSPLIT_BLOCKS 264
static inline size_t sotto_cuda_attention_cross_scratch(int n, int n_head, int dh) {
    return n <= 0 || n_head <= 0 || dh <= 0
               ? 0
               : ((size_t)SOTTO_CUDA_XSPLIT_BLOCKS + (size_t)n * (size_t)n_head) * ((size_t)dh + 2);
}

#ifdef __cplusplus
}
#endif

#endif
