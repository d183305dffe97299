#include "linear.h"

#include "simd.h"

#include <cblas.h>
#include <string.h>

const char *sotto_wfmt_name(sotto_wfmt fmt) {
    switch (fmt) {
    case SOTTO_WFMT_F32: return "f32";
    default: return "?";
    }
}

size_t sotto_wfmt_bytes(sotto_wfmt fmt, int32_t rows, int32_t cols) {
    size_t n = (size_t)rows * (size_t)cols;
    switch (fmt) {
    case SOTTO_WFMT_F32: return n * sizeof(float);
    default: return 0;
    }
}

static void add_bias(float *y, const float *bias, int n, int rows) {
    if (!bias) return;
    for (int i = 0; i < n; i++) {
        float *yr = y + (size_t)i * rows;
        for (int j = 0; j < rows; j++) yr[j] += bias[j];
    }
}

/* Rows of x at or below this count use the skinny kernel below instead of
 * sgemm, which would repack the whole weight matrix on every call. */
#define SKINNY_MAX_N 16

/* Dot products of 4 weight rows with one x row: 4 independent accumulators
 * share each load of x. */
static inline void dot4(const float *w0, const float *w1, const float *w2, const float *w3,
                        const float *x, int cols, float out[4]) {
    sotto_v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int c = 0;
    for (; c + 16 <= cols; c += 16) {
        sotto_v16f xv = sotto_load16(x + c);
        a0 += sotto_load16(w0 + c) * xv;
        a1 += sotto_load16(w1 + c) * xv;
        a2 += sotto_load16(w2 + c) * xv;
        a3 += sotto_load16(w3 + c) * xv;
    }
    float s0 = sotto_hsum16(a0), s1 = sotto_hsum16(a1), s2 = sotto_hsum16(a2), s3 = sotto_hsum16(a3);
    for (; c < cols; c++) {
        s0 += w0[c] * x[c];
        s1 += w1[c] * x[c];
        s2 += w2[c] * x[c];
        s3 += w3[c] * x[c];
    }
    out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

/* y[r][j] (=|+=) W[j] . x[r] for few rows r: each weight row is read once
 * from memory and used for all rows of x while it is in L1. */
static void linear_f32_skinny(const float *W, int rows, int cols, const float *x, int n, float *y,
                              int accumulate) {
    const int big = (size_t)rows * cols >= 65536;
#pragma omp parallel for schedule(static) if (big)
    for (int j0 = 0; j0 < rows; j0 += 4) {
        int jn = rows - j0 < 4 ? rows - j0 : 4;
        const float *w[4];
        for (int k = 0; k < 4; k++) w[k] = W + (size_t)(j0 + (k < jn ? k : 0)) * cols;
        for (int r = 0; r < n; r++) {
            float v[4];
            dot4(w[0], w[1], w[2], w[3], x + (size_t)r * cols, cols, v);
            float *yr = y + (size_t)r * rows + j0;
            for (int k = 0; k < jn; k++) yr[k] = accumulate ? yr[k] + v[k] : v[k];
        }
    }
}

static void linear_f32(const sotto_wmat *w, const float *bias, const float *x, int n, float *y,
                       float beta) {
    const float *W = (const float *)w->data;
    if (n <= SKINNY_MAX_N) {
        linear_f32_skinny(W, w->rows, w->cols, x, n, y, beta != 0.0f);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w->rows, w->cols, 1.0f, x, w->cols,
                    W, w->cols, beta, y, w->rows);
    }
    add_bias(y, bias, n, w->rows);
}

void sotto_linear(const sotto_wmat *w, const float *bias, const float *x, int n, float *y) {
    if (n <= 0) return;
    switch (w->fmt) {
    case SOTTO_WFMT_F32: linear_f32(w, bias, x, n, y, 0.0f); break;
    default: break;
    }
}

void sotto_linear_acc(const sotto_wmat *w, const float *bias, const float *x, int n, float *y) {
    if (n <= 0) return;
    switch (w->fmt) {
    case SOTTO_WFMT_F32: linear_f32(w, bias, x, n, y, 1.0f); break;
    default: break;
    }
}
