/* gemm_bf16.h - encoder-sized GEMMs on bf16 weights with the CPU's bf16 dot
 * product (AVX512-BF16). kernels/linear.c uses it for bf16 weight matrices
 * and more than SOTTO_SKINNY_MAX_N rows of x when the CPU has it; otherwise
 * those rows go through dequantize + sgemm as before. */
#ifndef SOTTO_GEMM_BF16_H
#define SOTTO_GEMM_BF16_H

#include <stdint.h>

/* 1 if this CPU has AVX512-BF16 and SOTTO_BF16_GEMM is not "0" (checked once). */
int sotto_gemm_bf16_supported(void);

/* y[n][rows] = x[n][cols] . w[rows][cols]^T (accumulate: y +=), w in bf16 bits,
 * x rounded to bf16 (nearest even) and the products summed in fp32. Only on a
 * CPU where sotto_gemm_bf16_supported(). Returns 0, or -1 when out of memory
 * (y untouched). */
int sotto_gemm_bf16(const uint16_t *w, int rows, int cols, const float *x, int n, float *y,
                    int accumulate);

#endif
