#!/usr/bin/env python3
"""Writes tests/data/quant_ref.txt: reference vectors for sotto's NF4 and
NVFP4 codecs, produced by running the libraries whose checkpoints sotto loads.

CI does NOT run this (it only reads the data file). To regenerate, in a
throwaway virtual environment (PyPI's torch wheel works on a CPU-only
machine):

    python3 -m venv /tmp/qref && . /tmp/qref/bin/activate
    pip install torch==2.15.0 bitsandbytes==0.50.2 compressed-tensors==0.20.1
    python tests/ref/gen_quant_ref.py            # from the repository root

Versions used for the committed file: torch 2.15.0, bitsandbytes 0.50.2,
compressed-tensors 0.20.1 (the script records them in the file header).

What comes from where:
  nf4      bitsandbytes.functional.quantize_4bit / dequantize_4bit, CPU
           (bitsandbytes/backends/default/ops.py: bucketize on float32
           midpoints of x * (1/absmax)), and `packed_cuda`: the same bytes
           computed the way the CUDA kernel dQuantizeNF4 decides, whose
           float literals differ from the float32 midpoints by one ulp for 4
           of the 15 thresholds (see CUDA_NF4_THRESHOLDS below).
  nf4dq    double quantization of the absmax values of a realistic weight:
           offset = absmax.mean(), then bitsandbytes' quantize_blockwise
           (blocksize 256, create_dynamic_map()) through its pure-torch
           kernel (backends/default/ops.py), which decides like the CUDA
           kernel dQuantize except for values exactly on a midpoint (the
           script checks that against an emulation of the CUDA kernel).
           bitsandbytes 0.50's native CPU kernel rounds through a 65536-bin
           table instead and disagrees with CUDA on some codes, so it is not
           used. absmax_dq = dequantize_blockwise(...) + offset.
  nvfp4    compressed-tensors: generate_gparam (global scale), calculate_qparams
           (E4M3 block scales), NVFP4PackedCompressor.compress (packing) and
           .decompress (dequantized weight, float32).
  e4m3     torch .to(torch.float8_e4m3fn) after compressed-tensors' clamp to
           +-448 (round_to_quantized_type_dtype).
  e2m1     compressed-tensors cast_to_fp4 + pack_fp4_to_uint8 (CPU path).

File format (whitespace separated tokens; '#' starts a comment line):
  case KIND ROWS COLS
  NAME COUNT v1 v2 ...     f32 values as 8 hex digits of their bits,
                           bytes as 2 hex digits
  end
"""
import os
import struct
import sys

import numpy as np
import torch

import bitsandbytes
import bitsandbytes.functional as F
import compressed_tensors
from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8
from compressed_tensors.quantization import QuantizationScheme
from compressed_tensors.quantization.quant_scheme import NVFP4A16
from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4
from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant_ref.txt")


def f32_hex(t):
    a = np.ascontiguousarray(t.detach().float().reshape(-1).numpy(), dtype=np.float32)
    return ["%08x" % v for v in a.view(np.uint32)]


def u8_hex(t):
    a = t.detach().reshape(-1).contiguous()
    if a.dtype != torch.uint8:
        a = a.view(torch.uint8)
    return ["%02x" % v for v in a.numpy()]


class Writer:
    def __init__(self, f):
        self.f = f

    def case(self, kind, rows, cols):
        self.f.write("case %s %d %d\n" % (kind, rows, cols))

    def arr(self, name, toks):
        self.f.write("%s %d %s\n" % (name, len(toks), " ".join(toks)))

    def end(self):
        self.f.write("end\n")


# ---- NF4 -------------------------------------------------------------------------------


# The thresholds of the CUDA kernel dQuantizeNF4 (csrc/cuda/blockwise_quantization.cu),
# as written there. nvcc rounds each `...f` literal straight to float32, which for
# thresholds 0, 8, 12 and 14 lands one ulp away from the float32 midpoint that the
# CPU path (bucketize) uses: the two bitsandbytes paths disagree on inputs in those
# one-ulp windows. sotto follows CUDA, which wrote the published checkpoints.
CUDA_NF4_THRESHOLDS = [
    "-0.8480964004993439", "-0.6106329262256622", "-0.4599952697753906", "-0.33967943489551544",
    "-0.23460740596055984", "-0.13791173323988914", "-0.045525018125772476", "0.03979014977812767",
    "0.1202552504837513", "0.2035212516784668", "0.2920137718319893", "0.3893125355243683",
    "0.5016634166240692", "0.6427869200706482", "0.8614784181118011"]


def decimal_to_f32(s):
    """Correctly rounded decimal -> float32 (no double rounding through float64)."""
    from fractions import Fraction
    fr = Fraction(s)
    x = np.float32(float(fr))
    cands = [np.nextafter(x, np.float32(-2)), x, np.nextafter(x, np.float32(2))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - fr), int(v.view(np.uint32)) & 1))


def cuda_nf4_pack(W, absmax):
    """dQuantizeNF4(x * (1.0f / absmax)) with `x > t` tests, high nibble first."""
    t = np.array([decimal_to_f32(s) for s in CUDA_NF4_THRESHOLDS], dtype=np.float32)
    x = W.reshape(-1, 64).numpy().astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        inv = (np.float32(1.0) / absmax.numpy().astype(np.float32)).reshape(-1, 1)
        xn = (x * inv).astype(np.float32).reshape(-1)
    q = (xn[:, None] > t[None, :]).sum(axis=1).astype(np.uint8)  # NaN -> 0, like CUDA
    return torch.from_numpy((q[0::2] << 4) | q[1::2])


def nf4_case(w, W):
    rows, cols = W.shape
    packed, st = F.quantize_4bit(W, blocksize=64, quant_type="nf4", compress_statistics=False)
    deq = F.dequantize_4bit(packed, st)
    w.case("nf4", rows, cols)
    w.arr("input", f32_hex(W))
    w.arr("packed", u8_hex(packed))
    w.arr("packed_cuda", u8_hex(cuda_nf4_pack(W, st.absmax)))
    w.arr("absmax", f32_hex(st.absmax))
    w.arr("dequant", f32_hex(deq))
    w.end()


def nf4_special():
    """Blocks that probe the decision rule: values exactly on the midpoints
    (absmax 1, so x * (1/absmax) == x), just above them, an all-zero block,
    and a block with absmax 3 and negative extremes."""
    code = F.get_4bit_type("nf4", device="cpu")
    mids = ((code[:-1] + code[1:]) / 2).float()
    b0 = torch.zeros(64)
    b0[0] = 1.0
    b0[1] = -1.0
    b0[2:17] = mids
    b0[17:32] = torch.from_numpy(np.nextafter(mids.numpy(), np.float32(2)))
    b0[32:47] = torch.from_numpy(np.nextafter(mids.numpy(), np.float32(-2)))
    b0[47:63] = code
    b1 = torch.zeros(64)  # all zero
    b2 = torch.linspace(-3, 2.5, 64)
    b3 = -b0
    return torch.stack([torch.cat([b0, b1]), torch.cat([b2, b3])])


# ---- NF4 double quantization -------------------------------------------------------------


def cuda_dquant(code, x):
    """csrc/kernels.cu dQuantize<0> (bitsandbytes), in float32."""
    f32 = np.float32
    x = f32(x)
    pivot, up, lo = 127, 255, 0
    lower, upper = f32(-1.0), f32(1.0)
    val = code[pivot]
    i = 64
    while i > 0:
        if x > val:
            lo, lower, pivot = pivot, val, pivot + i
        else:
            up, upper, pivot = pivot, val, pivot - i
        val = code[pivot]
        i >>= 1
    if up == 255:
        upper = code[up]
    if lo == 0:
        lower = code[lo]
    if x > val:
        return up if x > f32((upper + val) * f32(0.5)) else pivot
    return lo if x < f32((lower + val) * f32(0.5)) else pivot


def nf4dq_case(w, W):
    rows, cols = W.shape
    _, st = F.quantize_4bit(W, blocksize=64, quant_type="nf4", compress_statistics=False)
    absmax = st.absmax.float()
    offset = absmax.mean()
    exact = np.float32(np.mean(absmax.numpy().astype(np.float64)))
    assert offset.item() == float(exact), "torch's mean is not the correctly rounded mean here"
    dyn = F.create_dynamic_map()
    ks = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    codes, nested = torch.ops.bitsandbytes.quantize_blockwise.default.redispatch(
        ks, absmax - offset, dyn, 256)
    # the pure-torch kernel must agree with the CUDA kernel (no ties in this data)
    x = (absmax - offset).numpy()
    cn = dyn.numpy()
    for b in range(len(x)):
        inv = np.float32(1.0) / nested[b // 256].numpy()
        assert cuda_dquant(cn, np.float32(x[b] * inv)) == int(codes[b]), b
    absmax_dq = F.dequantize_blockwise(codes, absmax=nested, code=dyn, blocksize=256) + offset
    w.case("nf4dq", rows, cols)
    w.arr("absmax", f32_hex(absmax))
    w.arr("offset", f32_hex(offset.reshape(1)))
    w.arr("codes", u8_hex(codes))
    w.arr("nested", f32_hex(nested))
    w.arr("absmax_dq", f32_hex(absmax_dq))
    w.end()


# ---- NVFP4 -------------------------------------------------------------------------------


def nvfp4_case(w, W):
    rows, cols = W.shape
    args = NVFP4A16["weights"]
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    gparam = generate_gparam(W.min(), W.max())
    g = W.reshape(rows, cols // 16, 16)
    scale, _ = calculate_qparams(g.amin(-1), g.amax(-1), args, global_scale=gparam)
    sd = {"weight": W, "weight_scale": scale, "weight_global_scale": gparam}
    comp = NVFP4PackedCompressor.compress(sd, scheme)
    dec = NVFP4PackedCompressor.decompress(dict(comp), scheme)
    # decompress works in the unpacked dtype (bf16 by default); redo the
    # float32 dequantization with compressed-tensors' own helpers
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    un = unpack_fp4_from_uint8(comp["weight_packed"], rows, cols, dtype=torch.float32)
    deq = dequantize(x_q=un, scale=comp["weight_scale"].to(torch.float32), args=args,
                     global_scale=comp["weight_global_scale"], dtype=torch.float32)
    assert torch.equal(deq.to(torch.bfloat16), dec["weight"].to(torch.bfloat16))
    w.case("nvfp4", rows, cols)
    w.arr("input", f32_hex(W))
    w.arr("global_scale", f32_hex(comp["weight_global_scale"].reshape(1)))
    w.arr("scales", u8_hex(comp["weight_scale"]))
    w.arr("packed", u8_hex(comp["weight_packed"]))
    w.arr("dequant", f32_hex(deq))
    w.end()


def nvfp4_special():
    """Rows whose block scales hit E4M3 rounding, zero blocks (scale -> eps
    0.125), exact E2M1 ties, and the tensor amax."""
    rows = []
    r = torch.zeros(64)
    r[:16] = torch.tensor([6, 5, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25, -6, -5, -3.5, -2.5, -1.75,
                           -1.25, -0.75, -0.25])
    r[16:32] = 0.0  # zero block
    r[32:48] = torch.linspace(-0.001, 0.0007, 16)  # tiny block
    r[48:64] = torch.linspace(-7, 9, 16)
    rows.append(r)
    rows.append(torch.linspace(-1, 1, 64) * 0.37)
    return torch.stack(rows)


# ---- codecs -----------------------------------------------------------------------------


def e4m3_case(w):
    gen = torch.Generator().manual_seed(7)
    mag = torch.exp2(torch.rand(2000, generator=gen) * 22 - 12)  # 2^-12 .. 2^10
    sign = torch.where(torch.rand(2000, generator=gen) < 0.5, -1.0, 1.0)
    x = (mag * sign).float()
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    fin = codes[torch.isfinite(codes)]
    s = torch.sort(fin.unique()).values
    ties = ((s[:-1] + s[1:]) / 2).float()  # exact midpoints: ties to even
    x = torch.cat([x, ties, -ties, fin, torch.tensor([448.0, 460.0, 464.0, 500.0, 1e9, -1e9,
                                                      2.0**-10, 2.0**-11, 3 * 2.0**-10])])
    xc = torch.clamp(x, -448.0, 448.0)  # compressed-tensors clamps before the cast
    q = xc.to(torch.float8_e4m3fn)
    w.case("e4m3", 1, x.numel())
    w.arr("input", f32_hex(x))
    w.arr("codes", u8_hex(q))
    w.end()


def e2m1_case(w):
    gen = torch.Generator().manual_seed(9)
    x = (torch.rand(1000, generator=gen) * 14 - 7).float()
    t = torch.tensor([0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                      0.2499, 0.2501, 0.7499, 0.7501, 4.99, 5.01, 6.5, 100.0])
    x = torch.cat([x, t, -t[1:], torch.tensor([-0.1])])
    if x.numel() % 2:
        x = torch.cat([x, torch.tensor([0.3])])
    xc = torch.clamp(x, -6.0, 6.0)
    packed = pack_fp4_to_uint8(cast_to_fp4(xc.clone()).reshape(1, -1))
    w.case("e2m1", 1, x.numel())
    w.arr("input", f32_hex(x))
    w.arr("packed", u8_hex(packed))
    w.end()


def main():
    torch.manual_seed(1234)
    with open(OUT, "w") as f:
        f.write("# sotto quantization reference vectors; generated by tests/ref/gen_quant_ref.py\n")
        f.write("# torch %s, bitsandbytes %s, compressed-tensors %s, python %s\n" %
                (torch.__version__, bitsandbytes.__version__, compressed_tensors.__version__,
                 sys.version.split()[0]))
        w = Writer(f)
        nf4_case(w, torch.randn(8, 256) * 0.05)
        nf4_case(w, nf4_special())
        nf4_case(w, torch.randn(3, 64) * torch.tensor([[1e-3], [1.0], [40.0]]))
        nf4dq_case(w, torch.randn(4, 4800) * 0.02 * torch.linspace(0.5, 2, 4800))
        nvfp4_case(w, torch.randn(8, 128) * 0.05)
        nvfp4_case(w, nvfp4_special())
        nvfp4_case(w, torch.randn(5, 48) * torch.tensor([[1e-4], [1.0], [3.0], [100.0], [0.01]]))
        e4m3_case(w)
        e2m1_case(w)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
