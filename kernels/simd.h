/* simd.h - a 16-float vector type for portable SIMD kernels. GCC and Clang
 * lower it to one AVX-512 register, two AVX2 registers or four SSE ones,
 * whatever the build targets; no intrinsics, no per-ISA copies. */
#ifndef SOTTO_SIMD_H
#define SOTTO_SIMD_H

#include <string.h>

typedef float sotto_v16f __attribute__((vector_size(64)));

static inline sotto_v16f sotto_load16(const float *p) {
    sotto_v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void sotto_store16(float *p, sotto_v16f v) { memcpy(p, &v, sizeof v); }

static inline float sotto_hsum16(sotto_v16f v) {
    float s = 0.0f;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
}

#endif
