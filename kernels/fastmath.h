/* fastmath.h - exp and erf that the compiler can vectorise.
 *
 * libm's expf/erff are scalar calls; in softmax and GELU over millions of
 * values they dominated the encoder's time. These versions use the same
 * range reduction and polynomial (Cephes expf; Abramowitz-Stegun 7.1.26 for
 * erf), are branch-free, and are tested against libm in tests/test_ops.c:
 *   sotto_fast_expf: relative error < 3e-7 on [-87, 88]; exactly 0 below
 *                    -87.3 (so that -INFINITY masks give 0);
 *   sotto_fast_erff: absolute error < 2e-7.
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

static inline float sotto_fast_erff(float x) {
    float ax = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float poly = t * (0.254829592f +
                      t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float y = 1.0f - poly * sotto_fast_expf(-ax * ax);
    return x < 0 ? -y : y;
}

#endif
