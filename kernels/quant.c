/* quant.c - number codecs and quantizers of sotto's weight formats.
 *
 * Where the numbers come from (verified against the packages' own source and,
 * for the vectors in tests/data/quant_ref.txt, by running them; see
 * tests/ref/gen_quant_ref.py):
 *
 * NF4 (bitsandbytes 0.50.2):
 *  - code table: bitsandbytes/functional.py get_4bit_type("nf4") (the 16
 *    float literals below, identical to backends/utils.py _NF4_QUANT_TABLE).
 *  - decision rule: the CUDA kernel, csrc/cuda/blockwise_quantization.cu
 *    (formerly csrc/kernels.cu) dQuantizeNF4(x * (1.0f / absmax)): strict
 *    `x > threshold` tests against 15 float literals (below, copied from
 *    there). Those literals are the decimal midpoints of neighbouring codes;
 *    rounded to float32 (as nvcc and any C compiler do), thresholds 0, 8, 12
 *    and 14 land one ulp away from the float32 midpoints (c[i] + c[i+1]) / 2
 *    that bitsandbytes' CPU path uses (backends/default/ops.py quantize_4bit:
 *    torch.bucketize(A * (1/absmax), midpoints)). The two bitsandbytes paths
 *    thus disagree on inputs in those four one-ulp windows; we follow CUDA,
 *    which wrote the published checkpoints. A value exactly on a threshold
 *    goes to the lower code on both paths.
 *  - packing: element 2i in the HIGH nibble (default/ops.py:
 *    `(q8[::2] << 4) | q8[1::2]`; CUDA: `dQuantizeNF4(v[2j]) << 4`).
 *  - all-zero block: CUDA computes 0 * (1/0) = NaN, which dQuantizeNF4 maps
 *    to code 0 (-1.0), and so do we; the CPU path clamps absmax to 1e-38 and
 *    writes code 7 (0.0). With absmax 0 both decode to (-)0.
 *  - double quantization (functional.py quantize_4bit, compress_statistics):
 *    offset = absmax.mean(); quantize_blockwise(absmax - offset, blocksize=256)
 *    with create_dynamic_map(signed=True) (the 256 values below, dumped from
 *    bitsandbytes itself). Rounding to the map follows the CUDA kernel
 *    (kQuantizeBlockwise<General8bit> -> dQuantize<0>: x * (1/absmax), binary
 *    search, midpoint test); it picks the nearest map value and differs from
 *    bitsandbytes' pure-torch path only for values exactly on a midpoint.
 *    bitsandbytes' native CPU kernel (0.50.x, csrc/cpu_ops.cpp
 *    quantize_cpu_impl) instead rounds through a 65536-bin lookup table and
 *    disagrees with CUDA on ~0.2% of codes: we follow CUDA, which wrote the
 *    published checkpoints.
 *
 * NVFP4 (compressed-tensors 0.20.1, as llm-compressor calls it):
 *  - global scale: quantization/utils/helpers.py generate_gparam:
 *    weight_global_scale = 448 * 6 / amax (stored), the reciprocal of our
 *    multiplier w->global_scale.
 *  - block scale: helpers.py calculate_qparams: (block_amax / 6) *
 *    weight_global_scale, clamped to +-448 and cast to float8_e4m3fn (round
 *    to nearest even); a scale of 0 becomes 0.125 (_get_dtype_eps). (For a
 *    bf16 model llm-compressor's observer computes block_amax / 6 in bf16;
 *    we quantize from float32 and compute it in float32.)
 *  - values: lifecycle/forward_helpers.py _quantize: x / (scale /
 *    weight_global_scale), clamped to +-6, then fp4_utils.py cast_to_fp4
 *    (ties to even: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
 *  - packing: compressors/nvfp4/helpers.py pack_fp4_to_uint8: element 2i in
 *    the LOW nibble; sign = torch.signbit (so -0.1 -> 0x8).
 */
#include "quant.h"

#include "half.h"
#include "linear_internal.h"
#include "sotto_err.h"
#include "tile_check.h"

#include <math.h>
#include <string.h>

const float sotto_nf4_code[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

/* bitsandbytes create_dynamic_map(signed=True, max_exponent_bits=7,
 * total_bits=8), exactly (dumped from bitsandbytes 0.50.2 / torch). */
const float sotto_dyn8_code[256] = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f,
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1p+0f,
};

const float sotto_e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/* All 256 FP8 E4M3FN values (torch.float8_e4m3fn), 0x7f and 0xff NaN. */
const float sotto_e4m3_table[256] = {
    0.0f, 0x1p-9f, 0x1p-8f, 0x1.8p-8f, 0x1p-7f, 0x1.4p-7f, 0x1.8p-7f, 0x1.cp-7f,
    0x1p-6f, 0x1.2p-6f, 0x1.4p-6f, 0x1.6p-6f, 0x1.8p-6f, 0x1.ap-6f, 0x1.cp-6f, 0x1.ep-6f,
    0x1p-5f, 0x1.2p-5f, 0x1.4p-5f, 0x1.6p-5f, 0x1.8p-5f, 0x1.ap-5f, 0x1.cp-5f, 0x1.ep-5f,
    0x1p-4f, 0x1.2p-4f, 0x1.4p-4f, 0x1.6p-4f, 0x1.8p-4f, 0x1.ap-4f, 0x1.cp-4f, 0x1.ep-4f,
    0x1p-3f, 0x1.2p-3f, 0x1.4p-3f, 0x1.6p-3f, 0x1.8p-3f, 0x1.ap-3f, 0x1.cp-3f, 0x1.ep-3f,
    0x1p-2f, 0x1.2p-2f, 0x1.4p-2f, 0x1.6p-2f, 0x1.8p-2f, 0x1.ap-2f, 0x1.cp-2f, 0x1.ep-2f,
    0x1p-1f, 0x1.2p-1f, 0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f, 0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f,
    0x1p+0f, 0x1.2p+0f, 0x1.4p+0f, 0x1.6p+0f, 0x1.8p+0f, 0x1.ap+0f, 0x1.cp+0f, 0x1.ep+0f,
    0x1p+1f, 0x1.2p+1f, 0x1.4p+1f, 0x1.6p+1f, 0x1.8p+1f, 0x1.ap+1f, 0x1.cp+1f, 0x1.ep+1f,
    0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f, 0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
    0x1p+3f, 0x1.2p+3f, 0x1.4p+3f, 0x1.6p+3f, 0x1.8p+3f, 0x1.ap+3f, 0x1.cp+3f, 0x1.ep+3f,
    0x1p+4f, 0x1.2p+4f, 0x1.4p+4f, 0x1.6p+4f, 0x1.8p+4f, 0x1.ap+4f, 0x1.cp+4f, 0x1.ep+4f,
    0x1p+5f, 0x1.2p+5f, 0x1.4p+5f, 0x1.6p+5f, 0x1.8p+5f, 0x1.ap+5f, 0x1.cp+5f, 0x1.ep+5f,
    0x1p+6f, 0x1.2p+6f, 0x1.4p+6f, 0x1.6p+6f, 0x1.8p+6f, 0x1.ap+6f, 0x1.cp+6f, 0x1.ep+6f,
    0x1p+7f, 0x1.2p+7f, 0x1.4p+7f, 0x1.6p+7f, 0x1.8p+7f, 0x1.ap+7f, 0x1.cp+7f, 0x1.ep+7f,
    0x1p+8f, 0x1.2p+8f, 0x1.4p+8f, 0x1.6p+8f, 0x1.8p+8f, 0x1.ap+8f, 0x1.cp+8f, NAN,
    -0.0f, -0x1p-9f, -0x1p-8f, -0x1.8p-8f, -0x1p-7f, -0x1.4p-7f, -0x1.8p-7f, -0x1.cp-7f,
    -0x1p-6f, -0x1.2p-6f, -0x1.4p-6f, -0x1.6p-6f, -0x1.8p-6f, -0x1.ap-6f, -0x1.cp-6f, -0x1.ep-6f,
    -0x1p-5f, -0x1.2p-5f, -0x1.4p-5f, -0x1.6p-5f, -0x1.8p-5f, -0x1.ap-5f, -0x1.cp-5f, -0x1.ep-5f,
    -0x1p-4f, -0x1.2p-4f, -0x1.4p-4f, -0x1.6p-4f, -0x1.8p-4f, -0x1.ap-4f, -0x1.cp-4f, -0x1.ep-4f,
    -0x1p-3f, -0x1.2p-3f, -0x1.4p-3f, -0x1.6p-3f, -0x1.8p-3f, -0x1.ap-3f, -0x1.cp-3f, -0x1.ep-3f,
    -0x1p-2f, -0x1.2p-2f, -0x1.4p-2f, -0x1.6p-2f, -0x1.8p-2f, -0x1.ap-2f, -0x1.cp-2f, -0x1.ep-2f,
    -0x1p-1f, -0x1.2p-1f, -0x1.4p-1f, -0x1.6p-1f, -0x1.8p-1f, -0x1.ap-1f, -0x1.cp-1f, -0x1.ep-1f,
    -0x1p+0f, -0x1.2p+0f, -0x1.4p+0f, -0x1.6p+0f, -0x1.8p+0f, -0x1.ap+0f, -0x1.cp+0f, -0x1.ep+0f,
    -0x1p+1f, -0x1.2p+1f, -0x1.4p+1f, -0x1.6p+1f, -0x1.8p+1f, -0x1.ap+1f, -0x1.cp+1f, -0x1.ep+1f,
    -0x1p+2f, -0x1.2p+2f, -0x1.4p+2f, -0x1.6p+2f, -0x1.8p+2f, -0x1.ap+2f, -0x1.cp+2f, -0x1.ep+2f,
    -0x1p+3f, -0x1.2p+3f, -0x1.4p+3f, -0x1.6p+3f, -0x1.8p+3f, -0x1.ap+3f, -0x1.cp+3f, -0x1.ep+3f,
    -0x1p+4f, -0x1.2p+4f, -0x1.4p+4f, -0x1.6p+4f, -0x1.8p+4f, -0x1.ap+4f, -0x1.cp+4f, -0x1.ep+4f,
    -0x1p+5f, -0x1.2p+5f, -0x1.4p+5f, -0x1.6p+5f, -0x1.8p+5f, -0x1.ap+5f, -0x1.cp+5f, -0x1.ep+5f,
    -0x1p+6f, -0x1.2p+6f, -0x1.4p+6f, -0x1.6p+6f, -0x1.8p+6f, -0x1.ap+6f, -0x1.cp+6f, -0x1.ep+6f,
    -0x1p+7f, -0x1.2p+7f, -0x1.4p+7f, -0x1.6p+7f, -0x1.8p+7f, -0x1.ap+7f, -0x1.cp+7f, -0x1.ep+7f,
    -0x1p+8f, -0x1.2p+8f, -0x1.4p+8f, -0x1.6p+8f, -0x1.8p+8f, -0x1.ap+8f, -0x1.cp+8f, NAN,
};

/* Signed E2M1 values by 4-bit code. */
const float sotto_e2m1_table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* ---- scalar codecs ---------------------------------------------------------- */

float sotto_e2m1_decode(uint8_t code) { return sotto_e2m1_table[code & 15]; }

float sotto_e4m3_decode(uint8_t code) { return sotto_e4m3_table[code]; }

/* bitsandbytes' dQuantize<0> (CUDA): nearest value of a sorted 256-entry map,
 * with its tie behaviour. */
static uint8_t dyn8_quantize(const float *code, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float val = code[pivot];
    for (int i = 64; i > 0; i >>= 1) {
        if (x > val) {
            lower_pivot = pivot;
            lower = val;
            pivot += i;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= i;
        }
        val = code[pivot];
    }
    if (upper_pivot == 255) upper = code[upper_pivot];
    if (lower_pivot == 0) lower = code[lower_pivot];
    if (x > val) {
        float midpoint = (upper + val) * 0.5f;
        return (uint8_t)(x > midpoint ? upper_pivot : pivot);
    }
    float midpoint = (lower + val) * 0.5f;
    return (uint8_t)(x < midpoint ? lower_pivot : pivot);
}

/* ---- matrix quantizers --------------------------------------------------------
 * The row quantizers themselves are tiles (quant_tiles.c); here, the checks of
 * the arguments, and in AddressSanitizer builds of the memory contract: the
 * rows of src (and importance) read, the rows of data and scales written. */

/* The bytes the tiles read and write for rows [r0, r0 + nr): src's rows, and
 * data's and scales' in w's format (tile_check.h: addressable, or ASan's
 * report). The quantizers write plain block scales, never NF4's double
 * quantization. */
static void check_quant_rows(const sotto_wmat *w, const void *data, const void *scales,
                             const float *src, int r0, int nr) {
    sotto_wmat t = *w;
    t.data = data, t.scales = scales, t.nf4_dq = NULL;
    sotto__tile_region(src, sizeof(float) * (size_t)nr * (size_t)w->cols);
    sotto__tile_wrows(&t, r0, nr);
}

/* ---- scale search ------------------------------------------------------------
 * Round-to-nearest takes each block's scale from its absmax. The search
 * tries smaller scales too (clipping the largest weights so that the rest get
 * finer steps) and keeps the one with the least squared error, each column's
 * error weighted by its importance (E[x^2] of the layer's input). The
 * absmax scale is always a candidate and wins ties, so the search never does
 * worse than round-to-nearest on its own measure. */

int sotto_quantize_rows_opt(sotto_wmat *w, void *data, void *scales, const float *src, int r0,
                            int nr, const sotto_quant_opts *o) {
    int four = w->fmt == SOTTO_WFMT_NF4 || w->fmt == SOTTO_WFMT_NVFP4;
    if (!o || !o->search || !four) return sotto_quantize_rows(w, data, scales, src, r0, nr);
    const int cols = w->cols;
    const int block = sotto_wfmt_block(w->fmt);
    if (block <= 0 || cols <= 0 || cols % block || r0 < 0 || nr < 0 || r0 + nr > w->rows)
        return SOTTO_E_INVALID;
    const size_t base = (size_t)r0 * (size_t)cols, n = (size_t)nr * (size_t)cols;
    check_quant_rows(w, data, scales, src, r0, nr);
    if (o->importance) sotto__tile_region(o->importance, (size_t)cols * sizeof(float));
    if (!sotto__all_finite(src, n)) return SOTTO_E_FORMAT;
    if (o->importance && !sotto__all_finite(o->importance, (size_t)cols)) return SOTTO_E_FORMAT;
    if (w->fmt == SOTTO_WFMT_NF4) {
        for (int r = 0; r < nr; r++)
            sotto__quant_nf4_row_search((uint8_t *)data + (base + (size_t)r * cols) / 2,
                                        (float *)scales + (base + (size_t)r * cols) / 64,
                                        src + (size_t)r * cols, o->importance, cols);
        return 0;
    }
    float g = w->global_scale;
    if (!(g > 0.0f) || isinf(g)) return SOTTO_E_INVALID;
    for (int r = 0; r < nr; r++)
        sotto__quant_nvfp4_row_search((uint8_t *)data + (base + (size_t)r * cols) / 2,
                                      (uint8_t *)scales + (base + (size_t)r * cols) / 16,
                                      src + (size_t)r * cols, o->importance, cols, 1.0f / g);
    return 0;
}

int sotto_quantize_rows(sotto_wmat *w, void *data, void *scales, const float *src, int r0,
                        int nr) {
    const int cols = w->cols;
    const int block = sotto_wfmt_block(w->fmt);
    if (block <= 0 || cols <= 0 || cols % block || r0 < 0 || nr < 0 || r0 + nr > w->rows)
        return SOTTO_E_INVALID;
    const size_t base = (size_t)r0 * (size_t)cols; /* first element of row r0 */
    check_quant_rows(w, data, scales, src, r0, nr);
    if (!sotto__all_finite(src, (size_t)nr * (size_t)cols)) return SOTTO_E_FORMAT;
    switch (w->fmt) {
    case SOTTO_WFMT_F32:
        memcpy((float *)data + base, src, sizeof(float) * (size_t)nr * (size_t)cols);
        return 0;
    case SOTTO_WFMT_F16:
        return sotto__quant_f16_rows((uint16_t *)data + base, src, (size_t)nr * (size_t)cols)
                   ? SOTTO_E_RANGE
                   : 0;
    case SOTTO_WFMT_BF16:
        sotto__quant_bf16_rows((uint16_t *)data + base, src, (size_t)nr * (size_t)cols);
        return 0;
    case SOTTO_WFMT_Q8:
        for (int r = 0; r < nr; r++)
            sotto__quant_q8_row((int8_t *)data + base + (size_t)r * cols,
                                (float *)scales + (base + (size_t)r * cols) / 32,
                                src + (size_t)r * cols, cols);
        return 0;
    case SOTTO_WFMT_NF4:
        for (int r = 0; r < nr; r++)
            sotto__quant_nf4_row((uint8_t *)data + (base + (size_t)r * cols) / 2,
                                 (float *)scales + (base + (size_t)r * cols) / 64,
                                 src + (size_t)r * cols, cols);
        return 0;
    case SOTTO_WFMT_NVFP4: {
        float g = w->global_scale;
        if (!(g > 0.0f) || isinf(g)) return SOTTO_E_INVALID;
        float gp = 1.0f / g; /* compressed-tensors' weight_global_scale */
        for (int r = 0; r < nr; r++)
            sotto__quant_nvfp4_row((uint8_t *)data + (base + (size_t)r * cols) / 2,
                                   (uint8_t *)scales + (base + (size_t)r * cols) / 16,
                                   src + (size_t)r * cols, cols, gp);
        return 0;
    }
    default: return SOTTO_E_INVALID;
    }
}

float sotto_nvfp4_global_scale(float tensor_amax) {
    if (!(tensor_amax > 0.0f) || isinf(tensor_amax)) return 1.0f;
    float gp = 2688.0f / tensor_amax; /* generate_gparam: 448 * 6 / amax */
    if (!(gp > 0.0f) || isinf(gp)) return 1.0f; /* nan_to_num(..., 1.0) */
    return 1.0f / gp;
}

void sotto_nf4_double_quant(const float *absmax, size_t n, uint8_t *codes, float *nested,
                            float *offset) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += absmax[i];
    float off = n ? (float)(sum / (double)n) : 0.0f;
    *offset = off;
    for (size_t b0 = 0; b0 < n; b0 += 256) {
        size_t bn = n - b0 < 256 ? n - b0 : 256;
        float amax = 0.0f;
        for (size_t i = 0; i < bn; i++) amax = fmaxf(amax, fabsf(absmax[b0 + i] - off));
        nested[b0 / 256] = amax;
        /* all equal to the offset: CUDA's 0 * (1/0) = NaN goes to code 0, which
         * decodes to the offset exactly (map value * 0 + offset), as any would */
        float inv = 1.0f / amax;
        for (size_t i = 0; i < bn; i++) {
            float v = absmax[b0 + i] - off;
            codes[b0 + i] = amax > 0.0f ? dyn8_quantize(sotto_dyn8_code, v * inv) : 0;
        }
    }
}
