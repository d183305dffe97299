#!/usr/bin/env python3
"""Converts a CTranslate2 Whisper model directory (faster-whisper's format:
model.bin, config.json, vocabulary.txt) to a whisper.cpp ggml model file.

The output is the legacy `ggml` layout that whisper.cpp's
models/convert-pt-to-ggml.py writes and whisper_model_load() reads:

    magic 0x67676d6c
    hparams (int32): n_vocab n_audio_ctx n_audio_state n_audio_head n_audio_layer
                     n_text_ctx n_text_state n_text_head n_text_layer n_mels ftype
    mel filters: int32 n_mels, int32 201, n_mels*201 float32 (librosa slaney mel
                 filterbank, sr 16000, n_fft 400: the same as Whisper's mel_filters.npz)
    vocabulary:  int32 count, then per token int32 length + bytes (GPT-2
                 byte-decoded; the regular tokens only, whisper.cpp adds the specials)
    tensors:     int32 n_dims, int32 name length, int32 ttype, int32 dims (reversed),
                 name, data

Tensors carry the OpenAI checkpoint names (encoder.blocks.0.attn.query.weight, ...):
CTranslate2's fused self-attention QKV and cross-attention KV projections are
split; the key projection bias (OpenAI has none; CTranslate2 stores zeros) is
dropped, which is exact in any case: a key bias adds the same q.b to every
score of a query row, and softmax ignores it.

Types follow convert-pt-to-ggml.py: `f16` (ftype 1) writes matrices and conv
weights as float16 and biases, norms and positional embeddings as float32;
`q8_0` (ftype 2007 = 7 + 1000 * GGML_QNT_VERSION, as whisper.cpp's
`quantize ... q8_0` writes it) stores the 2-D matrices in ggml's Q8_0 blocks
(32 int8 + one f16 scale) and keeps the conv weights f16. CTranslate2 weights
stored as float32/float16/bfloat16 are read as is; int8/int16 weights (a
quantized CT2 conversion; untested) are dequantized with their `weight_scale`.

    python3 bench/ggml_convert.py models/tiny.en build/ggml/tiny.en-f16.bin [--type q8_0]
    python3 bench/ggml_convert.py models/tiny.en --cache-dir build/ggml [--type q8_0]

With --cache-dir the file is named after the model and type, and converted only
when it is missing or the model files or this converter changed. The first
line on stdout is JSON: where the file is ("out"), whether it was converted now.
"""
import argparse
import hashlib
import json
import os
import re
import struct
import sys
import tempfile

import numpy as np

GGML_MAGIC = 0x67676D6C
# file ftype (GGML_FTYPE_*). No f32: whisper.cpp 1.8's CPU im2col (the encoder convs)
# asserts f16 conv weights, and an f32 file makes them f32.
FTYPE = {"f16": 1, "q8_0": 7}
GGML_QNT_VERSION = 2                            # quantize writes ftype + 1000 * this
TTYPE_F32, TTYPE_F16, TTYPE_Q8_0 = 0, 1, 8      # per-tensor GGML_TYPE_*
QK8_0 = 32

# CTranslate2 DataType (include/ctranslate2/types.h)
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}
CT2_SCALARS = {"activation", "alibi", "alignment_heads", "alignment_layer", "num_heads",
               "pre_norm", "scale_embeddings", "start_from_zero_embedding"}


# --------------------------------------------------------------------------
# CTranslate2 model.bin
# --------------------------------------------------------------------------

def read_ct2(path):
    """Returns (spec name, {variable name: numpy array}) from a CTranslate2 model.bin.

    Layout (binary version 6): u32 version, string spec, u32 revision, u32 count,
    per variable: string name, u8 rank, u32 dims[rank], u8 dtype, u32 nbytes, data;
    then u32 alias count, per alias: string alias, string target. Strings are
    u16 length (with the trailing NUL) + bytes.
    """
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def unpack(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals

    def string():
        nonlocal pos
        (n,) = unpack("H")
        s = buf[pos:pos + n].rstrip(b"\0").decode("utf-8")
        pos += n
        return s

    (version,) = unpack("I")
    if version != 6:
        raise ValueError(f"{path}: CTranslate2 binary version {version}, only 6 is supported")
    spec = string()
    unpack("I")  # spec revision
    (count,) = unpack("I")
    variables = {}
    for _ in range(count):
        name = string()
        (rank,) = unpack("B")
        dims = unpack(f"{rank}I") if rank else ()
        (dtype,) = unpack("B")
        (nbytes,) = unpack("I")
        if dtype not in CT2_DTYPES:
            raise ValueError(f"{path}: {name}: unknown dtype {dtype}")
        raw = buf[pos:pos + nbytes]
        pos += nbytes
        if CT2_DTYPES[dtype] == "bfloat16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=np.dtype(CT2_DTYPES[dtype]).newbyteorder("<"))
        if a.size != int(np.prod(dims, dtype=np.int64)):
            raise ValueError(f"{path}: {name}: {nbytes} bytes do not hold dims {dims}")
        variables[name] = a.reshape(dims)
    (n_alias,) = unpack("I")
    for _ in range(n_alias):
        alias, target = string(), string()
        variables.setdefault(alias, variables[target])
    if pos != len(buf):
        raise ValueError(f"{path}: {len(buf) - pos} trailing bytes")
    return spec, variables


def weight(v, name):
    """A CT2 weight as float32, dequantizing int8/int16 with `<prefix>/weight_scale`."""
    a = v[name]
    if a.dtype in (np.int8, np.int16):
        scale = v[name.rsplit("/", 1)[0] + "/weight_scale"].astype(np.float32)
        scale = scale.reshape(-1, *([1] * (a.ndim - 1))) if scale.ndim else scale
        return a.astype(np.float32) / scale
    return a.astype(np.float32)


# --------------------------------------------------------------------------
# mel filters, vocabulary
# --------------------------------------------------------------------------

def _hz_to_mel_slaney(f):
    f = np.asarray(f, dtype=np.float64)
    f_sp = 200.0 / 3
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(f >= min_log_hz,
                    min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep,
                    f / f_sp)


def _mel_to_hz_slaney(m):
    m = np.asarray(m, dtype=np.float64)
    f_sp = 200.0 / 3
    min_log_hz, logstep = 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(n_mels, sr=16000, n_fft=400):
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) (slaney scale and
    area normalization, fmin 0, fmax sr/2), as float32 [n_mels, 1 + n_fft // 2]."""
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_pts = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(0.0), _hz_to_mel_slaney(sr / 2.0),
                                            n_mels + 2))
    widths = np.diff(mel_pts)
    dist = mel_pts[:, None] - fft_freqs[None, :]
    rising = -dist[:-2] / widths[:-1, None]
    falling = dist[2:] / widths[1:, None]
    # triangles stored as float32 first, then area-normalized in place (as librosa rounds)
    w = np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)
    w *= (2.0 / (mel_pts[2:] - mel_pts[:-2]))[:, None]
    return w


def _byte_decoder():
    """Inverse of GPT-2's bytes_to_unicode(): printable code point -> byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) \
        + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def read_vocabulary(model_dir):
    """All tokens of vocabulary.txt (one per line, GPT-2 byte-encoded)."""
    with open(os.path.join(model_dir, "vocabulary.txt"), encoding="utf-8") as f:
        tokens = f.read().split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return tokens


def regular_tokens(tokens):
    """The byte strings of the tokens before <|endoftext|> (what the tiktoken
    files that convert-pt-to-ggml.py reads hold); whisper.cpp names the rest."""
    try:
        eot = tokens.index("<|endoftext|>")
    except ValueError:
        raise ValueError("vocabulary.txt has no <|endoftext|>") from None
    dec = _byte_decoder()
    out = []
    for i, t in enumerate(tokens[:eot]):
        try:
            out.append(bytes(dec[c] for c in t))
        except KeyError as e:
            raise ValueError(f"token {i} {t!r}: {e} is not a GPT-2 byte character") from None
    return out


# --------------------------------------------------------------------------
# CT2 names -> OpenAI names
# --------------------------------------------------------------------------

def openai_tensors(v):
    """[(OpenAI name, float32 array)] from CT2 variables; raises on anything unused."""
    used = set()
    out = []

    def get(name):
        used.add(name)
        if name.endswith("/weight") and name.rsplit("/", 1)[0] + "/weight_scale" in v:
            used.add(name.rsplit("/", 1)[0] + "/weight_scale")
        return weight(v, name)

    def put(name, a):
        out.append((name, np.ascontiguousarray(a, dtype=np.float32)))

    def linear(dst, src):
        put(dst + ".weight", get(src + "/weight"))
        put(dst + ".bias", get(src + "/bias"))

    def norm(dst, src):
        put(dst + ".weight", get(src + "/gamma"))
        put(dst + ".bias", get(src + "/beta"))

    def split(dst_prefix, parts, src):
        """Fused projection rows [parts...] -> separate linears; no key bias."""
        w, b = get(src + "/weight"), get(src + "/bias")
        n = len(parts)
        if w.shape[0] % n:
            raise ValueError(f"{src}: {w.shape} does not split in {n}")
        ws, bs = np.split(w, n, axis=0), np.split(b, n, axis=0)
        for p, wp, bp in zip(parts, ws, bs):
            put(f"{dst_prefix}.{p}.weight", wp)
            if p != "key":
                put(f"{dst_prefix}.{p}.bias", bp)
        return float(np.max(np.abs(bs[parts.index("key")]))) if "key" in parts else 0.0

    # the parts encoder and decoder blocks share (CT2 layer s -> OpenAI block d)
    def self_attn(d, s):
        """Returns the largest |key bias| dropped."""
        kb = split(d + ".attn", ["query", "key", "value"], s + "/self_attention/linear_0")
        linear(d + ".attn.out", s + "/self_attention/linear_1")
        norm(d + ".attn_ln", s + "/self_attention/layer_norm")
        return kb

    def mlp(d, s):
        linear(d + ".mlp.0", s + "/ffn/linear_0")
        linear(d + ".mlp.2", s + "/ffn/linear_1")
        norm(d + ".mlp_ln", s + "/ffn/layer_norm")

    key_bias = 0.0
    n_enc = 1 + max(int(m.group(1)) for k in v for m in [re.match(r"encoder/layer_(\d+)/", k)] if m)
    n_dec = 1 + max(int(m.group(1)) for k in v for m in [re.match(r"decoder/layer_(\d+)/", k)] if m)

    put("encoder.positional_embedding", get("encoder/position_encodings/encodings"))
    put("encoder.conv1.weight", get("encoder/conv1/weight"))
    put("encoder.conv1.bias", get("encoder/conv1/bias"))
    put("encoder.conv2.weight", get("encoder/conv2/weight"))
    put("encoder.conv2.bias", get("encoder/conv2/bias"))
    for i in range(n_enc):
        s, d = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        key_bias = max(key_bias, self_attn(d, s))
        mlp(d, s)
    norm("encoder.ln_post", "encoder/layer_norm")

    put("decoder.positional_embedding", get("decoder/position_encodings/encodings"))
    put("decoder.token_embedding.weight", get("decoder/embeddings/weight"))
    for i in range(n_dec):
        s, d = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        key_bias = max(key_bias, self_attn(d, s))
        linear(d + ".cross_attn.query", s + "/attention/linear_0")
        key_bias = max(key_bias, split(d + ".cross_attn", ["key", "value"],
                                       s + "/attention/linear_1"))
        linear(d + ".cross_attn.out", s + "/attention/linear_2")
        norm(d + ".cross_attn_ln", s + "/attention/layer_norm")
        mlp(d, s)
    norm("decoder.ln", "decoder/layer_norm")

    used.add("decoder/projection/weight")  # alias of the token embedding (tied)
    left = [k for k in v if k not in used and k.split("/")[-1] not in CT2_SCALARS]
    if left:
        raise ValueError(f"CT2 variables not mapped: {', '.join(sorted(left)[:10])}")
    return out, n_enc, n_dec, key_bias


# --------------------------------------------------------------------------
# ggml writer / reader
# --------------------------------------------------------------------------

def quantize_q8_0(a):
    """ggml's quantize_row_q8_0_ref over rows of a 2-D float32 array -> bytes."""
    x = a.reshape(-1, QK8_0).astype(np.float32)
    d = np.max(np.abs(x), axis=1) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    s = (x * inv[:, None]).astype(np.float64)
    q = np.trunc(s + np.copysign(0.5, s)).astype(np.int8)  # roundf: ties away from zero
    blocks = np.empty(x.shape[0], dtype=[("d", "<f2"), ("qs", "i1", (QK8_0,))])
    blocks["d"] = d.astype(np.float16)
    blocks["qs"] = q
    return blocks.tobytes()


def tensor_type(name, a, wtype):
    """ggml type of a tensor, as convert-pt-to-ggml.py / quantize choose it."""
    if a.ndim < 2 or name in ("encoder.conv1.bias", "encoder.conv2.bias",
                              "encoder.positional_embedding", "decoder.positional_embedding"):
        return TTYPE_F32
    if wtype == "q8_0" and a.ndim == 2 and a.shape[-1] % QK8_0 == 0:
        return TTYPE_Q8_0
    return TTYPE_F16


def write_ggml(path, hparams, filters, tokens, tensors, wtype):
    ftype = FTYPE[wtype] + (1000 * GGML_QNT_VERSION if wtype == "q8_0" else 0)
    counts = {TTYPE_F32: 0, TTYPE_F16: 0, TTYPE_Q8_0: 0}
    with open(path, "wb") as f:
        f.write(struct.pack("<I", GGML_MAGIC))
        f.write(struct.pack("<11i", *[hparams[k] for k in (
            "n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
            "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels")], ftype))
        f.write(struct.pack("<2i", *filters.shape))
        f.write(filters.astype("<f4").tobytes())
        f.write(struct.pack("<i", len(tokens)))
        for t in tokens:
            f.write(struct.pack("<i", len(t)))
            f.write(t)
        for name, a in tensors:
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                a = a.reshape(-1, 1)  # whisper.cpp's conv bias is [1, n_state]
            tt = tensor_type(name, a, wtype)
            counts[tt] += 1
            nb = name.encode("utf-8")
            f.write(struct.pack("<3i", a.ndim, len(nb), tt))
            f.write(struct.pack(f"<{a.ndim}i", *reversed(a.shape)))
            f.write(nb)
            if tt == TTYPE_F32:
                f.write(a.astype("<f4").tobytes())
            elif tt == TTYPE_F16:
                f.write(a.astype("<f2").tobytes())
            else:
                f.write(quantize_q8_0(a))
    return counts


def read_ggml(path):
    """Parses a ggml file back: (hparams list, filters, tokens, {name: (ttype, dims)})."""
    with open(path, "rb") as f:
        buf = f.read()
    (magic,), pos = struct.unpack_from("<I", buf, 0), 4
    if magic != GGML_MAGIC:
        raise ValueError(f"{path}: bad magic {magic:#x}")
    hp = struct.unpack_from("<11i", buf, pos)
    pos += 44
    n_mel, n_fft = struct.unpack_from("<2i", buf, pos)
    pos += 8
    filters = np.frombuffer(buf, "<f4", n_mel * n_fft, pos).reshape(n_mel, n_fft)
    pos += 4 * n_mel * n_fft
    (n_tok,) = struct.unpack_from("<i", buf, pos)
    pos += 4
    tokens = []
    for _ in range(n_tok):
        (n,) = struct.unpack_from("<i", buf, pos)
        tokens.append(buf[pos + 4:pos + 4 + n])
        pos += 4 + n
    tensors = {}
    while pos < len(buf):
        nd, ln, tt = struct.unpack_from("<3i", buf, pos)
        pos += 12
        dims = struct.unpack_from(f"<{nd}i", buf, pos)
        pos += 4 * nd
        name = buf[pos:pos + ln].decode("utf-8")
        pos += ln
        n = int(np.prod(dims))
        size = {TTYPE_F32: 4 * n, TTYPE_F16: 2 * n, TTYPE_Q8_0: n // QK8_0 * (2 + QK8_0)}[tt]
        tensors[name] = (tt, dims, pos)
        pos += size
    if pos != len(buf):
        raise ValueError(f"{path}: truncated")
    return hp, filters, tokens, tensors


# --------------------------------------------------------------------------
# conversion
# --------------------------------------------------------------------------

def convert(model_dir, out_path, wtype="f16"):
    """Converts model_dir to out_path (written atomically); returns an info dict."""
    if wtype not in FTYPE:
        raise ValueError(f"unknown type {wtype}; choose from {', '.join(FTYPE)}")
    spec, v = read_ct2(os.path.join(model_dir, "model.bin"))
    if spec != "WhisperSpec":
        raise ValueError(f"{model_dir}: spec {spec}, not a Whisper model")
    tensors, n_enc, n_dec, key_bias = openai_tensors(v)
    t = dict(tensors)
    vocab = read_vocabulary(model_dir)
    n_vocab, n_text_state = t["decoder.token_embedding.weight"].shape
    if len(vocab) != n_vocab:
        raise ValueError(f"vocabulary.txt has {len(vocab)} tokens, the embedding {n_vocab}")
    tokens = regular_tokens(vocab)
    n_audio_state, n_mels = t["encoder.conv1.weight"].shape[:2]
    hparams = {
        "n_vocab": n_vocab,
        "n_audio_ctx": t["encoder.positional_embedding"].shape[0],
        "n_audio_state": n_audio_state,
        "n_audio_head": int(v["encoder/num_heads"]),
        "n_audio_layer": n_enc,
        "n_text_ctx": t["decoder.positional_embedding"].shape[0],
        "n_text_state": n_text_state,
        "n_text_head": int(v["decoder/num_heads"]),
        "n_text_layer": n_dec,
        "n_mels": n_mels,
    }
    filters = mel_filters(n_mels)
    out_dir = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ggml-", dir=out_dir)
    os.close(fd)
    try:
        counts = write_ggml(tmp, hparams, filters, tokens, tensors, wtype)
        os.replace(tmp, out_path)
    except BaseException:
        os.unlink(tmp)
        raise
    return {"out": out_path, "type": wtype, "hparams": hparams, "tensors": len(tensors),
            "tensor_types": {"f32": counts[TTYPE_F32], "f16": counts[TTYPE_F16],
                             "q8_0": counts[TTYPE_Q8_0]},
            "tokens": len(tokens), "max_abs_key_bias_dropped": key_bias,
            "bytes": os.path.getsize(out_path)}


def _source_id(model_dir):
    parts = []
    for name in ("model.bin", "vocabulary.txt", "config.json"):
        p = os.path.join(model_dir, name)
        if os.path.isfile(p):
            st = os.stat(p)
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    with open(os.path.abspath(__file__), "rb") as f:
        parts.append("converter:" + hashlib.sha256(f.read()).hexdigest()[:16])
    return "|".join([os.path.abspath(model_dir)] + parts)


def cached_convert(model_dir, cache_dir, wtype="f16"):
    """The ggml file for model_dir in cache_dir, converted again when the model
    files or this converter changed. Returns (path, info, converted_now)."""
    base = os.path.basename(os.path.normpath(model_dir))
    out = os.path.join(cache_dir, f"ggml-{base}-{wtype}.bin")
    meta = out + ".json"
    sid = _source_id(model_dir)
    if os.path.isfile(out) and os.path.isfile(meta):
        try:
            with open(meta, encoding="utf-8") as f:
                m = json.load(f)
            if m.get("source") == sid and m.get("bytes") == os.path.getsize(out):
                return out, m, False
        except (OSError, ValueError):
            pass
    info = convert(model_dir, out, wtype)
    info["source"] = sid
    with open(meta, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
    return out, info, True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", help="CTranslate2 Whisper model directory")
    ap.add_argument("out", nargs="?", help="ggml model file to write")
    ap.add_argument("--cache-dir", help="instead of OUT: convert into this cache, if needed")
    ap.add_argument("--type", default="f16", choices=sorted(FTYPE))
    ap.add_argument("--verify", action="store_true",
                    help="read the file back and check it against the source weights")
    args = ap.parse_args()
    if bool(args.out) == bool(args.cache_dir):
        ap.error("give OUT or --cache-dir")
    if args.cache_dir:
        path, info, fresh = cached_convert(args.model_dir, args.cache_dir, args.type)
        info = dict(info, out=path, converted_now=fresh)
        args.out = path
    else:
        info = convert(args.model_dir, args.out, args.type)
    print(json.dumps(info))
    if args.verify:
        hp, filters, tokens, tensors = read_ggml(args.out)
        _, v = read_ct2(os.path.join(args.model_dir, "model.bin"))
        src = dict(openai_tensors(v)[0])
        assert list(hp[:10]) == [info["hparams"][k] for k in info["hparams"]], hp
        assert set(tensors) == set(src), set(tensors) ^ set(src)
        worst = worst_q8 = 0.0
        with open(args.out, "rb") as f:
            buf = f.read()
        for name, (tt, dims, off) in tensors.items():
            a = src[name]
            assert tuple(reversed(dims)) == (a.reshape(-1, 1).shape if name.endswith("conv1.bias")
                                             or name.endswith("conv2.bias") else a.shape), name
            if tt == TTYPE_Q8_0:
                blk = np.frombuffer(buf, [("d", "<f2"), ("qs", "i1", (QK8_0,))], a.size // QK8_0,
                                    off)
                b = (blk["qs"].astype(np.float32) * blk["d"].astype(np.float32)[:, None]).ravel()
                amax = np.repeat(np.abs(a).reshape(-1, QK8_0).max(axis=1), QK8_0)
                worst_q8 = max(worst_q8, float(np.max(np.abs(b - a.ravel()) /
                                                      np.maximum(amax, 1e-30))))
                continue
            b = np.frombuffer(buf, "<f4" if tt == TTYPE_F32 else "<f2", a.size, off)
            worst = max(worst, float(np.max(np.abs(b.astype(np.float32) - a.ravel()))))
        print(f"verify: {len(tensors)} tensors, {len(tokens)} tokens, filters {filters.shape}, "
              f"max |file - source| over f32/f16 tensors {worst:.3g}"
              + (f", q8_0 max |error| / block amax {worst_q8:.3g} (f16 scales)"
                 if worst_q8 else ""))


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError) as e:
        sys.exit(f"ggml_convert: {e}")
