/* fastmath.h - exp, erfc and GELU that the compiler can vectorise.
 *
 * libm's expf/erff are scalar calls; in softmax and GELU over millions of
 * values they dominated the encoder's time. These are branch-free versions
 * of known approximations (Cephes expf; Numerical Recipes' erfcc), tested
 * against double-precision libm in tests/test_ops.c:
 *   sotto_fast_expf: relative error < 3e-7 on [-87, 88]; exactly 0 below
 *                    -87.3 (so that -INFINITY masks give 0);
 *   sotto_fast_erfcf: relative error < 5e-6 down to erfc(6) ~ 2e-17 (float
 *                     rounding of z^2); sotto_fast_erff: absolute < 3e-7.
 */
#ifndef SOTTO_FASTMATH_H
#define SOTTO_FASTMATH_H

#include <stdint.h>
#include <string.h>

static inline float sotto_fast_expf(float x) {
    const float lo = -87.33654f, hi = 88.3762626647949f;
    float xc = x < lo ? lo : (x > hi ? hi : x);
    /* n = round(x / ln 2) with the 1.5 * 2^23 trick; r = x - n ln 2 */
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    int32_t ni = (int32_t)(tb - 0x4B400000u);
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    uint32_t sb = (uint32_t)(ni + 127) << 23;
    float s;
    memcpy(&s, &sb, sizeof s);
    float y = p * s;
    return x < lo ? 0.0f : y;
}

/* erfc with small *relative* error everywhere (Numerical Recipes' erfcc,
 * a Chebyshev fit of erfc(z) exp(z^2)); the GELU of negative inputs needs
 * the relative accuracy of the small tail. */
static inline float sotto_fast_erfcf(float x) {
    float z = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float r = t * sotto_fast_expf(-z * z + p);
    return x < 0 ? 2.0f - r : r;
}

static inline float sotto_fast_erff(float x) { return 1.0f - sotto_fast_erfcf(x); }

/* Exact-form GELU: x * 0.5 * (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2). */
static inline float sotto_fast_gelu(float x) {
    return 0.5f * x * sotto_fast_erfcf(-0.70710678118654752440f * x);
}

#endif
