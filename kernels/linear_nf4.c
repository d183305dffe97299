/* linear_nf4.c - skinny kernel and row dequantizer of NF4 (bitsandbytes
 * layout: element 2i in the high nibble of byte i, blocks of 64 with a float
 * absmax, optionally double-quantized; see linear.h). */
#include "linear_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* Chunk c of row `row` is one block: 64 elements, 32 bytes. Read as 16
 * uint16 lanes, lane k holds bytes 2k and 2k+1, i.e. (low to high nibble)
 * elements 4k+1, 4k, 4k+3, 4k+2: wv[0..3] take them in that order (the
 * table lookup uses the low 4 bits of each lane, so no masking). */
static inline __attribute__((always_inline)) void decode_nf4(const sotto_wmat *w, size_t row, int c,
                                                             sotto_v16f *wv) {
    const size_t e = row * (size_t)w->cols + (size_t)c * 64; /* first element */
    const uint8_t *q = (const uint8_t *)w->data + e / 2;
    const float am = sotto__nf4_absmax(w, e / 64);
#if defined(__AVX512F__)
    const __m512 tbl = _mm512_mul_ps(_mm512_loadu_ps(sotto_nf4_code), _mm512_set1_ps(am));
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)q));
    wv[0] = (sotto_v16f)_mm512_permutexvar_ps(v, tbl);
    wv[1] = (sotto_v16f)_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tbl);
    wv[2] = (sotto_v16f)_mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), tbl);
    wv[3] = (sotto_v16f)_mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), tbl);
#elif defined(__AVX2__)
    const __m256 am8 = _mm256_set1_ps(am);
    const __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(sotto_nf4_code), am8);
    const __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(sotto_nf4_code + 8), am8);
    for (int h = 0; h < 2; h++) { /* lanes 8h .. 8h+7: bytes 16h .. 16h+15 */
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * h)));
        for (int k = 0; k < 4; k++)
            sotto__put8(wv + k, h, sotto__lut16_avx2(_mm256_srli_epi32(v, 4 * k), lo, hi));
    }
#else
    float t[4][16];
    for (int k = 0; k < 16; k++) {
        t[0][k] = sotto_nf4_code[q[2 * k] & 15] * am;
        t[1][k] = sotto_nf4_code[q[2 * k] >> 4] * am;
        t[2][k] = sotto_nf4_code[q[2 * k + 1] & 15] * am;
        t[3][k] = sotto_nf4_code[q[2 * k + 1] >> 4] * am;
    }
    for (int v = 0; v < 4; v++) wv[v] = sotto_load16(t[v]);
#endif
}

/* x in decode_nf4's order: per 64 columns, elements 4k+1, 4k, 4k+3, 4k+2. */
static void permute_x_nf4(const float *x, int n, int cols, float *dst) {
    static const int off[4] = {1, 0, 3, 2};
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * cols;
        float *dr = dst + (size_t)r * cols;
        for (int c = 0; c + 64 <= cols; c += 64)
            for (int v = 0; v < 4; v++)
                for (int k = 0; k < 16; k++) dr[c + 16 * v + k] = xr[c + 4 * k + off[v]];
    }
}

SOTTO__SKINNY_TILE(tile_nf4, decode_nf4, 4)
SOTTO__SKINNY_DRIVER(sotto__skinny_nf4, tile_nf4, 1, permute_x_nf4)

void sotto__dequant_nf4(const sotto_wmat *w, int r0, int nr, float *dst) {
    const size_t n = (size_t)nr * (size_t)w->cols, base = (size_t)r0 * (size_t)w->cols;
    const uint8_t *q = (const uint8_t *)w->data + base / 2;
    for (size_t b = 0; b < n / 64; b++) {
        const float am = sotto__nf4_absmax(w, base / 64 + b);
        const uint8_t *qb = q + b * 32;
        float *d = dst + b * 64;
#if defined(__AVX512F__)
        const __m512 tbl = _mm512_mul_ps(_mm512_loadu_ps(sotto_nf4_code), _mm512_set1_ps(am));
        const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(8));
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qb + 16 * h)));
            __m512 ev = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tbl); /* even elements */
            __m512 od = _mm512_permutexvar_ps(v, tbl); /* odd: only the low 4 bits index */
            _mm512_storeu_ps(d + 32 * h, _mm512_permutex2var_ps(ev, i0, od));
            _mm512_storeu_ps(d + 32 * h + 16, _mm512_permutex2var_ps(ev, i1, od));
        }
        continue;
#endif
        for (int i = 0; i < 32; i++) {
            d[2 * i] = sotto_nf4_code[qb[i] >> 4] * am;
            d[2 * i + 1] = sotto_nf4_code[qb[i] & 15] * am;
        }
    }
}
