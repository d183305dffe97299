#include "ops.h"

#include "fastmath.h"
#include "simd.h"
#include "tile_check.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Rows below this width x count are not worth a parallel region. */
#define PAR_MIN_WORK 32768

void sotto_layer_norm(const float *x, float *y, int n, int d, const float *gamma,
                      const float *beta, float eps) {
    if (n <= 0 || d <= 0) return;
    const size_t bytes = sizeof(float) * (size_t)n * (size_t)d;
    sotto__tile_region(x, bytes);
    sotto__tile_region(y, bytes);
    sotto__tile_region(gamma, sizeof(float) * (size_t)d);
    sotto__tile_region(beta, sizeof(float) * (size_t)d);
#pragma omp parallel for schedule(static) if ((size_t)n * d >= PAR_MIN_WORK)
    for (int r = 0; r < n; r++)
        sotto__layer_norm_row(x + (size_t)r * d, y + (size_t)r * d, d, gamma, beta, eps);
}

/* GELU's spans per work item: whole vectors, and enough work per call. */
#define GELU_SPAN 4096

void sotto_gelu(float *x, size_t n) {
    sotto__tile_region(x, sizeof(float) * n);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
    for (size_t i0 = 0; i0 < n; i0 += GELU_SPAN)
        sotto__gelu_span(x + i0, n - i0 < GELU_SPAN ? n - i0 : GELU_SPAN);
}

void sotto_softmax_rows(float *x, int n, int d) {
    if (n <= 0 || d <= 0) return;
    sotto__tile_region(x, sizeof(float) * (size_t)n * (size_t)d);
#pragma omp parallel for schedule(static) if ((size_t)n * d >= PAR_MIN_WORK)
    for (int r = 0; r < n; r++) sotto__softmax_row(x + (size_t)r * d, d);
}

/* Over a 51,864-token vocabulary this runs once per beam and step; libm's
 * scalar double exp made it 5 % of a beam-5 transcription, all of it on one
 * thread. The vectorised expf (relative error < 3e-7) summed in double
 * keeps the log-sum-exp within 2e-6 of double libm (test_ops). */
float sotto_log_softmax(float *x, int d) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < d; i++) m = x[i] > m ? x[i] : m;
    if (m == -INFINITY) return m;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; i++) s += (double)sotto_fast_expf(x[i] - m);
    float lse = m + (float)log(s);
#pragma omp simd
    for (int i = 0; i < d; i++) x[i] -= lse;
    return lse;
}

void sotto_add_bias_rows(float *x, const float *b, int n, int d) {
    if (n <= 0 || d <= 0) return;
    sotto__tile_region(x, sizeof(float) * (size_t)n * (size_t)d);
    sotto__tile_region(b, sizeof(float) * (size_t)d);
    for (int r = 0; r < n; r++) sotto__add_bias_row(x + (size_t)r * d, b, d);
}

/* Query rows per work item of the attention. */
#define ATT_QBLOCK 128

size_t sotto_attention_scratch(int n_q, int n_kv) {
    int qb = n_q < ATT_QBLOCK ? n_q : ATT_QBLOCK;
    return (size_t)omp_get_max_threads() * (size_t)qb * (size_t)n_kv;
}

/* kt_stride > 0: k holds K transposed (sotto_attention_kt); else K's rows
 * with kv_stride. */
static void attention_core(const float *q, int q_stride, const float *k, int kt_stride,
                           const float *v, int kv_stride, float *out, int out_stride, int n_q,
                           int n_kv, int n_head, int dh, float scale, int causal, int q_pos0,
                           float *scratch) {
    int qb = n_q < ATT_QBLOCK ? n_q : ATT_QBLOCK;
    int n_blocks = (n_q + qb - 1) / qb;
    int n_items = n_head * n_blocks;
    size_t work = (size_t)n_q * n_kv * n_head * dh;
#pragma omp parallel for schedule(dynamic, 1) if (n_items > 1 && work >= 4 * PAR_MIN_WORK)
    for (int item = 0; item < n_items; item++) {
        int h = item / n_blocks;
        int q0 = (item % n_blocks) * qb;
        int nq = n_q - q0 < qb ? n_q - q0 : qb;
        /* keys visible to the last row of this block */
        int nk = causal ? q_pos0 + q0 + nq : n_kv;
        if (nk > n_kv) nk = n_kv;
        float *S = scratch + (size_t)omp_get_thread_num() * (size_t)qb * (size_t)n_kv;
        const float *qh = q + (size_t)q0 * q_stride + (size_t)h * dh;
        const float *vh = v + (size_t)h * dh;
        float *oh = out + (size_t)q0 * out_stride + (size_t)h * dh;
        /* S[nq][nk] = scale * Qh Kh^T (OpenBLAS and the softmax tile: both uninstrumented) */
        sotto__tile_region(S, sizeof(float) * (size_t)nq * (size_t)nk);
        if (kt_stride > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, nk, dh, scale, qh, q_stride,
                        k + (size_t)h * dh * kt_stride, kt_stride, 0.0f, S, nk);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, dh, scale, qh, q_stride,
                        k + (size_t)h * dh, kv_stride, 0.0f, S, nk);
        for (int i = 0; i < nq; i++) {
            float *row = S + (size_t)i * nk;
            if (causal) {
                int visible = q_pos0 + q0 + i + 1;
                for (int j = visible; j < nk; j++) row[j] = -INFINITY;
            }
            sotto__softmax_row(row, nk);
        }
        /* Oh[nq][dh] = S Vh */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, dh, nk, 1.0f, S, nk, vh,
                    kv_stride, 0.0f, oh, out_stride);
    }
}

void sotto_attention(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                     float *out, int out_stride, int n_q, int n_kv, int n_head, int dh, float scale,
                     int causal, int q_pos0, float *scratch) {
    attention_core(q, q_stride, k, 0, v, kv_stride, out, out_stride, n_q, n_kv, n_head, dh, scale,
                   causal, q_pos0, scratch);
}

void sotto_attention_kt(const float *q, int q_stride, const float *kt, int kt_stride,
                        const float *v, int v_stride, float *out, int out_stride, int n_q,
                        int n_kv, int n_head, int dh, float scale, float *scratch) {
    attention_core(q, q_stride, kt, kt_stride, v, v_stride, out, out_stride, n_q, n_kv, n_head, dh,
                   scale, 0, 0, scratch);
}

static inline float dot_head(const float *a, const float *b, int dh) {
    sotto_v16f acc = {0};
    int c = 0;
    for (; c + 16 <= dh; c += 16) acc += sotto_load16(a + c) * sotto_load16(b + c);
    float s = sotto_hsum16(acc);
    for (; c < dh; c++) s += a[c] * b[c];
    return s;
}

/* From this many keys on, sotto_attention_rows multiplies with sgemm. */
#define SOTTO_ATTN_ROWS_GEMM_MIN_KV 256

void sotto_attention_rows(const float *q, int q_stride, const float *k, const float *v,
                          int kv_stride, float *out, int out_stride, int nr, int n_kv, int dh,
                          float scale, float *s) {
    if (n_kv >= SOTTO_ATTN_ROWS_GEMM_MIN_KV) {
        /* long sequences (the cross-attention): two small sgemms, whose packed
         * micro-kernels beat a horizontal sum per (row, key) */
        sotto__tile_region(s, sizeof(float) * (size_t)nr * (size_t)n_kv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, n_kv, dh, scale, q, q_stride, k,
                    kv_stride, 0.0f, s, n_kv);
        for (int r = 0; r < nr; r++) sotto__softmax_row(s + (size_t)r * n_kv, n_kv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, dh, n_kv, 1.0f, s, n_kv, v,
                    kv_stride, 0.0f, out, out_stride);
        return;
    }
    for (int j = 0; j < n_kv; j++) {
        const float *kj = k + (size_t)j * kv_stride;
        for (int r = 0; r < nr; r++) s[(size_t)r * n_kv + j] = dot_head(q + (size_t)r * q_stride, kj, dh) * scale;
    }
    for (int r = 0; r < nr; r++) { /* s was written above, by checked code */
        sotto__softmax_row(s + (size_t)r * n_kv, n_kv);
        memset(out + (size_t)r * out_stride, 0, sizeof(float) * (size_t)dh);
    }
    for (int j = 0; j < n_kv; j++) {
        const float *vj = v + (size_t)j * kv_stride;
        for (int r = 0; r < nr; r++) {
            float w = s[(size_t)r * n_kv + j];
            float *o = out + (size_t)r * out_stride;
            int c = 0;
            sotto_v16f wv = {w, w, w, w, w, w, w, w, w, w, w, w, w, w, w, w};
            for (; c + 16 <= dh; c += 16) sotto_store16(o + c, sotto_load16(o + c) + wv * sotto_load16(vj + c));
            for (; c < dh; c++) o[c] += w * vj[c];
        }
    }
}

void sotto_attention_rows_kt(const float *q, int q_stride, const float *kt, int kt_stride,
                             const float *v, int v_stride, float *out, int out_stride, int nr,
                             int n_kv, int dh, float scale, float *s) {
    if (nr <= 0 || n_kv <= 0 || dh <= 0) return;
    sotto__tile_strided(q, nr, q_stride, dh);
    sotto__tile_strided(kt, dh, kt_stride, n_kv);
    sotto__tile_strided(v, n_kv, v_stride, dh);
    sotto__tile_strided(out, nr, out_stride, dh);
    sotto__tile_region(s, sizeof(float) * (size_t)nr * (size_t)n_kv);
    sotto__attention_rows_kt(q, q_stride, kt, kt_stride, v, v_stride, out, out_stride, nr, n_kv, dh,
                             scale, s);
}

void sotto_conv1d_k3(const float *x, int t_in, int c_in, const float *w, const float *b,
                     int c_out, int stride, float *y, float *cols) {
    int t_out = (t_in + 2 - 3) / stride + 1;
    int kc = c_in * 3;
    /* cols[t][c*3 + j] = x[t*stride - 1 + j][c] (zero outside), matching the
     * [c_out][c_in][3] weight layout. */
#pragma omp parallel for schedule(static) if ((size_t)t_out * kc >= PAR_MIN_WORK)
    for (int t = 0; t < t_out; t++) {
        float *cr = cols + (size_t)t * kc;
        for (int j = 0; j < 3; j++) {
            int ti = t * stride - 1 + j;
            if (ti < 0 || ti >= t_in) {
                for (int c = 0; c < c_in; c++) cr[c * 3 + j] = 0.0f;
            } else {
                const float *xr = x + (size_t)ti * c_in;
                for (int c = 0; c < c_in; c++) cr[c * 3 + j] = xr[c];
            }
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t_out, c_out, kc, 1.0f, cols, kc, w, kc,
                0.0f, y, c_out);
    if (b) sotto_add_bias_rows(y, b, t_out, c_out);
}
