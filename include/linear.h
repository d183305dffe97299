/* linear.h - weight matrices in several storage formats and y = x W^T + b.
 *
 * A sotto_wmat describes a [rows x cols] weight matrix (rows = output
 * features, cols = input features, PyTorch nn.Linear layout). It does not
 * own its memory: the model that built it does.
 *
 * Storage per format (all row-major; blocks run along cols, i.e. along the
 * input dimension, and never straddle rows, so cols must be a multiple of
 * the block size):
 *
 *   F32    data: float[rows][cols]
 *   BF16   data: uint16[rows][cols] (bfloat16 bits)
 *   F16    data: uint16[rows][cols] (IEEE binary16 bits). Exact for the
 *          float16 checkpoints Whisper ships as (CTranslate2, most Hugging
 *          Face exports): half the bytes of F32 and the same values, so a
 *          decoder step, bound by reading its weights, reads half as much.
 *   Q8     data: int8[rows][cols]; scales: float[rows][cols/32];
 *          value = q * scale (symmetric, scale = absmax / 127)
 *   NF4    data: uint8[rows*cols/2], bitsandbytes order: element 2i in the
 *          HIGH nibble of byte i, element 2i+1 in the low nibble;
 *          scales: float absmax[rows*cols/64]; value = NF4_CODE[q] * absmax.
 *          With double quantization (nf4_dq non-NULL), the absmax values
 *          are stored as uint8 codes of bitsandbytes' 8-bit dynamic map in
 *          blocks of 256 absmax values with one float scale each and one
 *          float offset: absmax = DYN8[code] * nested_absmax[b / 256] + offset.
 *   NVFP4  data: uint8[rows][cols/2], compressed-tensors order: element 2i
 *          in the LOW nibble, 2i+1 in the high nibble, each an E2M1 code
 *          (sign bit 3, magnitude index into {0,.5,1,1.5,2,3,4,6});
 *          scales: uint8[rows][cols/16] FP8 E4M3 codes;
 *          value = E2M1[q] * E4M3[scale] * global_scale.
 *          (global_scale is the multiplier; compressed-tensors stores its
 *          reciprocal as weight_global_scale.)
 */
#ifndef SOTTO_LINEAR_H
#define SOTTO_LINEAR_H

#include <stddef.h>
#include <stdint.h>

typedef enum sotto_wfmt {
    SOTTO_WFMT_F32 = 0,
    SOTTO_WFMT_BF16,
    SOTTO_WFMT_Q8,
    SOTTO_WFMT_NF4,
    SOTTO_WFMT_NVFP4,
    SOTTO_WFMT_F16, /* added last, so the others keep their values */
    SOTTO_WFMT_COUNT
} sotto_wfmt;

/* Double-quantized NF4 absmax (see above). */
typedef struct sotto_nf4_dq {
    const uint8_t *codes;        /* [n_blocks] */
    const float *nested_absmax;  /* [ceil(n_blocks / 256)] */
    float offset;
} sotto_nf4_dq;

typedef struct sotto_wmat {
    sotto_wfmt fmt;
    int32_t rows; /* output features */
    int32_t cols; /* input features */
    const void *data;
    const void *scales;         /* Q8, NF4 (absmax, unless nf4_dq), NVFP4 */
    const sotto_nf4_dq *nf4_dq; /* NF4 double quantization, or NULL */
    float global_scale;         /* NVFP4 */
} sotto_wmat;

/* Name of a format ("f32", "f16", "bf16", "q8", "nf4", "nvfp4"); parse the reverse. */
const char *sotto_wfmt_name(sotto_wfmt fmt);
int sotto_wfmt_parse(const char *name, sotto_wfmt *out); /* 0 or SOTTO_E_INVALID */

/* Block size along cols (1 for f32/f16/bf16, 32 q8, 64 nf4, 16 nvfp4). */
int sotto_wfmt_block(sotto_wfmt fmt);

/* Bytes used by a rows x cols matrix in format fmt (data + scales, without
 * double quantization). 0 if cols is not a multiple of the block. */
size_t sotto_wfmt_bytes(sotto_wfmt fmt, int32_t rows, int32_t cols);

/* Bytes actually held by w (data + scales + double-quantization tables). */
size_t sotto_wmat_bytes(const sotto_wmat *w);

/* y[n][rows] = x[n][cols] * W^T + bias (bias may be NULL). x and y must not
 * overlap. Uses the thread pool; safe to call from several threads at once
 * on the same W. */
void sotto_linear(const sotto_wmat *w, const float *bias, const float *x, int n, float *y);

/* y[n][rows] += x[n][cols] * W^T (+ bias): accumulate into y (residual add). */
void sotto_linear_acc(const sotto_wmat *w, const float *bias, const float *x, int n, float *y);

/* 1 when sotto_linear(w, ..., n) rounds x to bf16 before the products (bf16
 * weights, more than SOTTO_SKINNY_MAX_N rows, a CPU with AVX512-BF16 and
 * SOTTO_BF16_GEMM not "0": kernels/gemm_bf16.c); otherwise x is used in fp32. */
int sotto_linear_rounds_x_to_bf16(const sotto_wmat *w, int n);

/* 1 when sotto_linear(w, ..., n) quantizes x to int8 per block of 32 before
 * the products (q8 weights, more than SOTTO_SKINNY_MAX_N rows, a CPU with
 * AVX512-VNNI and SOTTO_Q8_GEMM not "0": kernels/gemm_q8.c); otherwise x is
 * used in fp32. */
int sotto_linear_quantizes_x_to_q8(const sotto_wmat *w, int n);

/* 1 when q8 weights run on this CPU's int8 dot product (AVX512-VNNI, and
 * SOTTO_Q8_GEMM not "0"): then q8 is the fastest variant here (docs/PERF.md). */
int sotto_linear_q8_fast(void);

/* An observer sees the input of every sotto_linear / sotto_linear_acc call
 * (x: [n][w->cols]) before it runs; calibration (include/calib.h) records
 * activation statistics with it. One process-wide observer, NULL to remove;
 * set it only while no other thread runs linear layers. */
typedef void (*sotto_linear_observer)(void *ctx, const sotto_wmat *w, const float *x, int n);
void sotto_linear_set_observer(sotto_linear_observer fn, void *ctx);

/* Dequantizes rows [r0, r0 + nr) of W into dst[nr][cols]. */
void sotto_wmat_dequantize_rows(const sotto_wmat *w, int r0, int nr, float *dst);

#endif
