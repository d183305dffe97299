/* linear_internal.h - what the per-format matmul files share (not a public
 * header: the engine includes linear.h and quant.h only).
 *
 * Kernels for x with few rows ("skinny", n <= SOTTO_SKINNY_MAX_N: decoder
 * steps) stream each quantized weight row once and dequantize it in
 * registers, a chunk of 32 or 64 columns at a time. A chunk decodes to 2 or
 * 4 vectors of 16 floats; for the 4-bit formats those hold the elements in
 * the order the nibbles come (no interleaving in registers) and x is
 * permuted the same way once per call. Columns past the last full chunk
 * (only bf16 and nvfp4 can have them) go through sotto__wmat_get.
 */
#ifndef SOTTO_LINEAR_INTERNAL_H
#define SOTTO_LINEAR_INTERNAL_H

#include "linear.h"
#include "quant.h"
#include "simd.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Up to this many rows of x, the fused kernels beat dequantize + sgemm
 * (measured, 1 thread, AVX-512, OpenBLAS 0.3.21 SkylakeX kernels: at
 * n = 17 the fused NF4 kernel takes half the time, at 32 about 0.8x, at 64
 * 1.1-1.4x). F32 has no decoding to save and keeps its threshold of 16. */
#ifndef SOTTO_SKINNY_MAX_N
#define SOTTO_SKINNY_MAX_N 32
#endif
#define SOTTO_SKINNY_MAX_N_F32 16

/* Tables defined in quant.c. */
extern const float sotto_e4m3_table[256]; /* all FP8 E4M3FN values by code */
extern const float sotto_e2m1_table[16];  /* signed E2M1 values by 4-bit code */

/* a * b + c rounded twice (product, then sum), never fused into an FMA
 * whatever -ffp-contract says: bitsandbytes computes the double-quantized
 * absmax as two float operations, and we match it bit for bit. */
static inline float sotto__mul_add_unfused(float a, float b, float c) {
    float p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__("" : "+w"(p));
#else
    volatile float vp = p;
    p = vp;
#endif
    return p + c;
}

/* Sum of the 16 lanes as a tree (the scalar chain in simd.h costs ~16 add
 * latencies, which the skinny kernels would pay once per output). */
static inline float sotto__hsum16_tree(sotto_v16f v) {
    typedef float v8f __attribute__((vector_size(32)));
    typedef float v4f __attribute__((vector_size(16)));
    v8f lo8, hi8;
    memcpy(&lo8, &v, sizeof lo8);
    memcpy(&hi8, (const char *)&v + sizeof lo8, sizeof hi8);
    lo8 += hi8;
    v4f lo4, hi4;
    memcpy(&lo4, &lo8, sizeof lo4);
    memcpy(&hi4, (const char *)&lo8 + sizeof lo4, sizeof hi4);
    lo4 += hi4;
    return (lo4[0] + lo4[2]) + (lo4[1] + lo4[3]);
}

/* absmax of NF4 block b (flat index over the whole matrix). */
static inline float sotto__nf4_absmax(const sotto_wmat *w, size_t b) {
    const sotto_nf4_dq *dq = w->nf4_dq;
    if (!dq) return ((const float *)w->scales)[b];
    return sotto__mul_add_unfused(sotto_dyn8_code[dq->codes[b]], dq->nested_absmax[b / 256],
                                  dq->offset);
}

/* NVFP4 block multiplier: E4M3 scale times the global scale. */
static inline float sotto__nvfp4_scale(const sotto_wmat *w, size_t b) {
    return sotto_e4m3_table[((const uint8_t *)w->scales)[b]] * w->global_scale;
}

/* Value of element (row, col) of W, decoded one at a time (linear_ref.c). */
float sotto__wmat_get(const sotto_wmat *w, size_t row, int col);

/* x [n][cols] -> dst [n][cols] with every full 32-column chunk reordered as
 * its 16 even then its 16 odd elements; the tail is copied as is. */
void sotto__permute_x(const float *x, int n, int cols, float *dst);

/* Skinny kernels: y[r][j] (=|+=) W[j] . x[r] for any n (used for n <= SOTTO_SKINNY_MAX_N),
 * OpenMP-parallel over output rows. No bias. */
void sotto__skinny_f32(const sotto_wmat *w, const float *x, int n, float *y, int accumulate);
void sotto__skinny_f16(const sotto_wmat *w, const float *x, int n, float *y, int accumulate);
void sotto__skinny_bf16(const sotto_wmat *w, const float *x, int n, float *y, int accumulate);
void sotto__skinny_q8(const sotto_wmat *w, const float *x, int n, float *y, int accumulate);
void sotto__skinny_nf4(const sotto_wmat *w, const float *x, int n, float *y, int accumulate);
void sotto__skinny_nvfp4(const sotto_wmat *w, const float *x, int n, float *y, int accumulate);

/* 1 if the linked copy of the tiles above was built with AddressSanitizer:
 * in sanitized builds, the unit tests' copy is and the programs' is not
 * (tile_check.h). */
int sotto__tiles_instrumented(void);

/* Row dequantizers (rows [r0, r0 + nr) into dst[nr][cols]), exact. */
void sotto__dequant_f16(const sotto_wmat *w, int r0, int nr, float *dst);
void sotto__dequant_bf16(const sotto_wmat *w, int r0, int nr, float *dst);
void sotto__dequant_q8(const sotto_wmat *w, int r0, int nr, float *dst);
void sotto__dequant_nf4(const sotto_wmat *w, int r0, int nr, float *dst);
void sotto__dequant_nvfp4(const sotto_wmat *w, int r0, int nr, float *dst);

/* The driver shared by the skinny kernels. A chunk is 16 * NV columns;
 * DECODE(w, row, c, wv) sets the NV vectors of chunk c of weight row `row`,
 * in the order that PERMFN (when PERMUTE is non-zero) gives the chunks of x
 * once per call. Each tile is 4 weight rows by NR <= 4 rows of x; NR is a
 * constant at each call, so the accumulators stay in registers (two per
 * output when NR <= 2, for more independent FMA chains). */
#if defined(__AVX512F__)
/* AVX-512: 32 registers of 16 floats hold all 4 x NR x NA accumulators and
 * the NR x NV chunks of x at once. */
#define SOTTO__SKINNY_TILE(NAME, DECODE, NV)                                                     \
    static inline __attribute__((always_inline)) void NAME(                                    \
        const sotto_wmat *w, int j0, int jn, const float *xs, const float *xn, int r0,         \
        const int NR, float *y, int accumulate) {                                              \
        const int cols = w->cols, nc = cols / (16 * (NV)), rows = w->rows;                     \
        const int NA = NR <= 2 ? 2 : 1;                                                        \
        sotto_v16f s[4][4][2];                                                                 \
        size_t wr[4];                                                                          \
        for (int k = 0; k < 4; k++) {                                                          \
            wr[k] = (size_t)j0 + (size_t)(k < jn ? k : 0);                                     \
            for (int r = 0; r < NR; r++)                                                       \
                for (int a = 0; a < NA; a++) s[k][r][a] = (sotto_v16f){0};                     \
        }                                                                                      \
        for (int c = 0; c < nc; c++) {                                                         \
            sotto_v16f xv[4][NV];                                                              \
            for (int r = 0; r < NR; r++)                                                       \
                for (int v = 0; v < (NV); v++)                                                 \
                    xv[r][v] = sotto_load16(xs + (size_t)(r0 + r) * cols +                     \
                                            (size_t)c * 16 * (NV) + 16 * v);                   \
            for (int k = 0; k < 4; k++) {                                                      \
                sotto_v16f wv[NV];                                                             \
                DECODE(w, wr[k], c, wv);                                                       \
                for (int v = 0; v < (NV); v++)                                                 \
                    for (int r = 0; r < NR; r++) s[k][r][v % NA] += wv[v] * xv[r][v];          \
            }                                                                                  \
        }                                                                                      \
        for (int k = 0; k < jn; k++)                                                           \
            for (int r = 0; r < NR; r++) {                                                     \
                sotto_v16f t = s[k][r][0];                                                     \
                if (NA == 2) t += s[k][r][1];                                                  \
                float val = sotto__hsum16_tree(t);                                                   \
                const float *xr = xn + (size_t)(r0 + r) * cols;                                \
                for (int col = nc * 16 * (NV); col < cols; col++)                              \
                    val += sotto__wmat_get(w, wr[k], col) * xr[col];                           \
                float *yp = y + (size_t)(r0 + r) * rows + j0 + k;                              \
                *yp = accumulate ? *yp + val : val;                                            \
            }                                                                                  \
    }

#else
/* Without AVX-512 (AVX2: 16 registers of 8 floats; SSE: 16 of 4) the tile
 * above would need up to 48 registers and spill its accumulators to the
 * stack on every FMA (bench_kernels on a Zen 2 core: the f32 vocabulary
 * projection for one row of x read its weights at 4.6 GB/s, at 14.2 with
 * this tile). Here the accumulators are 8
 * floats wide, x is read from L1 at each use instead of being held, and the
 * tile's 4 weight rows go in groups of KG = 4 (NR <= 2) or 2 (NR > 2), so
 * that KG x NR x NA accumulators stay within 8 registers. Every weight row
 * is still decoded once per tile. The 8-float type is simd.h's. */

#if defined(__AVX2__)
#include <immintrin.h>

/* tbl[idx & 15] per 32-bit lane, the 16 floats of tbl as lo (0-7) and hi
 * (8-15): two in-lane permutes (which read the low 3 bits) and a blend on
 * bit 3, moved up to the sign bit. */
static inline __m256 sotto__lut16_avx2(__m256i idx, __m256 lo, __m256 hi) {
    __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* Floats 8h .. 8h+7 of the vector array wv. */
static inline void sotto__put8(sotto_v16f *wv, int h, __m256 v) {
    memcpy((float *)wv + 8 * h, &v, sizeof v);
}
#endif

static inline float sotto__hsum8_tree(sotto_v8f v) {
    typedef float v4f __attribute__((vector_size(16)));
    v4f lo4, hi4;
    memcpy(&lo4, &v, sizeof lo4);
    memcpy(&hi4, (const char *)&v + sizeof lo4, sizeof hi4);
    lo4 += hi4;
    return (lo4[0] + lo4[2]) + (lo4[1] + lo4[3]);
}

#define SOTTO__SKINNY_TILE(NAME, DECODE, NV)                                                     \
    static inline __attribute__((always_inline)) void NAME(                                    \
        const sotto_wmat *w, int j0, int jn, const float *xs, const float *xn, int r0,         \
        const int NR, float *y, int accumulate) {                                              \
        const int cols = w->cols, nc = cols / (16 * (NV)), rows = w->rows;                     \
        const int KG = NR <= 2 ? 4 : 2, NA = NR == 1 ? 2 : 1;                                  \
        for (int kb = 0; kb < jn; kb += KG) {                                                  \
            sotto_v8f s[4][4][2];                                                             \
            size_t wr[4];                                                                      \
            for (int k = 0; k < KG; k++) {                                                     \
                wr[k] = (size_t)j0 + (size_t)(kb + k < jn ? kb + k : kb);                      \
                for (int r = 0; r < NR; r++)                                                   \
                    for (int a = 0; a < NA; a++) s[k][r][a] = (sotto_v8f){0};                 \
            }                                                                                  \
            for (int c = 0; c < nc; c++) {                                                     \
                const float *xc = xs + (size_t)r0 * cols + (size_t)c * 16 * (NV);              \
                for (int k = 0; k < KG; k++) {                                                 \
                    sotto_v16f wv[NV];                                                         \
                    DECODE(w, wr[k], c, wv);                                                   \
                    for (int v = 0; v < (NV); v++) {                                           \
                        sotto_v8f wh[2];                                                      \
                        memcpy(wh, &wv[v], sizeof wh);                                         \
                        for (int h = 0; h < 2; h++)                                            \
                            for (int r = 0; r < NR; r++)                                       \
                                s[k][r][h % NA] +=                                             \
                                    wh[h] * sotto_load8(xc + (size_t)r * cols + 16 * v + 8 * h); \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
            for (int k = 0; k < KG && kb + k < jn; k++)                                        \
                for (int r = 0; r < NR; r++) {                                                 \
                    sotto_v8f t = s[k][r][0];                                                 \
                    if (NA == 2) t += s[k][r][1];                                              \
                    float val = sotto__hsum8_tree(t);                                          \
                    const float *xr = xn + (size_t)(r0 + r) * cols;                            \
                    for (int col = nc * 16 * (NV); col < cols; col++)                          \
                        val += sotto__wmat_get(w, wr[k], col) * xr[col];                       \
                    float *yp = y + (size_t)(r0 + r) * rows + j0 + kb + k;                     \
                    *yp = accumulate ? *yp + val : val;                                        \
                }                                                                              \
        }                                                                                      \
    }
#endif

/* Defines `void FN(w, x, n, y, accumulate)` from a tile function; PERMFN
 * (x, n, cols, dst) reorders x when PERMUTE is non-zero. */
#define SOTTO__SKINNY_DRIVER(FN, TILE, PERMUTE, PERMFN)                                        \
    void FN(const sotto_wmat *w, const float *x, int n, float *y, int accumulate) {            \
        const int rows = w->rows, cols = w->cols;                                              \
        float *xp = NULL;                                                                      \
        const float *xs = x;                                                                   \
        if (PERMUTE) {                                                                         \
            xp = malloc(sizeof(float) * (size_t)n * (size_t)cols);                             \
            if (!xp) { /* out of memory: the slow exact way */                                 \
                for (int r = 0; r < n; r++)                                                    \
                    for (int j = 0; j < rows; j++) {                                           \
                        float v = 0.0f;                                                        \
                        for (int c = 0; c < cols; c++)                                         \
                            v += sotto__wmat_get(w, (size_t)j, c) * x[(size_t)r * cols + c];   \
                        float *yp = y + (size_t)r * rows + j;                                  \
                        *yp = accumulate ? *yp + v : v;                                        \
                    }                                                                          \
                return;                                                                        \
            }                                                                                  \
            PERMFN(x, n, cols, xp);                                                            \
            xs = xp;                                                                           \
        }                                                                                      \
        const int big = (size_t)rows * (size_t)cols >= 65536;                                  \
        _Pragma("omp parallel for schedule(static) if (big)")                                  \
        for (int j0 = 0; j0 < rows; j0 += 4) {                                                 \
            int jn = rows - j0 < 4 ? rows - j0 : 4;                                            \
            for (int r0 = 0; r0 < n; r0 += 4) {                                                \
                switch (n - r0) {                                                              \
                case 1: TILE(w, j0, jn, xs, x, r0, 1, y, accumulate); break;                   \
                case 2: TILE(w, j0, jn, xs, x, r0, 2, y, accumulate); break;                   \
                case 3: TILE(w, j0, jn, xs, x, r0, 3, y, accumulate); break;                   \
                default: TILE(w, j0, jn, xs, x, r0, 4, y, accumulate); break;                  \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        free(xp);                                                                              \
    }

#endif
