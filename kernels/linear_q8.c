/* linear_q8.c - skinny kernels and row dequantizers of the 8- and 16-bit
 * formats: f16 (IEEE half bits), bf16 (uint16 bf16 bits) and q8 (int8, one
 * float scale per 32). */
#include "half.h"
#include "linear_internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* ---- f16 ----------------------------------------------------------------------- */

/* F16C converts 8 halves per instruction (exactly, as every half is a float);
 * without it (x86-64-v2 builds, other CPUs) the portable conversion. */
static inline __attribute__((always_inline)) void decode_f16(const sotto_wmat *w, size_t row,
                                                             int c, sotto_v16f *wv) {
    const uint16_t *p = (const uint16_t *)w->data + row * (size_t)w->cols + (size_t)c * 32;
#if defined(__AVX512F__)
    wv[0] = (sotto_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    wv[1] = (sotto_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 16)));
#elif defined(__AVX2__) && defined(__F16C__)
    for (int h = 0; h < 4; h++)
        sotto__put8(wv, h, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8 * h))));
#else
    float t[32];
    for (int i = 0; i < 32; i++) t[i] = sotto_fp16_to_f32(p[i]);
    wv[0] = sotto_load16(t);
    wv[1] = sotto_load16(t + 16);
#endif
}

SOTTO__SKINNY_TILE(tile_f16, decode_f16, 2)
SOTTO__SKINNY_DRIVER(sotto__skinny_f16, tile_f16, 0, sotto__permute_x)

void sotto__dequant_f16(const sotto_wmat *w, int r0, int nr, float *dst) {
    const size_t n = (size_t)nr * (size_t)w->cols;
    const uint16_t *p = (const uint16_t *)w->data + (size_t)r0 * (size_t)w->cols;
    size_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i))));
#endif
    for (; i < n; i++) dst[i] = sotto_fp16_to_f32(p[i]);
}

/* ---- bf16 ---------------------------------------------------------------------- */

static inline __attribute__((always_inline)) void decode_bf16(const sotto_wmat *w, size_t row,
                                                              int c, sotto_v16f *wv) {
    const uint16_t *p = (const uint16_t *)w->data + row * (size_t)w->cols + (size_t)c * 32;
#if defined(__AVX512F__)
    __m512i u0 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    __m512i u1 = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 16)));
    wv[0] = (sotto_v16f)_mm512_castsi512_ps(_mm512_slli_epi32(u0, 16));
    wv[1] = (sotto_v16f)_mm512_castsi512_ps(_mm512_slli_epi32(u1, 16));
#elif defined(__AVX2__)
    for (int h = 0; h < 4; h++) {
        __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 8 * h)));
        sotto__put8(wv, h, _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
    }
#else
    float t[32];
    for (int i = 0; i < 32; i++) t[i] = sotto_bf16_to_f32(p[i]);
    wv[0] = sotto_load16(t);
    wv[1] = sotto_load16(t + 16);
#endif
}

SOTTO__SKINNY_TILE(tile_bf16, decode_bf16, 2)
SOTTO__SKINNY_DRIVER(sotto__skinny_bf16, tile_bf16, 0, sotto__permute_x)

void sotto__dequant_bf16(const sotto_wmat *w, int r0, int nr, float *dst) {
    const size_t n = (size_t)nr * (size_t)w->cols;
    const uint16_t *p = (const uint16_t *)w->data + (size_t)r0 * (size_t)w->cols;
    for (size_t i = 0; i < n; i++) dst[i] = sotto_bf16_to_f32(p[i]);
}

/* ---- q8 ------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void decode_q8(const sotto_wmat *w, size_t row, int c,
                                                            sotto_v16f *wv) {
    const size_t off = row * (size_t)w->cols + (size_t)c * 32;
    const int8_t *q = (const int8_t *)w->data + off;
    const float s = ((const float *)w->scales)[off / 32];
#if defined(__AVX512F__)
    __m512 vs = _mm512_set1_ps(s);
    __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
    wv[0] = (sotto_v16f)_mm512_mul_ps(_mm512_cvtepi32_ps(q0), vs);
    wv[1] = (sotto_v16f)_mm512_mul_ps(_mm512_cvtepi32_ps(q1), vs);
#elif defined(__AVX2__)
    const __m256 vs = _mm256_set1_ps(s);
    for (int h = 0; h < 4; h++) {
        __m256i qi = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * h)));
        sotto__put8(wv, h, _mm256_mul_ps(_mm256_cvtepi32_ps(qi), vs));
    }
#else
    float t[32];
    for (int i = 0; i < 32; i++) t[i] = (float)q[i] * s;
    wv[0] = sotto_load16(t);
    wv[1] = sotto_load16(t + 16);
#endif
}

SOTTO__SKINNY_TILE(tile_q8, decode_q8, 2)
SOTTO__SKINNY_DRIVER(sotto__skinny_q8, tile_q8, 0, sotto__permute_x)

void sotto__dequant_q8(const sotto_wmat *w, int r0, int nr, float *dst) {
    const size_t n = (size_t)nr * (size_t)w->cols, base = (size_t)r0 * (size_t)w->cols;
    const int8_t *q = (const int8_t *)w->data + base;
    const float *s = (const float *)w->scales + base / 32;
    for (size_t b = 0; b < n / 32; b++) {
        const float d = s[b];
        for (int i = 0; i < 32; i++) dst[b * 32 + i] = (float)q[b * 32 + i] * d;
    }
}
