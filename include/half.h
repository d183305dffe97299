/* half.h - IEEE fp16 and bfloat16 <-> fp32 conversions (portable, exact).
 *
 * fp16 -> fp32 and bf16 -> fp32 are exact. fp32 -> bf16 and fp32 -> fp16
 * round to nearest even; NaN stays NaN, overflow goes to infinity.
 */
#ifndef SOTTO_HALF_H
#define SOTTO_HALF_H

#include <stdint.h>
#include <string.h>

static inline float sotto_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t sotto_bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float sotto_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return sotto_f32_from_bits(u);
}

static inline uint16_t sotto_f32_to_fp16(float f) {
    uint32_t u = sotto_bits_from_f32(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (absu < 0x38800000u) {                                   /* subnormal or zero */
        if (absu < 0x33000000u) return (uint16_t)sign;            /* < half of min subnormal */
        uint32_t e = absu >> 23;
        uint32_t man = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t res = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (res & 1u))) res++;
        return (uint16_t)(sign | res);
    }
    uint32_t res = ((absu >> 13) - (112u << 10));
    uint32_t rem = absu & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) res++;
    return (uint16_t)(sign | res);
}

static inline float sotto_bf16_to_f32(uint16_t b) { return sotto_f32_from_bits((uint32_t)b << 16); }

static inline uint16_t sotto_f32_to_bf16(float f) {
    uint32_t u = sotto_bits_from_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
