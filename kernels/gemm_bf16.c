/* gemm_bf16.c - y[n][rows] (+)= x[n][cols] . W[rows][cols]^T for bf16 weights
 * with AVX512-BF16's dot-product instruction (VDPBF16PS), for encoder-sized
 * batches (sotto_linear with n > SOTTO_SKINNY_MAX_N).
 *
 * The inputs are rounded to bf16 (round to nearest even, as the weights
 * were), products of pairs are summed in fp32: the result equals the fp32
 * sum of bf16(x) * w up to summation order. Each call packs W into panels
 * of 32 output features, [cols/2][32][2] (one pair of columns of 32 outputs
 * per 128 bytes: two registers), and x into bf16 pairs; a micro-kernel then
 * computes 8 rows x 32 outputs in 16 registers, broadcasting one pair of x
 * per row and column pair. Columns go in blocks of KC so that a panel's
 * block stays in L1/L2; threads split the (row block, panel) tiles.
 *
 * Compiled for AVX512-BF16 by function attributes; callers check
 * sotto_gemm_bf16_supported() first (the CPU, and SOTTO_BF16_GEMM=0 to
 * turn it off). */
#include "gemm_bf16.h"

#include "cpu_gate.h"

#include "half.h"

#include <immintrin.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MR 8    /* rows of x per micro-kernel */
#define NR 32   /* outputs per panel (two 16-lane registers) */
#define KC 256  /* column pairs per block: a panel's block is 32 KiB */

#define TARGET __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))

/* the subsets TARGET names */
static int has_avx512_bf16(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

int sotto_gemm_bf16_supported(void) {
    static atomic_int cached = -1;
    return sotto_cpu_gate(&cached, "SOTTO_BF16_GEMM", has_avx512_bf16);
}

/* W [rows][cols] bf16 -> panels [P][kp][NR][2], zero-padded to whole panels and
   an even number of columns. */
static void pack_w(const uint16_t *w, int rows, int cols, int kp, uint16_t *out) {
    const int P = (rows + NR - 1) / NR;
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= 65536)
    for (int p = 0; p < P; p++) {
        uint16_t *dst = out + (size_t)p * kp * NR * 2;
        for (int j = 0; j < NR; j++) {
            const int r = p * NR + j;
            for (int k = 0; k < kp; k++) {
                uint16_t a = 0, b = 0;
                if (r < rows) {
                    a = w[(size_t)r * cols + 2 * k];
                    b = 2 * k + 1 < cols ? w[(size_t)r * cols + 2 * k + 1] : 0;
                }
                dst[((size_t)k * NR + j) * 2] = a;
                dst[((size_t)k * NR + j) * 2 + 1] = b;
            }
        }
    }
}

/* One row of x: f32 -> bf16 (nearest even), the last column padded with 0. */
TARGET static void pack_x_row(const float *src, int cols, uint16_t *dst) {
    int k = 0;
    for (; k + 32 <= cols; k += 32) {
        __m512 lo = _mm512_loadu_ps(src + k), hi = _mm512_loadu_ps(src + k + 16);
        /* cvtne2ps: the second operand's elements go to the low half */
        _mm512_storeu_si512(dst + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; k < cols; k++) dst[k] = sotto_f32_to_bf16(src[k]);
    if (cols & 1) dst[cols] = 0;
}

/* x [n][cols] f32 -> [n][kp] pairs of bf16 (as uint32). (The vector code is in a
   function of its own: OpenMP's outlined loop body does not inherit TARGET.) */
static void pack_x(const float *x, int n, int cols, int kp, uint32_t *out) {
#pragma omp parallel for schedule(static) if ((size_t)n * cols >= 65536)
    for (int i = 0; i < n; i++) pack_x_row(x + (size_t)i * cols, cols, (uint16_t *)(out + (size_t)i * kp));
}

/* acc[r][0..31] += sum over kb column pairs; mr <= MR rows. */
#define KERNEL_BODY(MRV)                                                                         \
    for (int k = 0; k < kb; k++) {                                                               \
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(wp + (size_t)k * NR * 2);               \
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(wp + (size_t)k * NR * 2 + 32);          \
        for (int r = 0; r < (MRV); r++) {                                                        \
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)xp[(size_t)r * kp + k]);         \
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);                                      \
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);                                      \
        }                                                                                        \
    }

/* One tile: rows i0..i0+mr of y, outputs j0..j0+jn (jn <= NR), column pairs
   k0..k0+kb. first: y is overwritten (beta 0) unless accumulate. */
TARGET static void tile(const uint32_t *xpk, int kp, const uint16_t *wpanel, int k0, int kb, float *y,
                        int ld, int i0, int mr, int j0, int jn, int load_y) {
    __m512 acc[MR][2];
    const __mmask16 m0 = jn >= 16 ? 0xffff : (__mmask16)((1u << jn) - 1);
    const __mmask16 m1 = jn >= 32 ? 0xffff : jn > 16 ? (__mmask16)((1u << (jn - 16)) - 1) : 0;
    for (int r = 0; r < mr; r++) {
        float *yr = y + (size_t)(i0 + r) * ld + j0;
        acc[r][0] = load_y ? _mm512_maskz_loadu_ps(m0, yr) : _mm512_setzero_ps();
        acc[r][1] = load_y ? _mm512_maskz_loadu_ps(m1, yr + 16) : _mm512_setzero_ps();
    }
    const uint32_t *xp = xpk + (size_t)i0 * kp + k0;
    const uint16_t *wp = wpanel + (size_t)k0 * NR * 2;
    if (mr == MR) {
        KERNEL_BODY(MR)
    } else {
        KERNEL_BODY(mr)
    }
    for (int r = 0; r < mr; r++) {
        float *yr = y + (size_t)(i0 + r) * ld + j0;
        _mm512_mask_storeu_ps(yr, m0, acc[r][0]);
        _mm512_mask_storeu_ps(yr + 16, m1, acc[r][1]);
    }
}

int sotto_gemm_bf16(const uint16_t *w, int rows, int cols, const float *x, int n, float *y,
                    int accumulate) {
    if (n <= 0 || rows <= 0) return 0;
    const int kp = (cols + 1) / 2, P = (rows + NR - 1) / NR;
    uint16_t *wp = aligned_alloc(64, ((size_t)P * kp * NR * 2 * sizeof(uint16_t) + 63) & ~(size_t)63);
    uint32_t *xp = aligned_alloc(64, ((size_t)n * kp * sizeof(uint32_t) + 63) & ~(size_t)63);
    if (!wp || !xp) {
        free(wp);
        free(xp);
        return -1;
    }
    pack_w(w, rows, cols, kp, wp);
    pack_x(x, n, cols, kp, xp);
    const int IB = (n + MR - 1) / MR;
    const long tiles = (long)IB * P;
    for (int k0 = 0; k0 < kp; k0 += KC) {
        const int kb = kp - k0 < KC ? kp - k0 : KC;
        const int load_y = accumulate || k0 > 0;
#pragma omp parallel for schedule(static) if (tiles > 1)
        for (long t = 0; t < tiles; t++) {
            /* panel-major: a thread's consecutive tiles reuse one panel block */
            const int p = (int)(t / IB), ib = (int)(t % IB);
            const int i0 = ib * MR, mr = n - i0 < MR ? n - i0 : MR;
            const int j0 = p * NR, jn = rows - j0 < NR ? rows - j0 : NR;
            tile(xp, kp, wp + (size_t)p * kp * NR * 2, k0, kb, y, rows, i0, mr, j0, jn, load_y);
        }
    }
    free(wp);
    free(xp);
    return 0;
}
