/* simd.h - 16- and 8-float vector types for portable SIMD kernels. GCC and
 * Clang lower a 16-float vector to one AVX-512 register, two AVX2 registers
 * or four SSE ones, whatever the build targets; no intrinsics, no per-ISA
 * copies. The 8-float type is for tiles sized to AVX2's 16 registers. */
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

typedef float sotto_v8f __attribute__((vector_size(32)));

static inline sotto_v8f sotto_load8(const float *p) {
    sotto_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void sotto_store8(float *p, sotto_v8f v) { memcpy(p, &v, sizeof v); }

#endif
