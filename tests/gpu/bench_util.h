/* bench_util.h - what the GPU benchmarks share: a monotonic clock and a
 * fixed-seed random stream (header-only; each includer gets its own copy of
 * the stream's state). */
#ifndef SOTTO_GPU_BENCH_UTIL_H
#define SOTTO_GPU_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

/* seconds on CLOCK_MONOTONIC */
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* uniform in [-1, 1): xorshift64, the same sequence in every run */
static uint64_t bench_rng = 88172645463325252ULL;
static inline float bench_frand(void) {
    bench_rng ^= bench_rng << 13, bench_rng ^= bench_rng >> 7, bench_rng ^= bench_rng << 17;
    return (float)((bench_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

#endif
