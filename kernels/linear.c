/* linear.c - y = x W^T + b for every weight format (the format table is in wfmt.c).
 *
 * Two regimes:
 *  - n <= SOTTO_SKINNY_MAX_N (32) rows of x (decoder steps, short prompts):
 *    a fused kernel per format streams each weight row once, dequantizing it
 *    in registers, and dots it with every row of x, 4 weight rows by up to 4
 *    rows of x per tile (linear_{f32,q8,nf4,nvfp4}.c, f16 and bf16 with q8;
 *    16 rows for f32 and f16); their memory contract is checked here in
 *    sanitized builds, tile_check.h.
 *  - more rows (encoder, prompts): the weights are dequantized a block of
 *    rows at a time into a bounded scratch buffer and multiplied with sgemm;
 *    except bf16 and q8 weights on a CPU with the matching dot product
 *    (AVX512-BF16: kernels/gemm_bf16.c; AVX512-VNNI: kernels/gemm_q8.c),
 *    which multiply the weights as stored.
 * SOTTO_LINEAR_REF=1 in the environment routes everything to the scalar
 * reference (linear_ref.c).
 */
#include "gemm_bf16.h"
#include "gemm_q8.h"
#include "linear.h"

#include "linear_internal.h"
#include "linear_ref.h"
#include "sotto_err.h"
#include "tile_check.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void sotto_wmat_dequantize_rows(const sotto_wmat *w, int r0, int nr, float *dst) {
    if (nr <= 0) return;
    sotto__tile_wrows(w, r0, nr);
    sotto__tile_region(dst, sizeof(float) * (size_t)nr * (size_t)w->cols);
    switch (w->fmt) {
    case SOTTO_WFMT_F32:
        memcpy(dst, (const float *)w->data + (size_t)r0 * (size_t)w->cols,
               sizeof(float) * (size_t)nr * (size_t)w->cols);
        break;
    case SOTTO_WFMT_F16: sotto__dequant_f16(w, r0, nr, dst); break;
    case SOTTO_WFMT_BF16: sotto__dequant_bf16(w, r0, nr, dst); break;
    case SOTTO_WFMT_Q8: sotto__dequant_q8(w, r0, nr, dst); break;
    case SOTTO_WFMT_NF4: sotto__dequant_nf4(w, r0, nr, dst); break;
    case SOTTO_WFMT_NVFP4: sotto__dequant_nvfp4(w, r0, nr, dst); break;
    default: memset(dst, 0, sizeof(float) * (size_t)nr * (size_t)w->cols); break;
    }
}

static void add_bias(float *y, const float *bias, int n, int rows) {
    if (!bias) return;
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)i * rows;
        for (int j = 0; j < rows; j++) yr[j] += bias[j];
    }
}

/* ---- many rows of x: dequantize blocks of W, sgemm ------------------------------ */

/* Scratch for one block of dequantized rows: about 2 MiB of floats. */
#define GEMM_SCRATCH_FLOATS (1 << 19)

/* Rows of W per sgemm call on the blocked path: a block of dequantized rows
 * fits GEMM_SCRATCH_FLOATS, in multiples of 16. f32 is cut into the same
 * blocks although it needs no scratch: BLAS libraries need not give the
 * same bits for a matrix and for its row blocks (OpenBLAS's Haswell sgemm
 * does not), and f16 must give exactly f32's sums (test_quant). */
static int gemm_block_rows(int rows, int cols) {
    int nb = GEMM_SCRATCH_FLOATS / (cols > 0 ? cols : 1);
    nb = nb < 16 ? 16 : nb - nb % 16;
    return nb > rows ? rows : nb;
}

static void linear_gemm_f32(const sotto_wmat *w, const float *x, int n, float *y, float beta) {
    const int rows = w->rows, cols = w->cols, nb = gemm_block_rows(rows, cols);
    const float *W = (const float *)w->data;
    for (int j0 = 0; j0 < rows; j0 += nb) {
        const int jn = rows - j0 < nb ? rows - j0 : nb;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, jn, cols, 1.0f, x, cols,
                    W + (size_t)j0 * cols, cols, beta, y + j0, rows);
    }
}

static void linear_gemm_blocks(const sotto_wmat *w, const float *x, int n, float *y, float beta) {
    const int rows = w->rows, cols = w->cols, nb = gemm_block_rows(rows, cols);
    float *buf = malloc(sizeof(float) * (size_t)nb * (size_t)cols);
    if (!buf) { /* out of memory: still correct, one row at a time */
        sotto_linear_ref(w, NULL, x, n, y, beta != 0.0f);
        return;
    }
    for (int j0 = 0; j0 < rows; j0 += nb) {
        const int jn = rows - j0 < nb ? rows - j0 : nb;
        const int big = (size_t)jn * (size_t)cols >= 65536;
#pragma omp parallel for schedule(static) if (big)
        for (int j = 0; j < jn; j += 8) {
            int k = jn - j < 8 ? jn - j : 8;
            sotto_wmat_dequantize_rows(w, j0 + j, k, buf + (size_t)j * cols);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, jn, cols, 1.0f, x, cols, buf, cols,
                    beta, y + j0, rows);
    }
    free(buf);
}

/* ---- dispatch ---------------------------------------------------------------------- */

static int use_reference(void) {
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("SOTTO_LINEAR_REF");
        v = e && *e && strcmp(e, "0") != 0;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

int sotto_linear_rounds_x_to_bf16(const sotto_wmat *w, int n) {
    return w->fmt == SOTTO_WFMT_BF16 && n > SOTTO_SKINNY_MAX_N && !use_reference() && sotto_gemm_bf16_supported();
}

int sotto_linear_quantizes_x_to_q8(const sotto_wmat *w, int n) {
    return w->fmt == SOTTO_WFMT_Q8 && n > SOTTO_SKINNY_MAX_N && w->cols % 32 == 0 && !use_reference() &&
           sotto_gemm_q8_supported();
}

int sotto_linear_q8_fast(void) { return !use_reference() && sotto_gemm_q8_supported(); }

/* Most rows of x the fused kernel takes for w's format. f32 has no decoding
 * to save and hands over to sgemm sooner; f16 holds f32's values and
 * changes regime at the same point, so that both give the same sums. */
static int skinny_max_n(sotto_wfmt fmt) {
    return fmt == SOTTO_WFMT_F32 || fmt == SOTTO_WFMT_F16 ? SOTTO_SKINNY_MAX_N_F32
                                                          : SOTTO_SKINNY_MAX_N;
}

static void linear_any(const sotto_wmat *w, const float *bias, const float *x, int n, float *y,
                       int accumulate) {
    if (n <= 0 || w->rows <= 0) return;
    if (w->cols <= 0) { /* empty dot products */
        for (int r = 0; r < n; r++)
            for (int j = 0; j < w->rows; j++) {
                float *yp = y + (size_t)r * w->rows + j;
                float v = bias ? bias[j] : 0.0f;
                *yp = accumulate ? *yp + v : v;
            }
        return;
    }
    if (use_reference()) {
        sotto_linear_ref(w, bias, x, n, y, accumulate);
        return;
    }
    if (w->fmt == SOTTO_WFMT_F32 && n > skinny_max_n(w->fmt)) {
        linear_gemm_f32(w, x, n, y, accumulate ? 1.0f : 0.0f);
    } else if (sotto_linear_rounds_x_to_bf16(w, n) &&
               sotto_gemm_bf16(w->data, w->rows, w->cols, x, n, y, accumulate) == 0) {
        /* the CPU's bf16 dot product on the weights as stored (x rounded to bf16) */
    } else if (sotto_linear_quantizes_x_to_q8(w, n) &&
               sotto_gemm_q8(w->data, w->scales, w->rows, w->cols, x, n, y, accumulate) == 0) {
        /* the CPU's int8 dot product on the weights as stored (x quantized as they are) */
    } else if (n > skinny_max_n(w->fmt)) {
        linear_gemm_blocks(w, x, n, y, accumulate ? 1.0f : 0.0f);
    } else {
        sotto__tile_skinny(w, x, n, y);
        switch (w->fmt) {
        case SOTTO_WFMT_F32:
            sotto__skinny_f32(w, x, n, y, accumulate);
            break;
        case SOTTO_WFMT_F16: sotto__skinny_f16(w, x, n, y, accumulate); break;
        case SOTTO_WFMT_BF16: sotto__skinny_bf16(w, x, n, y, accumulate); break;
        case SOTTO_WFMT_Q8: sotto__skinny_q8(w, x, n, y, accumulate); break;
        case SOTTO_WFMT_NF4: sotto__skinny_nf4(w, x, n, y, accumulate); break;
        case SOTTO_WFMT_NVFP4: sotto__skinny_nvfp4(w, x, n, y, accumulate); break;
        default: return;
        }
    }
    add_bias(y, bias, n, w->rows);
}

static sotto_linear_observer g_observer;
static void *g_observer_ctx;

void sotto_linear_set_observer(sotto_linear_observer fn, void *ctx) {
    g_observer = fn;
    g_observer_ctx = ctx;
}

void sotto_linear(const sotto_wmat *w, const float *bias, const float *x, int n, float *y) {
    if (g_observer) g_observer(g_observer_ctx, w, x, n);
    linear_any(w, bias, x, n, y, 0);
}

void sotto_linear_acc(const sotto_wmat *w, const float *bias, const float *x, int n, float *y) {
    if (g_observer) g_observer(g_observer_ctx, w, x, n);
    linear_any(w, bias, x, n, y, 1);
}
