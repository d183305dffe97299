/* linear_nvfp4.c - skinny kernel and row dequantizer of NVFP4
 * (compressed-tensors layout: element 2i in the low nibble of byte i, E2M1
 * codes, one E4M3 scale per 16 elements, a float global multiplier). */
#include "linear_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* Chunk c of row `row`: 64 elements = 4 blocks = 32 bytes. Read as 16
 * uint16 lanes, lane k holds bytes 2k and 2k+1, i.e. (low to high nibble)
 * elements 4k, 4k+1, 4k+2, 4k+3, all in block k / 4: wv[v] takes element
 * 4k+v (the table lookup uses the low 4 bits of each lane, so no masking). */
static inline __attribute__((always_inline)) void decode_nvfp4(const sotto_wmat *w, size_t row,
                                                               int c, sotto_v16f *wv) {
    const size_t e = row * (size_t)w->cols + (size_t)c * 64;
    const uint8_t *q = (const uint8_t *)w->data + e / 2;
    float s[4];
    for (int b = 0; b < 4; b++) s[b] = sotto__nvfp4_scale(w, e / 16 + b);
#if defined(__AVX512F__)
    const __m512 tbl = _mm512_loadu_ps(sotto_e2m1_table);
    const __m512i bidx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 vs = _mm512_permutexvar_ps(bidx, _mm512_castps128_ps512(_mm_loadu_ps(s)));
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)q));
    wv[0] = (sotto_v16f)_mm512_mul_ps(_mm512_permutexvar_ps(v, tbl), vs);
    wv[1] = (sotto_v16f)_mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), tbl), vs);
    wv[2] = (sotto_v16f)_mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), tbl), vs);
    wv[3] = (sotto_v16f)_mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), tbl), vs);
#elif defined(__AVX2__)
    const __m256 lo = _mm256_loadu_ps(sotto_e2m1_table), hi = _mm256_loadu_ps(sotto_e2m1_table + 8);
    for (int h = 0; h < 2; h++) { /* lanes 8h .. 8h+7: blocks 2h and 2h+1 */
        const __m256 vs = _mm256_setr_ps(s[2 * h], s[2 * h], s[2 * h], s[2 * h], s[2 * h + 1],
                                         s[2 * h + 1], s[2 * h + 1], s[2 * h + 1]);
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * h)));
        for (int k = 0; k < 4; k++)
            sotto__put8(wv + k, h, _mm256_mul_ps(sotto__lut16_avx2(_mm256_srli_epi32(v, 4 * k), lo, hi), vs));
    }
#else
    float t[4][16];
    for (int k = 0; k < 16; k++) {
        const float sk = s[k / 4];
        t[0][k] = sotto_e2m1_table[q[2 * k] & 15] * sk;
        t[1][k] = sotto_e2m1_table[q[2 * k] >> 4] * sk;
        t[2][k] = sotto_e2m1_table[q[2 * k + 1] & 15] * sk;
        t[3][k] = sotto_e2m1_table[q[2 * k + 1] >> 4] * sk;
    }
    for (int v = 0; v < 4; v++) wv[v] = sotto_load16(t[v]);
#endif
}

/* x in decode_nvfp4's order: per full 64 columns, element 4k+v at 16v+k;
 * the tail (cols % 64) as is. */
static void permute_x_nvfp4(const float *x, int n, int cols, float *dst) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * cols;
        float *dr = dst + (size_t)r * cols;
        int c = 0;
        for (; c + 64 <= cols; c += 64)
            for (int v = 0; v < 4; v++)
                for (int k = 0; k < 16; k++) dr[c + 16 * v + k] = xr[c + 4 * k + v];
        for (; c < cols; c++) dr[c] = xr[c];
    }
}

SOTTO__SKINNY_TILE(tile_nvfp4, decode_nvfp4, 4)
SOTTO__SKINNY_DRIVER(sotto__skinny_nvfp4, tile_nvfp4, 1, permute_x_nvfp4)

void sotto__dequant_nvfp4(const sotto_wmat *w, int r0, int nr, float *dst) {
    const size_t n = (size_t)nr * (size_t)w->cols, base = (size_t)r0 * (size_t)w->cols;
    const uint8_t *q = (const uint8_t *)w->data + base / 2;
    for (size_t b = 0; b < n / 16; b++) {
        /* as compressed-tensors: code * (block scale * global scale) */
        const float s = sotto__nvfp4_scale(w, base / 16 + b);
        const uint8_t *qb = q + b * 8;
        float *d = dst + b * 16;
#if defined(__AVX512F__)
        const __m512 tbl = _mm512_mul_ps(_mm512_loadu_ps(sotto_e2m1_table), _mm512_set1_ps(s));
        /* 8 bytes -> lanes 0-7 hold the bytes; build (lo0, hi0, lo1, hi1, ...) */
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)qb));
        const __m512i pair = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
        __m512i idx = _mm512_srlv_epi32(_mm512_permutexvar_epi32(pair, v), shift);
        _mm512_storeu_ps(d, _mm512_permutexvar_ps(idx, tbl)); /* low 4 bits index */
        continue;
#endif
        for (int i = 0; i < 8; i++) {
            d[2 * i] = sotto_e2m1_table[qb[i] & 15] * s;
            d[2 * i + 1] = sotto_e2m1_table[qb[i] >> 4] * s;
        }
    }
}
