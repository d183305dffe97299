/* quant_tiles.c - the quantizers' hot inner loops: the element codecs of
 * NF4, E2M1 and E4M3, a finiteness scan, and the row quantizers of bf16, q8,
 * nf4 and nvfp4, round-to-nearest and with the scale search (quant.c has the
 * formats' sources and the callers, sotto_quantize_rows{,_opt}). Loading a
 * model in a 4-bit or 8-bit format runs them over every weight. Like the
 * kernels' other tiles, the programs of the sanitized build link these
 * uninstrumented (instrumented, the nf4 search took half of test_calib's 34
 * s), and their callers in quant.c check the memory contract (tile_check.h). */
#include "half.h"
#include "linear_internal.h"
#include "quant.h"
#include "tile_check.h"

#include <math.h>
#include <string.h>

/* The thresholds of bitsandbytes' dQuantizeNF4 (CUDA), literally. */
static const float nf4_mid[15] = {
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,  0.2035212516784668f,  0.2920137718319893f,  0.3893125355243683f,
    0.5016634166240692f,  0.6427869200706482f,  0.8614784181118011f,
};

uint8_t sotto_nf4_encode(float x) {
    /* code = number of thresholds strictly below x (NaN -> 0, like CUDA) */
    unsigned q = 0;
    for (int i = 0; i < 15; i++) q += x > nf4_mid[i];
    return (uint8_t)q;
}

uint8_t sotto_e2m1_encode(float x) {
    uint8_t sign = signbit(x) ? 8 : 0;
    float a = fabsf(x);
    uint8_t m;
    if (!(a == a)) return 0;
    if (a <= 0.25f) m = 0;
    else if (a < 0.75f) m = 1;
    else if (a <= 1.25f) m = 2;
    else if (a < 1.75f) m = 3;
    else if (a <= 2.5f) m = 4;
    else if (a < 3.5f) m = 5;
    else if (a <= 5.0f) m = 6;
    else m = 7;
    return (uint8_t)(sign | m);
}


uint8_t sotto_e4m3_encode(float x) {
    uint32_t u = sotto_bits_from_f32(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7f); /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7e); /* >= 448 (and inf): saturate */
    if (a < 0x3c800000u) {                                /* below 2^-6: subnormal grid 2^-9 */
        float q = nearbyintf(sotto_f32_from_bits(a) * 512.0f); /* exact scaling, ties even */
        return (uint8_t)(sign | (uint8_t)q); /* q == 8 is the min normal 0x08 */
    }
    /* normal: keep 3 mantissa bits, round to nearest even */
    uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    uint32_t e = (r >> 23) - 127 + 7, m = (r >> 20) & 7u;
    uint32_t code = (e << 3) | m;
    if (code > 0x7e) code = 0x7e;
    return (uint8_t)(sign | code);
}


int sotto__all_finite(const float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(p[i] - p[i] == 0.0f)) return 0;
    return 1;
}

int sotto__quant_f16_rows(uint16_t *dst, const float *src, size_t n) {
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        dst[i] = sotto_f32_to_fp16(src[i]);
        if ((dst[i] & 0x7fffu) == 0x7c00u) rc = -1; /* |x| >= 65520: no half holds it */
    }
    return rc;
}

void sotto__quant_bf16_rows(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = sotto_f32_to_bf16(src[i]);
}

void sotto__quant_q8_row(int8_t *q, float *scales, const float *x, int cols) {
    for (int b = 0; b < cols / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / 127.0f;
        scales[b] = d;
        for (int i = 0; i < 32; i++) {
            float v = d > 0.0f ? nearbyintf(xb[i] / d) : 0.0f;
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            q[b * 32 + i] = (int8_t)v;
        }
    }
}

void sotto__quant_nf4_row(uint8_t *q, float *absmax, const float *x, int cols) {
    for (int b = 0; b < cols / 64; b++) {
        const float *xb = x + b * 64;
        float amax = 0.0f;
        for (int i = 0; i < 64; i++) amax = fmaxf(amax, fabsf(xb[i]));
        absmax[b] = amax;
        uint8_t *qb = q + b * 32;
        if (amax == 0.0f) { /* see the note at the top: code 0, as CUDA */
            memset(qb, 0x00, 32);
            continue;
        }
        float inv = 1.0f / amax;
        for (int i = 0; i < 32; i++) {
            uint8_t hi = sotto_nf4_encode(xb[2 * i] * inv);
            uint8_t lo = sotto_nf4_encode(xb[2 * i + 1] * inv);
            qb[i] = (uint8_t)((hi << 4) | lo);
        }
    }
}

void sotto__quant_nvfp4_row(uint8_t *q, uint8_t *scales, const float *x, int cols, float gp) {
    for (int b = 0; b < cols / 16; b++) {
        const float *xb = x + b * 16;
        float amax = 0.0f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float s = gp * (amax / 6.0f);
        s = s > 448.0f ? 448.0f : s;
        uint8_t sc = sotto_e4m3_encode(s);
        if ((sc & 0x7f) == 0) sc = 0x20; /* compressed-tensors: a zero scale becomes eps 0.125 */
        scales[b] = sc;
        float div = sotto_e4m3_table[sc] / gp;
        uint8_t *qb = q + b * 8;
        for (int i = 0; i < 8; i++) {
            float v0 = xb[2 * i] / div, v1 = xb[2 * i + 1] / div;
            v0 = v0 > 6.0f ? 6.0f : v0 < -6.0f ? -6.0f : v0;
            v1 = v1 > 6.0f ? 6.0f : v1 < -6.0f ? -6.0f : v1;
            qb[i] = (uint8_t)(sotto_e2m1_encode(v0) | (sotto_e2m1_encode(v1) << 4));
        }
    }
}


#define NF4_SEARCH_STEPS 20 /* scales amax * (1 - k / 80), k = 0..20: down to 0.75 amax */

static float nf4_block_error(const float *x, const float *h, int n, float scale) {
    float inv = 1.0f / scale, e = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = x[i] - sotto_nf4_code[sotto_nf4_encode(x[i] * inv)] * scale;
        e += (h ? h[i] : 1.0f) * d * d;
    }
    return e;
}

void sotto__quant_nf4_row_search(uint8_t *q, float *absmax, const float *x, const float *h,
                                  int cols) {
    for (int b = 0; b < cols / 64; b++) {
        const float *xb = x + b * 64, *hb = h ? h + b * 64 : NULL;
        float amax = 0.0f;
        for (int i = 0; i < 64; i++) amax = fmaxf(amax, fabsf(xb[i]));
        uint8_t *qb = q + b * 32;
        if (amax == 0.0f) {
            absmax[b] = 0.0f;
            memset(qb, 0x00, 32);
            continue;
        }
        float best = amax, best_e = nf4_block_error(xb, hb, 64, amax);
        for (int k = 1; k <= NF4_SEARCH_STEPS; k++) {
            float sc = amax * (1.0f - (float)k / 80.0f);
            float e = nf4_block_error(xb, hb, 64, sc);
            if (e < best_e) best_e = e, best = sc;
        }
        absmax[b] = best;
        float inv = 1.0f / best;
        for (int i = 0; i < 32; i++) {
            uint8_t hi = sotto_nf4_encode(xb[2 * i] * inv);
            uint8_t lo = sotto_nf4_encode(xb[2 * i + 1] * inv);
            qb[i] = (uint8_t)((hi << 4) | lo);
        }
    }
}

static float clamp6(float v) { return v > 6.0f ? 6.0f : v < -6.0f ? -6.0f : v; }

static float nvfp4_block_error(const float *x, const float *h, int n, float div) {
    float e = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = x[i] - sotto_e2m1_decode(sotto_e2m1_encode(clamp6(x[i] / div))) * div;
        e += (h ? h[i] : 1.0f) * d * d;
    }
    return e;
}

#define NVFP4_SEARCH_CODES 4 /* E4M3 codes below the round-to-nearest one (to about 0.6x),
                               * and the one above it */

void sotto__quant_nvfp4_row_search(uint8_t *q, uint8_t *scales, const float *x,
                                    const float *h, int cols, float gp) {
    for (int b = 0; b < cols / 16; b++) {
        const float *xb = x + b * 16, *hb = h ? h + b * 16 : NULL;
        float amax = 0.0f;
        for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float s = gp * (amax / 6.0f);
        s = s > 448.0f ? 448.0f : s;
        uint8_t sc = sotto_e4m3_encode(s);
        if ((sc & 0x7f) == 0) sc = 0x20; /* as round-to-nearest */
        uint8_t best = sc;
        float best_e = nvfp4_block_error(xb, hb, 16, sotto_e4m3_table[sc] / gp);
        /* positive E4M3 codes are ordered like their values */
        for (int k = -1; k <= NVFP4_SEARCH_CODES; k++) {
            int ci = (int)sc - k;
            if (k == 0 || ci < 1 || ci > 0x7e) continue;
            uint8_t c = (uint8_t)ci;
            float e = nvfp4_block_error(xb, hb, 16, sotto_e4m3_table[c] / gp);
            if (e < best_e) best_e = e, best = c;
        }
        scales[b] = best;
        float div = sotto_e4m3_table[best] / gp;
        uint8_t *qb = q + b * 8;
        for (int i = 0; i < 8; i++)
            qb[i] = (uint8_t)(sotto_e2m1_encode(clamp6(xb[2 * i] / div)) |
                              (sotto_e2m1_encode(clamp6(xb[2 * i + 1] / div)) << 4));
    }
}
