/* eltwise_tiles.c - the element-wise hot loops of the layers: a row of the
 * layer norm, a span of GELU, a row plus its bias (ops.h: sotto_layer_norm,
 * sotto_gelu, sotto_add_bias_rows, which split the work and check the memory
 * contract in ops_cpu.c). Like the kernels' other tiles, the programs of the
 * sanitized build link these uninstrumented (tile_check.h): instrumented, the
 * GELU did not vectorise and took 9% of the sanitized server's CPU in
 * test_compat (perf), more than any other loop of its own code. */
#include "fastmath.h"
#include "tile_check.h"

#include <math.h>

void sotto__layer_norm_row(const float *x, float *y, int d, const float *gamma, const float *beta,
                           float eps) {
    double sum = 0.0;
    for (int i = 0; i < d; i++) sum += x[i];
    float mean = (float)(sum / d);
    double var = 0.0;
    for (int i = 0; i < d; i++) {
        float c = x[i] - mean;
        var += (double)c * c;
    }
    float inv = 1.0f / sqrtf((float)(var / d) + eps);
    for (int i = 0; i < d; i++) y[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
}

void sotto__gelu_span(float *x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] = sotto_fast_gelu(x[i]);
}

void sotto__add_bias_row(float *x, const float *b, int d) {
#pragma omp simd
    for (int i = 0; i < d; i++) x[i] += b[i];
}
