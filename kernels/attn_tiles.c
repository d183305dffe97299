/* attn_tiles.c - the attention's hot inner loops: the softmax of a row and
 * the decoder's per-row attention over K^T (ops.h: sotto_attention_rows_kt).
 * Like the weight tiles, the programs of the sanitized build link these
 * uninstrumented, and their callers in ops_cpu.c check the memory contract
 * (tile_check.h). */
#include "fastmath.h"
#include "simd.h"
#include "tile_check.h"

#include <math.h>
#include <string.h>

void sotto__softmax_row(float *x, int d) {
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
    for (int r = 0; r < R; r++) sotto__softmax_row(s + (size_t)r * n_kv, n_kv);
    weigh_v(s, n_kv, v, v_stride, out, out_stride, R, dh);
}

void sotto__attention_rows_kt(const float *q, int q_stride, const float *kt, int kt_stride,
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

