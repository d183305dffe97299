#include "linear.h"

#include <cblas.h>

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

static void linear_f32(const sotto_wmat *w, const float *bias, const float *x, int n, float *y,
                       float beta) {
    const float *W = (const float *)w->data;
    if (n == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, w->rows, w->cols, 1.0f, W, w->cols, x, 1, beta,
                    y, 1);
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
