/* cuda_internal.h - between upload.c (host C) and linear.cu. */
#ifndef SOTTO_CUDA_INTERNAL_H
#define SOTTO_CUDA_INTERNAL_H

#include "cuda_linear.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NF4 codes [16], E2M1 magnitudes [8], E4M3 values [256], in that order. */
int sotto__cuda_set_tables(const float *tables, sotto_err *err);
sotto_cuda_wmat *sotto__cuda_wmat_new(sotto_wfmt fmt, int rows, int cols, float global_scale,
                                      const void *data, size_t data_bytes, const void *scales,
                                      size_t scale_bytes, sotto_err *err);

#ifdef __cplusplus
}
#endif

#endif
