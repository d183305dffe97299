/* tile_check.h - the memory contract of the tiles, the kernels' hot inner
 * loops: the skinny kernels and row dequantizers of each weight format
 * (linear_{f32,q8,nf4,nvfp4}.c) and the attention's softmax rows and
 * per-row attention over K^T (attn_tiles.c); the layer norm's rows, GELU and
 * bias rows (eltwise_tiles.c); the quantizers' element codecs and row
 * quantizers (quant_tiles.c). Their callers, linear.c, ops_cpu.c and
 * quant.c, check it in AddressSanitizer builds.
 *
 * Why: in the sanitized build (SOTTO_SANITIZE) the unit tests run the tiles
 * instrumented like every other file, but the programs (sotto, sotto-server)
 * link a copy built without instrumentation (CMakeLists.txt,
 * sotto_tiles_uninstrumented). Instrumented, a tile's vector accumulators
 * live on the stack with a shadow check on every load: the f32 skinny kernel
 * ran about 50 times slower than in the release build, and in the sanitized
 * server tests the tiles took over half of the server's CPU (perf over
 * test_compat under ASan: the skinny kernels 26% of all samples, softmax and
 * the rows 9%, the whole server 48%). The sanitized `sotto transcribe` of
 * jfk.wav on one thread: 8.5 s of CPU, 4.8 s with the weight tiles
 * uninstrumented (release build: 1.4 s).
 *
 * What is kept: before each call, every byte the tile may touch by its
 * contract must be addressable, or ASan reports the first bad one as an
 * invalid read here and the process exits: rows [r0, r0 + nr) of the weights
 * (data and block scales), x [n][cols], y [n][rows]; the softmax's rows; the
 * attention's q, K^T, V, out (from their first to their last element) and
 * scores. So a caller that passes a short or freed buffer is still caught
 * in the sanitized servers; a tile that reads outside its contract is caught
 * by the unit tests, which run it instrumented (test_tile_check shows both,
 * in the programs' configuration). */
#ifndef SOTTO_TILE_CHECK_H
#define SOTTO_TILE_CHECK_H

#include "linear.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__)
#define SOTTO_TILE_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOTTO_TILE_CHECKS 1
#endif
#endif

#ifdef SOTTO_TILE_CHECKS
#include <sanitizer/asan_interface.h>

/* The n bytes at p are addressable, or ASan's report of the first that is not. */
static inline void sotto__tile_region(const void *p, size_t n) {
    if (!p || n == 0) return;
    const volatile char *bad = (const volatile char *)__asan_region_is_poisoned((void *)p, n);
    if (bad) (void)*bad; /* an instrumented read: ASan reports it, and exits */
}

/* Rows [r0, r0 + nr) of W: the element bytes and their blocks' scales. */
static inline void sotto__tile_wrows(const sotto_wmat *w, int r0, int nr) {
    const size_t cols = (size_t)w->cols, e0 = (size_t)r0 * cols, ne = (size_t)nr * cols;
    const char *d = (const char *)w->data, *s = (const char *)w->scales;
    if (ne == 0) return;
    switch (w->fmt) {
    case SOTTO_WFMT_F32: sotto__tile_region(d + e0 * 4, ne * 4); break;
    case SOTTO_WFMT_F16:
    case SOTTO_WFMT_BF16: sotto__tile_region(d + e0 * 2, ne * 2); break;
    case SOTTO_WFMT_Q8:
        sotto__tile_region(d + e0, ne);
        sotto__tile_region(s + e0 / 32 * sizeof(float), ne / 32 * sizeof(float));
        break;
    case SOTTO_WFMT_NF4:
        sotto__tile_region(d + e0 / 2, ne / 2);
        if (!w->nf4_dq) {
            sotto__tile_region(s + e0 / 64 * sizeof(float), ne / 64 * sizeof(float));
        } else {
            const size_t b0 = e0 / 64, b1 = (e0 + ne) / 64; /* blocks [b0, b1) */
            sotto__tile_region(w->nf4_dq->codes + b0, b1 - b0);
            sotto__tile_region(w->nf4_dq->nested_absmax + b0 / 256,
                               ((b1 - 1) / 256 - b0 / 256 + 1) * sizeof(float));
        }
        break;
    case SOTTO_WFMT_NVFP4:
        sotto__tile_region(d + e0 / 2, ne / 2);
        sotto__tile_region(s + e0 / 16, ne / 16);
        break;
    default: break;
    }
}

/* rows x cols floats at p, row r at p + r * stride: from the first to the last. */
static inline void sotto__tile_strided(const float *p, int rows, int stride, int cols) {
    if (rows > 0 && cols > 0)
        sotto__tile_region(p, sizeof(float) * ((size_t)(rows - 1) * (size_t)stride + (size_t)cols));
}

/* A skinny call: all of W, x [n][cols] and y [n][rows]. */
static inline void sotto__tile_skinny(const sotto_wmat *w, const float *x, int n, const float *y) {
    sotto__tile_wrows(w, 0, w->rows);
    sotto__tile_region(x, sizeof(float) * (size_t)n * (size_t)w->cols);
    sotto__tile_region(y, sizeof(float) * (size_t)n * (size_t)w->rows);
}
#else
static inline void sotto__tile_region(const void *p, size_t n) { (void)p, (void)n; }
static inline void sotto__tile_strided(const float *p, int rows, int stride, int cols) {
    (void)p, (void)rows, (void)stride, (void)cols;
}
static inline void sotto__tile_wrows(const sotto_wmat *w, int r0, int nr) {
    (void)w, (void)r0, (void)nr;
}
static inline void sotto__tile_skinny(const sotto_wmat *w, const float *x, int n, const float *y) {
    (void)w, (void)x, (void)n, (void)y;
}
#endif

/* The attention tiles (attn_tiles.c), called from ops_cpu.c after the checks:
 * softmax of the d floats at x, in place; sotto_attention_rows_kt's work
 * (ops.h). */
void sotto__softmax_row(float *x, int d);
void sotto__attention_rows_kt(const float *q, int q_stride, const float *kt, int kt_stride,
                              const float *v, int v_stride, float *out, int out_stride, int nr,
                              int n_kv, int dh, float scale, float *s);

/* The element-wise tiles (eltwise_tiles.c), called from ops_cpu.c after the
 * checks: one row of d of the layer norm (x into y; gamma, beta [d]); GELU of
 * the n floats at x, in place; the d floats of b added to the row at x. */
void sotto__layer_norm_row(const float *x, float *y, int d, const float *gamma, const float *beta,
                           float eps);
void sotto__gelu_span(float *x, size_t n);
void sotto__add_bias_row(float *x, const float *b, int d);

/* The quantizers' tiles (quant_tiles.c), called from quant.c after the checks:
 * whether the n floats at p are all finite; f16 or bf16 of n floats (f16: 0,
 * or -1 when a value is too large for a half and was stored as infinity); one row of cols
 * elements in q8 (32-element blocks: q, scales[cols / 32]), nf4 (64: q[cols /
 * 2], absmax[cols / 64]) or nvfp4 (16: q[cols / 2], E4M3 scales[cols / 16],
 * gp the tensor's 1 / global scale), round-to-nearest or with the scale
 * search (h: the columns' importance, or NULL). */
int sotto__all_finite(const float *p, size_t n);
int sotto__quant_f16_rows(uint16_t *dst, const float *src, size_t n);
void sotto__quant_bf16_rows(uint16_t *dst, const float *src, size_t n);
void sotto__quant_q8_row(int8_t *q, float *scales, const float *x, int cols);
void sotto__quant_nf4_row(uint8_t *q, float *absmax, const float *x, int cols);
void sotto__quant_nvfp4_row(uint8_t *q, uint8_t *scales, const float *x, int cols, float gp);
void sotto__quant_nf4_row_search(uint8_t *q, float *absmax, const float *x, const float *h,
                                 int cols);
void sotto__quant_nvfp4_row_search(uint8_t *q, uint8_t *scales, const float *x,
                                   const float *h, int cols, float gp);

#endif
