/* ops.h - the CPU backend's element-wise and attention operations.
 *
 * These plain-C versions are the references that other backends (CUDA) are
 * tested against. All tensors are row-major float32; nothing allocates
 * except where a scratch size is documented. Rows are processed in parallel
 * with OpenMP where that pays off; results do not depend on the thread count.
 */
#ifndef SOTTO_OPS_H
#define SOTTO_OPS_H

#include <stddef.h>

/* y[r][:] = (x[r][:] - mean) / sqrt(var + eps) * gamma + beta, for n rows of
 * width d. y may equal x. */
void sotto_layer_norm(const float *x, float *y, int n, int d, const float *gamma,
                      const float *beta, float eps);

/* In-place exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))). */
void sotto_gelu(float *x, size_t n);

/* In-place softmax over each of n rows of width d (max-subtracted). */
void sotto_softmax_rows(float *x, int n, int d);

/* In-place log-softmax of one row of width d. Entries equal to -INFINITY
 * stay -INFINITY. Returns the log-sum-exp that was subtracted. */
float sotto_log_softmax(float *x, int d);

/* x[r][:] += b[:] for n rows of width d. */
void sotto_add_bias_rows(float *x, const float *b, int n, int d);

/* Multi-head attention over a key/value sequence for n_q query rows.
 *   q: [n_q][q_stride]       (head h uses columns h*dh .. h*dh+dh-1)
 *   k, v: [n_kv][kv_stride]  (same head layout)
 *   out: [n_q][out_stride]
 * scale multiplies q.k. If causal, query row i (absolute position
 * q_pos0 + i) attends to keys 0..q_pos0+i only.
 * Work is split over (head, block of query rows) across the OpenMP threads.
 * scratch: at least sotto_attention_scratch(n_q, n_kv) floats. */
size_t sotto_attention_scratch(int n_q, int n_kv);
void sotto_attention(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                     float *out, int out_stride, int n_q, int n_kv, int n_head, int dh, float scale,
                     int causal, int q_pos0, float *scratch);

/* Attention of nr query rows that share one key/value sequence, for ONE
 * head (pointers already offset to the head's columns):
 *   q: [nr][q_stride], k, v: [n_kv][kv_stride], out: [nr][out_stride].
 * Each key and value row is read once for all nr rows (beams of a stream
 * share the cross-attention K/V). s: scratch of nr * n_kv floats.
 * Single-threaded: callers parallelise over heads and streams. */
void sotto_attention_rows(const float *q, int q_stride, const float *k, const float *v,
                          int kv_stride, float *out, int out_stride, int nr, int n_kv, int dh,
                          float scale, float *s);

/* The same two with K given transposed (the CPU's cross-attention cache,
 * engine/state.h): kt is [n_head * dh][kt_stride], row h*dh + c holding
 * feature c of head h for keys 0..n_kv-1; v as above with v_stride. Never
 * causal. sotto_attention_kt: all heads, scratch as sotto_attention's.
 * sotto_attention_rows_kt: one head (kt offset to its first row, q, v and
 * out to its columns), s: scratch of nr * n_kv floats, single-threaded.
 * Without K's rows to pack per call, a decoder step's few rows (a beam)
 * take the key loads straight from K^T: per step of beam 5 this replaced
 * two sgemm calls per head and layer whose packing of K was most of the
 * cross-attention's time. */
void sotto_attention_kt(const float *q, int q_stride, const float *kt, int kt_stride,
                        const float *v, int v_stride, float *out, int out_stride, int n_q,
                        int n_kv, int n_head, int dh, float scale, float *scratch);
void sotto_attention_rows_kt(const float *q, int q_stride, const float *kt, int kt_stride,
                             const float *v, int v_stride, float *out, int out_stride, int nr,
                             int n_kv, int dh, float scale, float *s);

/* 1-D convolution, kernel 3, padding 1, given stride, as im2col + GEMM:
 *   x: [t_in][c_in] (time-major), w: [c_out][c_in][3], b: [c_out]
 *   y: [t_out][c_out], t_out = (t_in + 2 - 3) / stride + 1
 * cols: scratch of t_out * c_in * 3 floats. */
void sotto_conv1d_k3(const float *x, int t_in, int c_in, const float *w, const float *b,
                     int c_out, int stride, float *y, float *cols);

#endif
