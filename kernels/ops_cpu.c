#include "ops.h"

#include "fastmath.h"
#include "simd.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Rows below this width x count are not worth a parallel region. */
#define PAR_MIN_WORK 32768

void sotto_layer_norm(const float *x, float *y, int n, int d, const float *gamma,
                      const float *beta, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)n * d >= PAR_MIN_WORK)
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        double sum = 0.0;
        for (int i = 0; i < d; i++) sum += xr[i];
        float mean = (float)(sum / d);
        double var = 0.0;
        for (int i = 0; i < d; i++) {
            float c = xr[i] - mean;
            var += (double)c * c;
        }
        float inv = 1.0f / sqrtf((float)(var / d) + eps);
        for (int i = 0; i < d; i++) yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
    }
}

void sotto_gelu(float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN_WORK)
    for (size_t i = 0; i < n; i++) x[i] = sotto_fast_gelu(x[i]);
}

static void softmax_row(float *x, int d) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < d; i++) m = x[i] > m ? x[i] : m;
    if (m == -INFINITY) { /* every entry masked: leave a uniform zero row */
        memset(x, 0, sizeof(float) * (size_t)d);
        return;
    }
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; i++) {
        x[i] = sotto_fast_expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int i = 0; i < d; i++) x[i] *= inv;
}

void sotto_softmax_rows(float *x, int n, int d) {
#pragma omp parallel for schedule(static) if ((size_t)n * d >= PAR_MIN_WORK)
    for (int r = 0; r < n; r++) softmax_row(x + (size_t)r * d, d);
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
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * d;
        for (int i = 0; i < d; i++) xr[i] += b[i];
    }
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
        /* S[nq][nk] = scale * Qh Kh^T */
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
            softmax_row(row, nk);
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, n_kv, dh, scale, q, q_stride, k,
                    kv_stride, 0.0f, s, n_kv);
        for (int r = 0; r < nr; r++) softmax_row(s + (size_t)r * n_kv, n_kv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, dh, n_kv, 1.0f, s, n_kv, v,
                    kv_stride, 0.0f, out, out_stride);
        return;
    }
    for (int j = 0; j < n_kv; j++) {
        const float *kj = k + (size_t)j * kv_stride;
        for (int r = 0; r < nr; r++) s[(size_t)r * n_kv + j] = dot_head(q + (size_t)r * q_stride, kj, dh) * scale;
    }
    for (int r = 0; r < nr; r++) {
        softmax_row(s + (size_t)r * n_kv, n_kv);
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

/* The scalar ends shared by both versions of the tiles below: scores of
 * keys j0.. and weighted columns c0.. past the last full vector step. */
static void scores_kt_tail(const float *q, int q_stride, const float *kt, int kt_stride, float *s,
                           int n_kv, int R, int dh, float scale, int j0) {
    for (int j = j0; j < n_kv; j++)
        for (int r = 0; r < R; r++) {
            float acc = 0.0f;
            for (int c = 0; c < dh; c++) acc += q[(size_t)r * q_stride + c] * kt[(size_t)c * kt_stride + j];
            s[(size_t)r * n_kv + j] = acc * scale;
        }
}

static void weigh_v_tail(const float *s, int n_kv, const float *v, int v_stride, float *out,
                         int out_stride, int R, int dh, int c0) {
    for (int c = c0; c < dh; c++)
        for (int r = 0; r < R; r++) {
            float acc = 0.0f;
            for (int j = 0; j < n_kv; j++) acc += s[(size_t)r * n_kv + j] * v[(size_t)j * v_stride + c];
            out[(size_t)r * out_stride + c] = acc;
        }
}

#if defined(__AVX512F__)
/* s[r][j] = scale * q[r] . K[j] for R <= 4 rows, 32 keys per step: K^T's
 * rows are the head's dh features over the keys, so each load of 16 keys
 * serves every row and no sum crosses lanes. */
static inline __attribute__((always_inline)) void scores_kt(const float *q, int q_stride,
                                                            const float *kt, int kt_stride,
                                                            float *s, int n_kv, const int R,
                                                            int dh, float scale) {
    int j = 0;
    for (; j + 32 <= n_kv; j += 32) {
        sotto_v16f a[4][2];
        for (int r = 0; r < R; r++) a[r][0] = a[r][1] = (sotto_v16f){0};
        for (int c = 0; c < dh; c++) {
            const float *kc = kt + (size_t)c * kt_stride + j;
            sotto_v16f k0 = sotto_load16(kc), k1 = sotto_load16(kc + 16);
            for (int r = 0; r < R; r++) {
                float b = q[(size_t)r * q_stride + c];
                a[r][0] += b * k0;
                a[r][1] += b * k1;
            }
        }
        for (int r = 0; r < R; r++) {
            sotto_store16(s + (size_t)r * n_kv + j, a[r][0] * scale);
            sotto_store16(s + (size_t)r * n_kv + j + 16, a[r][1] * scale);
        }
    }
    scores_kt_tail(q, q_stride, kt, kt_stride, s, n_kv, R, dh, scale, j);
}

/* out[r] = sum_j s[r][j] V[j] for R <= 4 rows, 64 columns of the head at a
 * time (one load of V's row serves every row). */
static inline __attribute__((always_inline)) void weigh_v(const float *s, int n_kv, const float *v,
                                                          int v_stride, float *out,
                                                          int out_stride, const int R, int dh) {
    int c0 = 0;
    for (; c0 + 64 <= dh; c0 += 64) {
        sotto_v16f o[4][4];
        for (int r = 0; r < R; r++)
            for (int u = 0; u < 4; u++) o[r][u] = (sotto_v16f){0};
        for (int j = 0; j < n_kv; j++) {
            const float *vj = v + (size_t)j * v_stride + c0;
            sotto_v16f v0 = sotto_load16(vj), v1 = sotto_load16(vj + 16);
            sotto_v16f v2 = sotto_load16(vj + 32), v3 = sotto_load16(vj + 48);
            for (int r = 0; r < R; r++) {
                float w = s[(size_t)r * n_kv + j];
                o[r][0] += w * v0, o[r][1] += w * v1, o[r][2] += w * v2, o[r][3] += w * v3;
            }
        }
        for (int r = 0; r < R; r++)
            for (int u = 0; u < 4; u++) sotto_store16(out + (size_t)r * out_stride + c0 + 16 * u, o[r][u]);
    }
    weigh_v_tail(s, n_kv, v, v_stride, out, out_stride, R, dh, c0); /* narrow heads, tails */
}

#else
/* Without AVX-512 (16 registers of 8 floats on AVX2) the tiles above need up
 * to 40 registers and spill. These hold at most 8 accumulators of 8 floats:
 * the scores take 32 keys per step for R <= 2 rows and 16 for more; the
 * weighted sum takes 64 columns per pass for one row, 32 for two and 16 for
 * more (V's rows are re-read per pass from cache; each row of the head's
 * slice is one 64-byte line per 16 columns). Same sums, other grouping. */
static inline __attribute__((always_inline)) void scores_kt(const float *q, int q_stride,
                                                            const float *kt, int kt_stride,
                                                            float *s, int n_kv, const int R,
                                                            int dh, float scale) {
    const int U = R <= 2 ? 4 : 2; /* vectors of 8 keys per step */
    int j = 0;
    for (; j + 8 * U <= n_kv; j += 8 * U) {
        sotto_v8f a[4][4];
        for (int r = 0; r < R; r++)
            for (int u = 0; u < U; u++) a[r][u] = (sotto_v8f){0};
        for (int c = 0; c < dh; c++) {
            const float *kc = kt + (size_t)c * kt_stride + j;
            sotto_v8f k[4];
            for (int u = 0; u < U; u++) k[u] = sotto_load8(kc + 8 * u);
            for (int r = 0; r < R; r++) {
                float b = q[(size_t)r * q_stride + c];
                for (int u = 0; u < U; u++) a[r][u] += b * k[u];
            }
        }
        for (int r = 0; r < R; r++)
            for (int u = 0; u < U; u++) sotto_store8(s + (size_t)r * n_kv + j + 8 * u, a[r][u] * scale);
    }
    scores_kt_tail(q, q_stride, kt, kt_stride, s, n_kv, R, dh, scale, j);
}

static inline __attribute__((always_inline)) void weigh_v(const float *s, int n_kv, const float *v,
                                                          int v_stride, float *out,
                                                          int out_stride, const int R, int dh) {
    const int U = R == 1 ? 8 : R == 2 ? 4 : 2; /* vectors of 8 columns per pass */
    int c0 = 0;
    for (; c0 + 8 * U <= dh; c0 += 8 * U) {
        sotto_v8f o[4][8];
        for (int r = 0; r < R; r++)
            for (int u = 0; u < U; u++) o[r][u] = (sotto_v8f){0};
        for (int j = 0; j < n_kv; j++) {
            const float *vj = v + (size_t)j * v_stride + c0;
            for (int r = 0; r < R; r++) {
                float w = s[(size_t)r * n_kv + j];
                for (int u = 0; u < U; u++) o[r][u] += w * sotto_load8(vj + 8 * u);
            }
        }
        for (int r = 0; r < R; r++)
            for (int u = 0; u < U; u++) sotto_store8(out + (size_t)r * out_stride + c0 + 8 * u, o[r][u]);
    }
    weigh_v_tail(s, n_kv, v, v_stride, out, out_stride, R, dh, c0); /* narrow heads, tails */
}
#endif

/* R <= 4 rows of one head, start to end: scores, softmax, weighted V (the
 * scores of these rows are still in cache when V is weighed). */
static inline __attribute__((always_inline)) void rows_kt(const float *q, int q_stride,
                                                          const float *kt, int kt_stride,
                                                          const float *v, int v_stride, float *out,
                                                          int out_stride, int n_kv, int dh,
                                                          float scale, float *s, const int R) {
    scores_kt(q, q_stride, kt, kt_stride, s, n_kv, R, dh, scale);
    for (int r = 0; r < R; r++) softmax_row(s + (size_t)r * n_kv, n_kv);
    weigh_v(s, n_kv, v, v_stride, out, out_stride, R, dh);
}

void sotto_attention_rows_kt(const float *q, int q_stride, const float *kt, int kt_stride,
                             const float *v, int v_stride, float *out, int out_stride, int nr,
                             int n_kv, int dh, float scale, float *s) {
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const float *qr = q + (size_t)r0 * q_stride;
        float *sr = s + (size_t)r0 * n_kv, *o = out + (size_t)r0 * out_stride;
        /* R is a constant in each call, so the row loops unroll */
        switch (nr - r0) {
        case 1: rows_kt(qr, q_stride, kt, kt_stride, v, v_stride, o, out_stride, n_kv, dh, scale, sr, 1); break;
        case 2: rows_kt(qr, q_stride, kt, kt_stride, v, v_stride, o, out_stride, n_kv, dh, scale, sr, 2); break;
        case 3: rows_kt(qr, q_stride, kt, kt_stride, v, v_stride, o, out_stride, n_kv, dh, scale, sr, 3); break;
        default: rows_kt(qr, q_stride, kt, kt_stride, v, v_stride, o, out_stride, n_kv, dh, scale, sr, 4); break;
        }
    }
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
