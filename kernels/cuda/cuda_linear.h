/* cuda_linear.h - weight-only linear layers on an NVIDIA GPU: the twin of
 * linear.h's sotto_linear for decode-sized batches.
 *
 * A sotto_cuda_wmat is a device copy of a sotto_wmat in the same packed
 * format (4-bit data stays 4-bit: the GPU never holds a dequantized copy).
 * NF4 double-quantized absmax values are expanded to one float per 64
 * weights on upload; Q8, NF4 and NVFP4 scales are uploaded as stored.
 *
 * sotto_cuda_linear computes y[n][rows] = x[n][cols] W^T (+ bias) with fp32
 * activations and fp32 accumulation: one warp per output feature, the packed
 * weights read once per 8 input rows with 4- to 16-byte loads, decoded in
 * registers through the formats' code tables (copied from the CPU tables, so
 * both sides decode the same values). It is exact up to summation order
 * against sotto_linear; tests/gpu/test_cuda_linear.c checks that on random
 * inputs of several shapes.
 *
 * Ownership: the caller owns a sotto_cuda_wmat and frees it with
 * sotto_cuda_wmat_free. Device pointers passed to sotto_cuda_linear belong to
 * the caller. Errors come back as SOTTO_E_* codes with a message.
 */
#ifndef SOTTO_CUDA_LINEAR_H
#define SOTTO_CUDA_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "linear.h"
#include "sotto_err.h"

/* A CUDA stream: the same type as cudaStream_t, so a cudaStream_t is passed
 * as is. Every call below that queues work on the device takes the stream to
 * queue it on, created and owned by the caller (NULL: the legacy default
 * stream); nothing is kept per thread. */
typedef struct CUstream_st *sotto_cuda_stream;

/* 1 if a CUDA device can be used (its name in name); 0 and the reason otherwise. */
int sotto_cuda_available(char *name, size_t name_sz, char *why, size_t why_sz);

typedef struct sotto_cuda_wmat sotto_cuda_wmat;

sotto_cuda_wmat *sotto_cuda_wmat_upload(const sotto_wmat *w, sotto_err *err);
void sotto_cuda_wmat_free(sotto_cuda_wmat *w); /* accepts NULL */
size_t sotto_cuda_wmat_bytes(const sotto_cuda_wmat *w); /* device bytes held */

/* Device pointers: x [n][cols], y [n][rows], bias [rows] or NULL. Runs on
 * stream and waits for it. */
int sotto_cuda_linear(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                      sotto_cuda_stream stream, sotto_err *err);

/* The same, queued on stream without waiting (launch errors are still
 * reported); sotto_cuda_sync waits for everything queued on a stream. */
int sotto_cuda_linear_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                            sotto_cuda_stream stream, sotto_err *err);
int sotto_cuda_sync(sotto_cuda_stream stream, sotto_err *err);

/* y += x W^T (+ bias), queued like sotto_cuda_linear_async: the residual
 * add in the same kernel, with no temporary. */
int sotto_cuda_linear_acc_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                                sotto_cuda_stream stream, sotto_err *err);

/* Shape and format of an uploaded matrix; its float data when it is F32
 * (NULL otherwise). */
int sotto_cuda_wmat_rows(const sotto_cuda_wmat *w);
int sotto_cuda_wmat_cols(const sotto_cuda_wmat *w);
sotto_wfmt sotto_cuda_wmat_fmt(const sotto_cuda_wmat *w);
const float *sotto_cuda_wmat_f32(const sotto_cuda_wmat *w);

/* Decodes all of w into dst [rows][cols] (device floats, queued on stream):
 * the encoder-sized path decodes one layer into a scratch buffer and hands
 * it to cuBLAS. Same values as sotto_wmat_dequantize_rows. */
int sotto_cuda_wmat_dequant(const sotto_cuda_wmat *w, float *dst, sotto_cuda_stream stream, sotto_err *err);

/* The bf16 tensor-core path: w decoded to bf16 [rows][cols] (round to
 * nearest even, as include/half.h), the raw bf16 data of a BF16 matrix (NULL
 * otherwise), and n floats converted to bf16. Queued like the others. */
int sotto_cuda_wmat_dequant_bf16(const sotto_cuda_wmat *w, uint16_t *dst, sotto_cuda_stream stream,
                                 sotto_err *err);
const uint16_t *sotto_cuda_wmat_bf16(const sotto_cuda_wmat *w);
int sotto_cuda_f32_to_bf16(const float *x, uint16_t *y, size_t n, sotto_cuda_stream stream, sotto_err *err);

/* Small device-memory helpers for callers and tests. sotto_cuda_copy queues
 * the copy on stream and waits for the stream. */
void *sotto_cuda_malloc(size_t bytes, sotto_err *err);
void sotto_cuda_free(void *p);
int sotto_cuda_copy(void *dst, const void *src, size_t bytes, int to_device, sotto_cuda_stream stream,
                    sotto_err *err);

#ifdef __cplusplus
}
#endif

#endif
