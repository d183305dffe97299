/* gemm_q8.c - y[n][rows] (+)= x[n][cols] . W[rows][cols]^T for q8 weights
 * with AVX512-VNNI's int8 dot product (VPDPBUSD), for encoder-sized
 * batches (sotto_linear with n > SOTTO_SKINNY_MAX_N). gemm_q8.h gives the
 * arithmetic.
 *
 * VPDPBUSD multiplies unsigned bytes by signed ones, four per 32-bit lane,
 * into int32. x goes in as unsigned (q + 128) and each block's sum is
 * corrected by 128 * (the sum of its 32 weights), which the packing
 * computes. W is packed per call into panels of 16 outputs: per block of 32
 * columns, 8 groups of 4 columns x 16 outputs (512 bytes: 8 registers),
 * then the block's 16 corrections and 16 scales. A micro-kernel computes 6
 * rows x 32 outputs (two panels): per block, 8 dot-product steps into int32
 * accumulators, then one conversion and one fused multiply-add with the
 * scales into fp32 accumulators that stay in registers over all columns
 * (24 registers; 4 or 8 rows measured slower). Threads take (60-row chunk,
 * panel pair) units, chunk-major, so that a chunk of x stays in L2 while
 * the panels stream past it.
 *
 * Compiled for AVX512-VNNI by function attributes; callers check
 * sotto_gemm_q8_supported() first. */
#include "gemm_q8.h"

#include "cpu_gate.h"

#include <immintrin.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define QB 32        /* columns per block (q8's scale block) */
#define PW 16        /* outputs per panel */
#define MR 6         /* rows of x per micro-kernel */
#define MC 60        /* rows of x per work unit (a multiple of MR) */
#define BLK_BYTES (8 * PW * 4 + PW * 4 + PW * 4) /* weights, corrections, scales */

/* Every AVX-512 subset the kernels use (quant_x_row's _mm512_and_ps is DQ):
 * the build must not depend on -march=native having enabled them. */
#define TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

/* the subsets TARGET names */
static int has_avx512_vnni(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}

int sotto_gemm_q8_supported(void) {
    static atomic_int cached = -1;
    return sotto_cpu_gate(&cached, "SOTTO_Q8_GEMM", has_avx512_vnni);
}

/* W -> panels [P][nb][BLK_BYTES]; outputs past rows are zero (weights,
   corrections and scales), so they add nothing. */
static void pack_w(const int8_t *wq, const float *ws, int rows, int cols, int P, unsigned char *out) {
    const int nb = cols / QB;
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= 65536)
    for (int p = 0; p < P; p++) {
        for (int b = 0; b < nb; b++) {
            unsigned char *blk = out + ((size_t)p * nb + b) * BLK_BYTES;
            int8_t *wv = (int8_t *)blk;
            int32_t *corr = (int32_t *)(blk + 8 * PW * 4);
            float *sc = (float *)(blk + 8 * PW * 4 + PW * 4);
            for (int j = 0; j < PW; j++) {
                const int r = p * PW + j;
                int32_t sum = 0;
                for (int g = 0; g < 8; g++)
                    for (int t = 0; t < 4; t++) {
                        int8_t v = r < rows ? wq[(size_t)r * cols + (size_t)b * QB + 4 * g + t] : 0;
                        wv[(g * PW + j) * 4 + t] = v;
                        sum += v;
                    }
                corr[j] = 128 * sum;
                sc[j] = r < rows ? ws[(size_t)r * nb + b] : 0.0f;
            }
        }
    }
}

/* One row of x: per block of 32, the scale and q + 128 (gemm_q8.h). */
TARGET static void quant_x_row(const float *src, int cols, uint8_t *q, float *scale) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int b = 0; b < cols / QB; b++) {
        const __m512 v0 = _mm512_loadu_ps(src + b * QB), v1 = _mm512_loadu_ps(src + b * QB + 16);
        const float amax = _mm512_reduce_max_ps(
            _mm512_max_ps(_mm512_and_ps(v0, absmask), _mm512_and_ps(v1, absmask)));
        float d = amax / 127.0f;
        /* an Inf or NaN in the block (x - x is NaN only for those; max_ps may drop
           a NaN): a NaN scale makes the row's outputs NaN, as sgemm's would be
           non-finite, instead of finite numbers from clamped codes */
        const __mmask16 bad = _mm512_cmp_ps_mask(_mm512_sub_ps(v0, v0), _mm512_setzero_ps(), _CMP_UNORD_Q) |
                              _mm512_cmp_ps_mask(_mm512_sub_ps(v1, v1), _mm512_setzero_ps(), _CMP_UNORD_Q);
        if (bad) d = __builtin_nanf("");
        scale[b] = d;
        /* x / d rounded to nearest even (cvtps_epi32 under the default rounding mode):
           kernels/quant.c's q8 rule, so that x is quantized exactly as weights are */
        __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
        if (d > 0.0f) {
            const __m512 vd = _mm512_set1_ps(d);
            i0 = _mm512_cvtps_epi32(_mm512_div_ps(v0, vd));
            i1 = _mm512_cvtps_epi32(_mm512_div_ps(v1, vd));
        }
        const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127),
                      off = _mm512_set1_epi32(128);
        i0 = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(i0, lo), hi), off);
        i1 = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(i1, lo), hi), off);
        _mm_storeu_si128((__m128i *)(q + b * QB), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + b * QB + 16), _mm512_cvtepi32_epi8(i1));
    }
}

/* (The vector code is in a function of its own: OpenMP's outlined loop body
   does not inherit TARGET.) */
static void quant_x(const float *x, int n, int cols, uint8_t *q, float *scale) {
    const int nb = cols / QB;
#pragma omp parallel for schedule(static) if ((size_t)n * cols >= 65536)
    for (int i = 0; i < n; i++)
        quant_x_row(x + (size_t)i * cols, cols, q + (size_t)i * cols, scale + (size_t)i * nb);
}

#define KERNEL_BODY(MRV)                                                                           \
    for (int b = 0; b < nb; b++) {                                                                 \
        const unsigned char *b0 = p0 + (size_t)b * BLK_BYTES, *b1 = p1 + (size_t)b * BLK_BYTES;    \
        __m512i ai[MR][2];                                                                         \
        for (int r = 0; r < (MRV); r++) ai[r][0] = ai[r][1] = _mm512_setzero_si512();              \
        for (int g = 0; g < 8; g++) {                                                              \
            const __m512i w0 = _mm512_loadu_si512(b0 + g * 64), w1 = _mm512_loadu_si512(b1 + g * 64); \
            for (int r = 0; r < (MRV); r++) {                                                      \
                int32_t four;                                                                      \
                memcpy(&four, xq + (size_t)r * cols + (size_t)b * QB + 4 * g, 4);                  \
                const __m512i a = _mm512_set1_epi32(four);                                         \
                ai[r][0] = _mm512_dpbusd_epi32(ai[r][0], a, w0);                                   \
                ai[r][1] = _mm512_dpbusd_epi32(ai[r][1], a, w1);                                   \
            }                                                                                      \
        }                                                                                          \
        const __m512i c0 = _mm512_loadu_si512(b0 + 512), c1 = _mm512_loadu_si512(b1 + 512);       \
        const __m512 s0 = _mm512_loadu_ps((const float *)(b0 + 576)),                              \
                     s1 = _mm512_loadu_ps((const float *)(b1 + 576));                              \
        for (int r = 0; r < (MRV); r++) {                                                          \
            const __m512 sx = _mm512_set1_ps(xs[(size_t)r * nb + b]);                              \
            acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ai[r][0], c0)),       \
                                        _mm512_mul_ps(s0, sx), acc[r][0]);                         \
            acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ai[r][1], c1)),       \
                                        _mm512_mul_ps(s1, sx), acc[r][1]);                         \
        }                                                                                          \
    }

/* Rows i0..i0+mr (mr <= MR) of y, outputs j0..j0+jn (jn <= 2 * PW), from the
   panels p0 (outputs j0..) and p1 (j0 + PW..). */
TARGET static void tile(const uint8_t *xq_all, const float *xs_all, int cols, const unsigned char *p0,
                        const unsigned char *p1, float *y, int ld, int i0, int mr, int j0, int jn,
                        int accumulate) {
    const int nb = cols / QB;
    const uint8_t *xq = xq_all + (size_t)i0 * cols;
    const float *xs = xs_all + (size_t)i0 * nb;
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    if (mr == MR) {
        KERNEL_BODY(MR)
    } else {
        KERNEL_BODY(mr)
    }
    const __mmask16 m0 = jn >= 16 ? 0xffff : (__mmask16)((1u << jn) - 1);
    const __mmask16 m1 = jn >= 32 ? 0xffff : jn > 16 ? (__mmask16)((1u << (jn - 16)) - 1) : 0;
    for (int r = 0; r < mr; r++) {
        float *yr = y + (size_t)(i0 + r) * ld + j0;
        __m512 v0 = acc[r][0], v1 = acc[r][1];
        if (accumulate) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, yr));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, yr + 16));
        }
        _mm512_mask_storeu_ps(yr, m0, v0);
        _mm512_mask_storeu_ps(yr + 16, m1, v1);
    }
}

int sotto_gemm_q8(const int8_t *wq, const float *ws, int rows, int cols, const float *x, int n,
                  float *y, int accumulate) {
    if (cols <= 0 || cols % QB) return -2;
    if (n <= 0 || rows <= 0) return 0;
    const int nb = cols / QB;
    const int PP = (rows + 2 * PW - 1) / (2 * PW), P = 2 * PP; /* whole panel pairs */
    const size_t wbytes = (size_t)P * nb * BLK_BYTES;
    unsigned char *wp = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    uint8_t *xq = malloc((size_t)n * cols);
    float *xs = malloc((size_t)n * nb * sizeof(float));
    if (!wp || !xq || !xs) {
        free(wp);
        free(xq);
        free(xs);
        return -1;
    }
    pack_w(wq, ws, rows, cols, P, wp);
    quant_x(x, n, cols, xq, xs);
    const int chunks = (n + MC - 1) / MC;
    const long units = (long)chunks * PP;
#pragma omp parallel for schedule(static) if (units > 1)
    for (long u = 0; u < units; u++) {
        const int c = (int)(u / PP), pp = (int)(u % PP);
        const int j0 = pp * 2 * PW, jn = rows - j0 < 2 * PW ? rows - j0 : 2 * PW;
        const unsigned char *p0 = wp + (size_t)(2 * pp) * nb * BLK_BYTES;
        const unsigned char *p1 = p0 + (size_t)nb * BLK_BYTES;
        const int iend = (c + 1) * MC < n ? (c + 1) * MC : n;
        for (int i0 = c * MC; i0 < iend; i0 += MR) {
            const int mr = iend - i0 < MR ? iend - i0 : MR;
            tile(xq, xs, cols, p0, p1, y, rows, i0, mr, j0, jn, accumulate);
        }
    }
    free(wp);
    free(xq);
    free(xs);
    return 0;
}
