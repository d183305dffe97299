/* quant.h - quantizers and number codecs of sotto's weight formats (layouts
 * in linear.h): bfloat16, Q8, NF4 (bitsandbytes, with optional double
 * quantization) and NVFP4 (E2M1 values, E4M3 block scales, FP32 global
 * scale, as compressed-tensors / llm-compressor store it).
 *
 * Quantizers work on row ranges so that a model can be quantized tensor by
 * tensor, block of rows by block of rows, while it streams in: the caller
 * owns every buffer. All functions are pure and thread-safe.
 * Rounding is to nearest, ties to even, unless stated otherwise.
 */
#ifndef SOTTO_QUANT_H
#define SOTTO_QUANT_H

#include "linear.h"

#include <stddef.h>
#include <stdint.h>

/* ---- scalar codecs -------------------------------------------------------- */

/* The 16 NF4 code values (bitsandbytes' table, exactly). */
extern const float sotto_nf4_code[16];
/* The 256 values of bitsandbytes' signed 8-bit dynamic map (double quant). */
extern const float sotto_dyn8_code[256];
/* E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} indexed by the low 3 bits. */
extern const float sotto_e2m1_mag[8];

/* NF4 code of a value already divided by its block absmax (in [-1, 1]),
 * with the decision thresholds of bitsandbytes' CUDA kernel (the midpoints
 * of neighbouring codes as float literals: 4 of the 15 are one ulp off the
 * float32 midpoints that its CPU path uses); a value exactly on a threshold
 * goes to the lower code. */
uint8_t sotto_nf4_encode(float x);

/* E2M1: nearest representable, ties to even mantissa, saturating at +-6;
 * -0.0 encodes as 0x8. NaN encodes as 0 (callers reject NaN first). */
uint8_t sotto_e2m1_encode(float x);
float sotto_e2m1_decode(uint8_t code); /* low 4 bits */

/* FP8 E4M3 (the "fn" variant: no infinities, max 448, 0x7f/0xff NaN):
 * nearest, ties to even, saturating at +-448; subnormals supported. */
uint8_t sotto_e4m3_encode(float x);
float sotto_e4m3_decode(uint8_t code);

/* ---- matrix quantizers ------------------------------------------------------ */

/* Quantizes rows [r0, r0 + nr) of a dense matrix (src points at row r0,
 * [nr][cols]) into the buffers of `w` (cast away const: the caller owns and
 * allocated them with sotto_wfmt_bytes sizes; data and scales at the offsets
 * of row r0). For NVFP4, w->global_scale must be set first with
 * sotto_nvfp4_global_scale(amax of the WHOLE tensor).
 * Returns 0, SOTTO_E_INVALID if cols is not a multiple of the block,
 * SOTTO_E_FORMAT if src holds NaN or Inf, or SOTTO_E_RANGE for F16 when a
 * value is too large for a half (|x| >= 65520). */
int sotto_quantize_rows(sotto_wmat *w, void *data, void *scales, const float *src, int r0,
                        int nr);

/* Options of the 4-bit quantizers (NF4, NVFP4; other formats ignore them). */
typedef struct sotto_quant_opts {
    int search;               /* 0: round to nearest, each block's scale from its absmax
                               * (bitsandbytes / compressed-tensors exactly); 1: per block,
                               * the candidate scale with the least squared error (absmax
                               * and smaller ones, which clip the largest weights; the
                               * absmax scale wins ties) */
    const float *importance;  /* [cols] weight of each input column in that error, e.g.
                               * E[x^2] of the layer's input on calibration audio; NULL:
                               * all 1 (plain weight error). Borrowed for the call. */
} sotto_quant_opts;

/* sotto_quantize_rows with options; o NULL or o->search 0 is exactly
 * sotto_quantize_rows. SOTTO_E_FORMAT also for a non-finite importance. */
int sotto_quantize_rows_opt(sotto_wmat *w, void *data, void *scales, const float *src, int r0,
                            int nr, const sotto_quant_opts *o);

/* Multiplier that makes the largest block scale land on E4M3's max:
 * amax / (6 * 448); 1 when amax is 0. */
float sotto_nvfp4_global_scale(float tensor_amax);

/* NF4 double quantization of n absmax values: offset = mean, then blocks of
 * 256 (absmax - offset) quantized to the dynamic 8-bit map with their own
 * absmax. codes[n], nested[ceil(n/256)]. */
void sotto_nf4_double_quant(const float *absmax, size_t n, uint8_t *codes, float *nested,
                            float *offset);

#endif
