/* linear.h - weight matrices in several storage formats and y = x W^T + b.
 *
 * A sotto_wmat describes a [rows x cols] weight matrix (rows = output
 * features, cols = input features, PyTorch nn.Linear layout). It does not
 * own its memory: the model that built it does.
 *
 * Formats: SOTTO_WFMT_F32 is the reference (BLAS sgemm). Further formats
 * (bf16, q8, nf4, nvfp4) plug into the same table with a scalar reference
 * and optimised variants.
 */
#ifndef SOTTO_LINEAR_H
#define SOTTO_LINEAR_H

#include <stddef.h>
#include <stdint.h>

typedef enum sotto_wfmt {
    SOTTO_WFMT_F32 = 0,
    SOTTO_WFMT_COUNT
} sotto_wfmt;

typedef struct sotto_wmat {
    sotto_wfmt fmt;
    int32_t rows; /* output features */
    int32_t cols; /* input features */
    const void *data;
} sotto_wmat;

/* Name of a format ("f32", ...). */
const char *sotto_wfmt_name(sotto_wfmt fmt);

/* Bytes used by a rows x cols matrix in format fmt. */
size_t sotto_wfmt_bytes(sotto_wfmt fmt, int32_t rows, int32_t cols);

/* y[n][rows] = x[n][cols] * W^T + bias (bias may be NULL). x and y must not
 * overlap. Uses the BLAS thread pool; safe to call from several threads at
 * once on the same W. */
void sotto_linear(const sotto_wmat *w, const float *bias, const float *x, int n, float *y);

/* y[n][rows] += x[n][cols] * W^T (+ bias): accumulate into y (residual add). */
void sotto_linear_acc(const sotto_wmat *w, const float *bias, const float *x, int n, float *y);

#endif
