#!/usr/bin/env python3
"""convert_silero.py - Silero VAD (v5/v6 ONNX) -> safetensors for vad/silero.c.

Checked on silero_vad/data/silero_vad.onnx of silero-vad 6.2.3 (sha256
1a153a22...) and 5.1.2 (2623a295...). faster-whisper's
assets/silero_vad_v6.onnx is another export (inputs input/h/c, reflect
padding of 128 on both sides, other weights) and is refused.

Set-up time only (scripts/fetch_silero.sh runs it); nothing here runs when
sotto runs. Needs the `onnx` and `numpy` packages.

    convert_silero.py SRC.onnx DST.safetensors [--source-name NAME]

The ONNX model takes (input [B, 64 + 512], state [2, B, 128], sr) and
branches on sr with an If node: Equal(sr, 16000) -> then_branch is the
16 kHz network. From that branch this script takes the constant tensors
and checks the structure that vad/silero.c implements:

  Pad(reflect, right 64)  576 -> 640 samples
  Conv(stft.forward_basis [258, 1, 256], stride 128, no pad) -> 4 frames
  magnitude sqrt(re^2 + im^2) of channels [0, 129) and [129, 258)
  encoder.0..3: Conv k3 pad1 strides 1, 2, 2, 1 (129->128->64->64->128) + ReLU
  LSTM hidden 128 (state[0] = h, state[1] = c), PyTorch gate order i, f, g, o
       (the graph reorders to ONNX's i, o, f, c with Slices; we keep PyTorch's)
  ReLU, Conv 1x1 (128 -> 1), Sigmoid

Output tensors (float32, names as in the PyTorch module, shapes as in ONNX):
  stft.forward_basis   [258, 1, 256]
  encoder.{0..3}.weight / .bias
  lstm.weight_ih [512, 128], lstm.weight_hh [512, 128], lstm.bias_ih [512],
  lstm.bias_hh [512]
  decoder.weight [1, 128, 1], decoder.bias [1]
__metadata__: format, format_version, source, source_sha256, sample_rate,
gate_order.

The file is written with the data area and every tensor 64-byte aligned
(as common/safetensors.c's writer does), via DST.tmp and a rename.
"""
import argparse
import hashlib
import json
import os
import struct
import sys

FORMAT = "sotto-silero-vad"
FORMAT_VERSION = "1"

# name in the ONNX graph (after the Inline prefix) -> (our name, shape)
TENSORS = [
    ("stft.forward_basis_buffer", "stft.forward_basis", (258, 1, 256)),
    ("encoder.0.reparam_conv.weight", "encoder.0.weight", (128, 129, 3)),
    ("encoder.0.reparam_conv.bias", "encoder.0.bias", (128,)),
    ("encoder.1.reparam_conv.weight", "encoder.1.weight", (64, 128, 3)),
    ("encoder.1.reparam_conv.bias", "encoder.1.bias", (64,)),
    ("encoder.2.reparam_conv.weight", "encoder.2.weight", (64, 64, 3)),
    ("encoder.2.reparam_conv.bias", "encoder.2.bias", (64,)),
    ("encoder.3.reparam_conv.weight", "encoder.3.weight", (128, 64, 3)),
    ("encoder.3.reparam_conv.bias", "encoder.3.bias", (128,)),
    ("decoder.rnn.weight_ih", "lstm.weight_ih", (512, 128)),
    ("decoder.rnn.weight_hh", "lstm.weight_hh", (512, 128)),
    ("decoder.rnn.bias_ih", "lstm.bias_ih", (512,)),
    ("decoder.rnn.bias_hh", "lstm.bias_hh", (512,)),
    ("decoder.decoder.2.weight", "decoder.weight", (1, 128, 1)),
    ("decoder.decoder.2.bias", "decoder.bias", (1,)),
]

# (stride, in channels, out channels) of encoder.0..3
ENCODER = [(1, 129, 128), (2, 128, 64), (2, 64, 64), (1, 64, 128)]


def die(msg):
    print(f"convert_silero: {msg}", file=sys.stderr)
    sys.exit(1)


def strip_prefix(name):
    # "If_0_then_branch__Inline_0__encoder.0.reparam_conv.weight" -> "encoder.0..."
    i = name.rfind("__")
    return name[i + 2:] if i >= 0 else name


def find_16k_branch(onnx, graph):
    """The branch of the top-level If that runs when sr == 16000."""
    consts = {}
    for n in graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = onnx.numpy_helper.to_array(a.t)
    inputs = {i.name for i in graph.input}
    if "sr" not in inputs or "state" not in inputs or "input" not in inputs:
        die(f"graph inputs are {sorted(inputs)}, expected input, state, sr: the silero_vad.onnx "
            "of the silero-vad package (v5 or v6); other exports, such as faster-whisper's "
            "silero_vad_v6.onnx (inputs input, h, c; other weights and framing), are not supported")
    for n in graph.node:
        if n.op_type != "If":
            continue
        cond = n.input[0]
        eq = [m for m in graph.node if cond in m.output]
        if not eq or eq[0].op_type != "Equal":
            continue
        a, b = eq[0].input
        other = b if a == "sr" else a if b == "sr" else None
        if other is None or other not in consts:
            continue
        val = int(consts[other].reshape(-1)[0])
        branches = {x.name: x.g for x in n.attribute}
        if val == 16000:
            return branches["then_branch"]
        if val == 8000:
            return branches["else_branch"]
    die("no If node on Equal(sr, 16000|8000) found: not a Silero VAD v5/v6 graph")


def check_structure(onnx, g):
    """Checks that the 16 kHz branch is the network vad/silero.c computes."""
    nodes = list(g.node)

    def attrs(n):
        return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}

    ops = [n.op_type for n in nodes]
    pads = [n for n in nodes if n.op_type == "Pad"]
    if len(pads) != 1 or attrs(pads[0]).get("mode") != b"reflect":
        die("expected exactly one reflect Pad in the 16 kHz branch")
    pad_consts = [
        onnx.numpy_helper.to_array(attrs(n)["value"]).tolist()
        for n in nodes
        if n.op_type == "Constant" and "padding/Constant_1" in n.output[0]
    ]
    if pad_consts != [[0, 64]]:
        die(f"stft padding is {pad_consts}, expected [[0, 64]] (reflect 64 on the right)")
    convs = [n for n in nodes if n.op_type == "Conv"]
    if len(convs) != 6:
        die(f"expected 6 Conv nodes in the 16 kHz branch, found {len(convs)}")
    a = attrs(convs[0])
    if a.get("strides") != [128] or a.get("kernel_shape") != [256] or a.get("pads", [0, 0]) != [0, 0]:
        die(f"stft conv attributes {a} are not stride 128, kernel 256, no padding")
    for k, (stride, _, _) in enumerate(ENCODER):
        a = attrs(convs[1 + k])
        if a.get("strides") != [stride] or a.get("kernel_shape") != [3] or a.get("pads") != [1, 1] \
                or a.get("group", 1) != 1 or a.get("dilations", [1]) != [1]:
            die(f"encoder.{k} conv attributes {a}: expected stride {stride}, kernel 3, pads 1")
    a = attrs(convs[5])
    if a.get("kernel_shape") != [1] or a.get("strides") != [1]:
        die(f"decoder conv attributes {a}: expected a 1x1 conv")
    if ops.count("Relu") != 5 or ops.count("Sigmoid") != 1 or ops.count("Sqrt") != 1:
        die("expected 5 Relu, 1 Sqrt and 1 Sigmoid in the 16 kHz branch")
    # the magnitude: real part channels [0, 129), imaginary [129, end)
    for n in nodes:
        if n.op_type == "Constant" and n.output[0].endswith(("/stft/Constant_8_output_0",
                                                             "/stft/Constant_15_output_0")):
            v = onnx.numpy_helper.to_array(attrs(n)["value"]).tolist()
            if v != [129]:
                die(f"stft real/imaginary split at {v}, expected 129")

    # LSTM (inside nested Ifs): hidden 128, forward, default activations
    def walk(graph):
        for n in graph.node:
            yield n
            for x in n.attribute:
                if x.type == onnx.AttributeProto.GRAPH:
                    yield from walk(x.g)

    lstms = [n for n in walk(g) if n.op_type == "LSTM"]
    if not lstms:
        die("no LSTM node in the 16 kHz branch")
    for n in lstms:
        a = attrs(n)
        if a.get("hidden_size") != 128 or a.get("direction", b"forward") != b"forward" \
                or "activations" in a or "clip" in a or a.get("input_forget", 0) != 0:
            die(f"LSTM attributes {a}: expected a plain forward LSTM with hidden size 128")
    # PyTorch (i, f, g, o) -> ONNX (i, o, f, c): slices [0,128), [384,512), [128,384)
    slices = []
    for n in walk(g):
        if n.op_type == "Slice" and strip_prefix(n.input[0]) == "decoder.rnn.weight_ih":
            slices.append(n)
    if len(slices) < 3:
        die("the LSTM weights are not reordered with Slices as expected (gate order unknown)")
    consts = {}
    for n in walk(g):
        if n.op_type == "Constant":
            consts[n.output[0]] = onnx.numpy_helper.to_array(attrs(n)["value"]).tolist()
    order = [(consts[s.input[1]][0], consts[s.input[2]][0]) for s in slices[:3]]
    if order != [(0, 128), (384, 512), (128, 384)]:
        die(f"LSTM gate slices {order}: expected PyTorch order i, f, g, o reordered to i, o, f, c")


def extract(onnx, g):
    found = {}
    for n in g.node:
        if n.op_type != "Constant":
            continue
        name = strip_prefix(n.output[0])
        for a in n.attribute:
            if a.name == "value":
                found[name] = onnx.numpy_helper.to_array(a.t)
    out = []
    for src, dst, shape in TENSORS:
        if src not in found:
            die(f"tensor '{src}' not found in the 16 kHz branch")
        arr = found[src]
        if tuple(arr.shape) != shape:
            die(f"tensor '{src}' has shape {list(arr.shape)}, expected {list(shape)}")
        if arr.dtype.name != "float32":
            die(f"tensor '{src}' has dtype {arr.dtype}, expected float32")
        out.append((dst, arr))
    return out


def write_safetensors(path, tensors, metadata):
    import numpy as np

    header = {"__metadata__": metadata}
    offset = 0
    blobs = []
    for name, arr in tensors:
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        pad = (-offset) % 64
        if pad:
            blobs.append(b"\0" * pad)
            offset += pad
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    h += b" " * ((-(8 + len(h))) % 64)  # data area 64-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="silero_vad.onnx")
    ap.add_argument("dst", help="output .safetensors")
    ap.add_argument("--source-name", help="name recorded as the source (default: file name)")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
        import onnx
        import onnx.numpy_helper
    except ImportError as e:
        die(f"needs the onnx and numpy Python packages ({e})")
    try:
        with open(args.src, "rb") as f:
            raw = f.read()
    except OSError as e:
        die(f"cannot read {args.src}: {e}")
    try:
        model = onnx.load_from_string(raw)
    except Exception as e:  # onnx raises DecodeError and others
        die(f"{args.src} is not a valid ONNX model: {e}")
    g16 = find_16k_branch(onnx, model.graph)
    check_structure(onnx, g16)
    tensors = extract(onnx, g16)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "source": args.source_name or os.path.basename(args.src),
        "source_sha256": hashlib.sha256(raw).hexdigest(),
        "sample_rate": "16000",
        "gate_order": "pytorch i,f,g,o",
    }
    write_safetensors(args.dst, tensors, meta)
    n = sum(a.size for _, a in tensors)
    print(f"convert_silero: wrote {args.dst} ({len(tensors)} tensors, {n} floats) from "
          f"{meta['source']} (sha256 {meta['source_sha256'][:16]}...)")


if __name__ == "__main__":
    main()
