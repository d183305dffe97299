/* gemm_q8.h - encoder-sized GEMMs on q8 weights with the CPU's int8 dot
 * product (AVX512-VNNI). kernels/linear.c uses it for q8 weight matrices
 * and more than SOTTO_SKINNY_MAX_N rows of x when the CPU has it; otherwise
 * those rows go through dequantize + sgemm as before.
 *
 * The activations are quantized exactly as kernels/quant.c quantizes q8
 * weights (sotto_quantize_rows): per row of x and block of 32 columns,
 * scale d = amax / 127 and q = round-to-nearest-even(x / d) in -127..127 (a
 * block of zeros: scale 0, q 0). Each block's
 * 32 products are summed exactly in int32 and scaled by the two blocks'
 * scales into an fp32 sum: the result equals the fp32 sum over blocks of
 * sw * sx * dot(qw, qx) up to summation order. A block of x holding an Inf
 * or a NaN gets a NaN scale: every output of its row is NaN (never finite
 * numbers made from clamped codes). */
#ifndef SOTTO_GEMM_Q8_H
#define SOTTO_GEMM_Q8_H

#include <stdint.h>

/* 1 if this CPU has AVX512-VNNI (and AVX512BW) and SOTTO_Q8_GEMM is not "0"
 * (checked once). */
int sotto_gemm_q8_supported(void);

/* y[n][rows] = x[n][cols] . W[rows][cols]^T (accumulate: y +=) for q8 W:
 * wq int8 [rows][cols], ws one float per 32 columns [rows][cols / 32]
 * (kernels/linear_q8.c's layout); x quantized as above. Only on a CPU where
 * sotto_gemm_q8_supported(). Returns 0; -1 when out of memory, -2 when cols
 * is not a multiple of 32 (y untouched in both cases). */
int sotto_gemm_q8(const int8_t *wq, const float *ws, int rows, int cols, const float *x, int n,
                  float *y, int accumulate);

#endif
