#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora, fuzz/corpus/<target>/: small valid files
of every layout each reader takes, and edge cases (limits, lies, damage).
All are synthetic (no model or speech file is copied); each is well under
64 KB. Needs sox and opusenc for the compressed upload seeds (skipped, with a
note, when missing). Rerunning rewrites the same files.

    python3 fuzz/make_seeds.py
"""
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    assert len(data) < 64 * 1024, (target, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- WAV ------------------------------------------------------------------------


def tone(n, rate, freq=440.0, amp=0.5):
    return [amp * math.sin(2 * math.pi * freq * i / rate) for i in range(n)]


def pcm_bytes(x, bits, channels=1):
    out = bytearray()
    for v in x:
        for _ in range(channels):
            if bits == 8:
                out += struct.pack("<B", max(0, min(255, int(128 + v * 127))))
            elif bits == 16:
                out += struct.pack("<h", int(v * 32767))
            elif bits == 24:
                out += struct.pack("<i", int(v * 8388607))[:3]
            elif bits == 32:
                out += struct.pack("<i", int(v * 2147483647))
    return bytes(out)


def wav(rate, bits, data, channels=1, tag=1, extensible=False, declared=None, extra_chunks=b"",
        fmt_first=True):
    align = channels * bits // 8
    if extensible:
        guid_tail = bytes([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38,
                           0x9B, 0x71])
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * align, align, bits, 22, bits,
                          3 if channels == 2 else 4) + struct.pack("<H", tag) + guid_tail
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)
    fmt_chunk = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    size = len(data) if declared is None else declared
    data_chunk = b"data" + struct.pack("<I", size) + data + (b"\0" if len(data) & 1 else b"")
    body = (fmt_chunk + extra_chunks + data_chunk) if fmt_first else (extra_chunks + data_chunk + fmt_chunk)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


def wav_seeds():
    out = {}
    out["s16_16k.wav"] = wav(16000, 16, pcm_bytes(tone(800, 16000), 16))
    out["u8_8k.wav"] = wav(8000, 8, pcm_bytes(tone(400, 8000), 8))
    out["s24_44k.wav"] = wav(44100, 24, pcm_bytes(tone(441, 44100), 24))
    out["s32_48k_stereo.wav"] = wav(48000, 32, pcm_bytes(tone(480, 48000), 32, 2), channels=2)
    out["f32_22k.wav"] = wav(22050, 32, struct.pack("<200f", *tone(200, 22050)), tag=3)
    out["f64_16k.wav"] = wav(16000, 64, struct.pack("<100d", *tone(100, 16000)), tag=3)
    out["ext_f32_stereo.wav"] = wav(32000, 32, struct.pack("<400f", *tone(400, 32000)), channels=2,
                                    tag=3, extensible=True)
    out["ext_s16_6ch.wav"] = wav(16000, 16, pcm_bytes(tone(50, 16000), 16, 6), channels=6, extensible=True)
    out["list_chunks.wav"] = wav(16000, 16, pcm_bytes(tone(100, 16000), 16),
                                 extra_chunks=b"LIST" + struct.pack("<I", 5) + b"INFOa\0")
    out["data_before_fmt.wav"] = wav(16000, 16, pcm_bytes(tone(100, 16000), 16),
                                     extra_chunks=b"junk" + struct.pack("<I", 2) + b"zz", fmt_first=False)
    out["declares_4gb.wav"] = wav(8000, 16, pcm_bytes(tone(100, 8000), 16), declared=0xFFFFFFF0)
    out["one_hz.wav"] = wav(1, 16, bytes(100))
    out["rate_384k.wav"] = wav(384000, 16, pcm_bytes(tone(384, 384000), 16))
    out["odd_partial_frame.wav"] = wav(16000, 16, pcm_bytes(tone(10, 16000), 16) + b"\x01")
    nan = struct.pack("<f", float("nan")) + struct.pack("<f", float("inf"))
    out["f32_nan_inf.wav"] = wav(16000, 32, nan * 10, tag=3)
    out["header_only.wav"] = wav(16000, 16, b"")[:44]
    out["rf64.wav"] = b"RF64" + out["s16_16k.wav"][4:]
    return out


def make_wav():
    for name, data in wav_seeds().items():
        put("wav", name, data)


# ---- uploads --------------------------------------------------------------------


def make_upload(tmp):
    for name in ("s16_16k.wav", "u8_8k.wav", "f32_22k.wav", "ext_f32_stereo.wav", "one_hz.wav",
                 "declares_4gb.wav"):
        put("upload", name, wav_seeds()[name])
    src = os.path.join(tmp, "src.wav")
    with open(src, "wb") as f:
        f.write(wav(8000, 16, pcm_bytes(tone(4000, 8000, 300), 16)))  # 0.5 s
    if not shutil.which("sox"):
        print("make_seeds: no sox: compressed upload seeds skipped")
        return
    for ext, args in (("flac", []), ("ogg", ["-C", "0"]), ("aiff", []), ("au", []), ("caf", []),
                      ("w64", [])):
        dst = os.path.join(tmp, "clip." + ext)
        p = subprocess.run(["sox", src] + args + [dst], capture_output=True)
        if p.returncode == 0:
            put("upload", "clip." + ext, open(dst, "rb").read())
        else:
            print(f"make_seeds: sox cannot write .{ext}: skipped")
    # 10 minutes of silence: a declared length far beyond the harness's cap
    dst = os.path.join(tmp, "silence.flac")
    subprocess.run(["sox", "-n", "-r", "8000", "-c", "1", "-b", "16", "-D", dst, "trim", "0", "600"],
                   check=True)
    flac = open(dst, "rb").read()
    put("upload", "silence_10min.flac", flac)
    z = bytearray(flac)  # the same with STREAMINFO's total-samples field zeroed (unknown length)
    z[21] &= 0xF0
    z[22:26] = b"\0\0\0\0"
    put("upload", "silence_unknown_length.flac", bytes(z))
    if shutil.which("opusenc"):
        src48 = os.path.join(tmp, "src48.wav")
        with open(src48, "wb") as f:
            f.write(wav(48000, 16, pcm_bytes(tone(24000, 48000, 300), 16)))
        dst = os.path.join(tmp, "clip.opus")
        subprocess.run(["opusenc", "--quiet", "--bitrate", "12", src48, dst], check=True)
        put("upload", "clip.opus", open(dst, "rb").read())
    else:
        print("make_seeds: no opusenc: the Ogg Opus upload seed skipped")


# ---- live audio (audio_in) -------------------------------------------------------


def ogg_packets(data):
    """The packets of an Ogg stream (one logical stream)."""
    packets, cur, pos = [], b"", 0
    while pos + 27 <= len(data) and data[pos:pos + 4] == b"OggS":
        nseg = data[pos + 26]
        lace = data[pos + 27:pos + 27 + nseg]
        body = pos + 27 + nseg
        for l in lace:
            cur += data[body:body + l]
            body += l
            if l < 255:
                packets.append(cur)
                cur = b""
        pos = body
    return packets


def msgs(header, messages):
    return bytes(header) + b"".join(struct.pack("<H", len(m)) + m for m in messages)


def make_audio_in(tmp):
    s16 = pcm_bytes(tone(320, 16000), 16)
    put("audio_in", "s16_16k_mono", msgs([0, 2, 0], [s16[:320], s16[320:]]))
    put("audio_in", "s16_48k_stereo", msgs([0, 7, 1], [pcm_bytes(tone(480, 48000), 16, 2)]))
    put("audio_in", "s16_odd_length", msgs([0, 2, 0], [b"\x01\x02\x03"]))
    f32 = struct.pack("<100f", *tone(100, 8000)) + struct.pack("<2f", float("nan"), float("inf"))
    put("audio_in", "f32_8k_nan", msgs([1, 0, 0], [f32]))
    put("audio_in", "f32_44k_stereo", msgs([1, 6, 1], [struct.pack("<200f", *tone(200, 44100))]))
    src48 = os.path.join(tmp, "src48.wav")
    if shutil.which("opusenc") and os.path.exists(src48):
        for frame in ("20", "60", "2.5"):
            dst = os.path.join(tmp, f"f{frame}.opus")
            subprocess.run(["opusenc", "--quiet", "--bitrate", "16", "--framesize", frame, src48, dst],
                           check=True)
            pk = ogg_packets(open(dst, "rb").read())[2:12]  # after OpusHead, OpusTags
            put("audio_in", f"opus_{frame}ms", msgs([2, 7, 0], pk))
            if frame == "20":
                bad = [pk[0], b"\xff" * 7, b"", b"\x08", pk[1][:3], pk[2]]  # garbage, empty, DTX, cut
                put("audio_in", "opus_damaged", msgs([2, 2, 0], bad))
    else:
        print("make_seeds: no opusenc: the Opus audio_in seeds skipped")
    put("audio_in", "opus_code3_120ms", msgs([2, 7, 0], [bytes([0x0B | 0x03 << 0, 0x86]) + b"\0" * 6]))


# ---- safetensors ----------------------------------------------------------------


def safetensors(tensors, meta=None, header_override=None):
    hdr, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        hdr["__metadata__"] = meta
    h = header_override if header_override is not None else json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def make_safetensors():
    f32 = struct.pack("<6f", *range(6))
    t = {"model.encoder.conv1.weight": ("F32", [2, 3], f32),
         "model.decoder.embed_tokens.weight": ("BF16", [4], b"\x80\x3f" * 4),
         "x.weight_packed": ("U8", [2, 2], b"\x12\x34\x56\x78"),
         "x.weight_scale": ("F8_E4M3", [2], b"\x38\x38"),
         "x.weight_global_scale": ("F32", [1], struct.pack("<f", 1.0)),
         "i": ("I32", [2], struct.pack("<2i", 1, -1)),
         "scalar": ("F16", [], b"\x00\x3c"),
         "empty": ("F32", [0, 4], b"")}
    put("safetensors", "valid.safetensors", safetensors(t, {"format": "pt", "sotto": "1"}))
    put("safetensors", "empty_header.safetensors", safetensors({}, header_override=b"{}"))
    put("safetensors", "huge_header_len.safetensors", struct.pack("<Q", 1 << 62) + b"{}")
    put("safetensors", "offsets_past_end.safetensors",
        safetensors({}, header_override=json.dumps(
            {"a": {"dtype": "F32", "shape": [1 << 30, 1 << 30], "data_offsets": [0, 1 << 62]}}).encode()))
    put("safetensors", "overlap.safetensors",
        safetensors({}, header_override=json.dumps(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()) + b"\0" * 12)
    put("safetensors", "bad_dtype_shape.safetensors",
        safetensors({}, header_override=json.dumps(
            {"a": {"dtype": "Q9", "shape": [-1], "data_offsets": [8, 0]},
             "b": {"dtype": "F32", "shape": "x", "data_offsets": [0]}}).encode()) + b"\0" * 8)
    put("safetensors", "truncated.safetensors", safetensors(t)[:100])


# ---- tokenizer ------------------------------------------------------------------

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>", "<|0.00|>"]


def byte_vocab():
    """GPT-2's 256 byte symbols, then a few merges' results."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def make_tokenizer():
    base = byte_vocab()
    merges = ["\u0120 t", "h e", "\u0120t he", "l l", "e ll", "H ell", "Hell o"]
    vocab = {s: i for i, s in enumerate(base)}
    for m in merges:
        vocab["".join(m.split(" "))] = len(vocab)
    added = [{"id": len(vocab) + i, "content": s, "special": True} for i, s in enumerate(SPECIALS)]
    tj = {"model": {"type": "BPE", "vocab": vocab, "merges": merges}, "added_tokens": added}
    put("tokenizer", "tokenizer_json", b"\0" + json.dumps(tj).encode())
    tj2 = dict(tj)
    tj2["model"] = dict(tj["model"], merges=[m.split(" ") for m in merges], ignore_merges=True)
    put("tokenizer", "tokenizer_json_pair_merges", b"\0" + json.dumps(tj2).encode())
    put("tokenizer", "tokenizer_json_not_bpe", b"\0" + json.dumps({"model": {"type": "WordPiece"}}).encode())
    put("tokenizer", "tokenizer_json_dup_ids", b"\0" + json.dumps(
        {"model": {"type": "BPE", "vocab": {"a": 0, "b": 0, "c": 99999999}, "merges": ["a b", "x"]},
         "added_tokens": [{"id": -5, "content": ""}]}).encode())
    v = dict(vocab)
    for i, s in enumerate(SPECIALS):
        v[s] = len(vocab) + i
    put("tokenizer", "vocab_merges", b"\1" + json.dumps(v).encode() + b"\0" +
        ("#version: 0.2\n" + "\n".join(merges) + "\n").encode())
    put("tokenizer", "vocabulary_txt", b"\2" + "\n".join(base[:60] + SPECIALS).encode("utf-8") + b"\n")
    put("tokenizer", "vocabulary_json", b"\3" + json.dumps(base[:60] + SPECIALS).encode())
    put("tokenizer", "vocabulary_txt_crlf_empty_lines", b"\2a\r\n\r\nb\n\n" + b"\xff\xfe\n")


# ---- CTranslate2 model.bin -----------------------------------------------------


def ct2_string(s):
    b = s.encode() + b"\0"
    return struct.pack("<H", len(b)) + b


def ct2(variables, version=6, spec="WhisperSpec", aliases=()):
    out = struct.pack("<I", version) + ct2_string(spec) + struct.pack("<I", 3)
    out += struct.pack("<I", len(variables))
    for name, dtype, shape, raw in variables:
        out += ct2_string(name) + struct.pack("<B", len(shape)) + b"".join(struct.pack("<I", d) for d in shape)
        out += struct.pack("<BI", dtype, len(raw)) + raw
    out += struct.pack("<I", len(aliases))
    for a, t in aliases:
        out += ct2_string(a) + ct2_string(t)
    return out


def make_ct2():
    """Tiny Whisper-shaped model.bin files (width 4, one layer each side, 14 tokens)."""
    d, mels, vocab, ctx, actx = 4, 8, 14, 8, 1500

    def f32(*shape):
        n = 1
        for s in shape:
            n *= s
        return struct.pack(f"<{n}f", *[0.01 * ((i * 7) % 11 - 5) for i in range(n)])

    def ln(prefix):
        return [(prefix + "/gamma", 0, [d], f32(d)), (prefix + "/beta", 0, [d], f32(d))]

    def lin(prefix, o, i):
        return [(prefix + "/weight", 0, [o, i], f32(o, i)), (prefix + "/bias", 0, [o], f32(o))]

    enc = [("encoder/conv1/weight", 0, [d, mels, 3], f32(d, mels, 3)), ("encoder/conv1/bias", 0, [d], f32(d)),
           ("encoder/conv2/weight", 0, [d, d, 3], f32(d, d, 3)), ("encoder/conv2/bias", 0, [d], f32(d)),
           ("encoder/position_encodings/encodings", 0, [actx, d], f32(actx, d))]
    L = "encoder/layer_0/"
    enc += ln(L + "self_attention/layer_norm") + lin(L + "self_attention/linear_0", 3 * d, d)
    enc += lin(L + "self_attention/linear_1", d, d) + ln(L + "ffn/layer_norm")
    enc += lin(L + "ffn/linear_0", 4 * d, d) + lin(L + "ffn/linear_1", d, 4 * d) + ln("encoder/layer_norm")
    dec = [("decoder/embeddings/weight", 0, [vocab, d], f32(vocab, d)),
           ("decoder/position_encodings/encodings", 0, [ctx, d], f32(ctx, d))]
    L = "decoder/layer_0/"
    dec += ln(L + "self_attention/layer_norm") + lin(L + "self_attention/linear_0", 3 * d, d)
    dec += lin(L + "self_attention/linear_1", d, d) + ln(L + "attention/layer_norm")
    dec += lin(L + "attention/linear_0", d, d) + lin(L + "attention/linear_1", 2 * d, d)
    dec += lin(L + "attention/linear_2", d, d) + ln(L + "ffn/layer_norm")
    dec += lin(L + "ffn/linear_0", 4 * d, d) + lin(L + "ffn/linear_1", d, 4 * d) + ln("decoder/layer_norm")
    meta = [("encoder/num_heads", 3, [], struct.pack("<i", 1)), ("decoder/num_heads", 3, [], struct.pack("<i", 1))]
    full = enc + dec + meta
    put("ct2", "tiny_whisper_f32.bin", ct2(full))
    q = []
    for name, dt, shape, raw in full:  # int8 linear weights with per-row scales
        if name.endswith("/weight") and len(shape) == 2 and "embeddings" not in name:
            q.append((name, 1, shape, bytes((i * 13) % 256 for i in range(shape[0] * shape[1]))))
            q.append((name + "_scale", 0, [shape[0]], struct.pack(f"<{shape[0]}f", *[100.0] * shape[0])))
        else:
            q.append((name, dt, shape, raw))
    put("ct2", "tiny_whisper_int8.bin", ct2(q, version=5))
    f16 = [(n, 4 if dt == 0 else dt, s, raw[: len(raw) // 2] if dt == 0 else raw) for n, dt, s, raw in full]
    put("ct2", "tiny_whisper_f16.bin", ct2(f16, version=4))
    put("ct2", "aliases.bin", ct2(full[:6], aliases=[("decoder/projection/weight", "decoder/embeddings/weight")]))
    put("ct2", "not_whisper.bin", ct2(full[:2], spec="TransformerSpec"))
    put("ct2", "version_9.bin", ct2([], version=9))
    put("ct2", "huge_dims.bin", ct2([("x", 0, [0xFFFFFFFF, 0xFFFFFFFF], b"")]))
    put("ct2", "truncated.bin", ct2(full)[:300])


# ---- snapshot recipe ------------------------------------------------------------


def make_snapshot():
    r = {"format": "sotto-quantized-whisper", "version": 1, "policy": "all=nf4,embed=q8",
         "tensors": {"model.encoder.layers.0.fc1.weight": {"crc32": 123456789, "format": "nf4"},
                     "model.decoder.embed_tokens.weight": {"crc32": 0}}}
    put("snapshot", "recipe.json", json.dumps(r).encode())
    r2 = dict(r, policy="f32")
    put("snapshot", "recipe_f32.json", json.dumps(r2).encode())
    put("snapshot", "recipe_bad_policy.json", json.dumps(dict(r, policy="encoder=zz,=,all")).encode())
    put("snapshot", "recipe_version_2.json", json.dumps(dict(r, version=2)).encode())
    put("snapshot", "recipe_types.json", json.dumps(
        {"format": "sotto-quantized-whisper", "version": 1e300, "policy": "all=nvfp4",
         "tensors": {"a": {"crc32": -1}, "b": {"crc32": 1e20}, "c": [], "": {"crc32": "x"}}}).encode())
    put("snapshot", "not_json", b"{\"format\": \"sotto-quantized-whisper\", \"version\": 1, \"tens")


# ---- multipart --------------------------------------------------------------------


def form(boundary, parts, epilogue=b"\r\n"):
    out = b""
    for headers, body in parts:
        out += b"--" + boundary + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body + b"\r\n"
    return out + b"--" + boundary + b"--" + epilogue


def make_multipart():
    """Input: the Content-Type header line, a NUL, then the body."""
    b = b"sotto0boundary"
    ct = b"multipart/form-data; boundary=" + b
    file_part = ([b'Content-Disposition: form-data; name="file"; filename="a.wav"',
                  b"Content-Type: audio/wav"], wav_seeds()["u8_8k.wav"])
    fields = [([b'Content-Disposition: form-data; name="model"'], b"whisper-1"),
              ([b'Content-Disposition: form-data; name="response_format"'], b"verbose_json"),
              ([b'Content-Disposition: form-data; name="timestamp_granularities[]"'], b"word"),
              ([b'Content-Disposition: form-data; name="timestamp_granularities[]"'], b"segment"),
              ([b'Content-Disposition: form-data; name="prompt"'], "caf\u00e9 \u2014 names".encode())]
    put("multipart", "openai_form", ct + b"\0" + form(b, [file_part] + fields))
    put("multipart", "quoted_boundary", b'multipart/form-data; charset=utf-8; boundary="a b:c"\0' +
        b"preamble\r\n" + form(b"a b:c", [file_part, fields[0]], epilogue=b"\r\nepilogue"))
    put("multipart", "no_closing_boundary", ct + b"\0" + form(b, [file_part])[:-8])
    put("multipart", "boundary_in_data", ct + b"\0" + form(b, [(file_part[0], b"--" + b + b"x\r\n--" + b[:-1])]))
    put("multipart", "lf_only", ct + b"\0" + form(b, [fields[0]]).replace(b"\r\n", b"\n"))
    put("multipart", "bad_headers", ct + b"\0" + form(b, [([b"Content-Disposition: attachment; name=", b"x"], b"1"),
                                                          ([b'Content-Disposition: form-data; name="' + b"n" * 300 + b'"'], b"2")]))
    put("multipart", "empty", ct + b"\0")
    put("multipart", "not_multipart", b"application/json\0{}")


# ---- control messages of the WebSocket dialects ------------------------------------
# Seeded from the messages of docs/PROTOCOL.md, docs/COMPAT.md and the tests
# (tests/ref/test_server.py, test_compat.py, test_security.py).


def make_start():
    msgs_ = {
        "minimal": {"type": "start"},
        "protocol_example": {"type": "start", "encoding": "pcm_s16le", "sample_rate": 16000, "channels": 1,
                             "model": "tiny.en", "weights": "f32", "language": "en", "partials": True},
        "opus_stereo": {"type": "start", "encoding": "opus", "sample_rate": 48000, "channels": 2},
        "f32_8k_translate": {"type": "start", "encoding": "pcm_f32le", "sample_rate": 8000, "task": "translate",
                             "language": "auto", "prompt": "Glossary: sotto, Whisper."},
        "feed": {"type": "start", "feed": "talk-1.a_b", "feed_key": "k" * 64, "final_timestamps": False},
        "vad_full": {"type": "start", "step_ms": 100, "max_window_s": 2,
                     "vad": {"kind": "energy", "threshold": 0.01, "threshold_db": 40, "silence_ms": 100,
                             "preroll_ms": 2000, "min_speech_ms": 0}},
        "vad_silero": {"type": "start", "vad": {"kind": "silero", "threshold": 1, "silence_ms": 10000}},
        "limits_high": {"type": "start", "sample_rate": 48000, "channels": 2, "step_ms": 10000,
                        "max_window_s": 30, "prompt": "p" * 2000, "language": "x" * 15},
        "bad_rate": {"type": "start", "sample_rate": 1e300, "channels": -2147483649, "step_ms": "x"},
        "bad_weights": {"type": "start", "weights": "nf4", "model": "m" * 120},
        "bad_feed": {"type": "start", "feed": ".hidden", "feed_key": ""},
        "bad_vad": {"type": "start", "vad": {"kind": "neural", "silence_ms": 99999999999}},
        "resume": {"type": "resume", "session": "s7-1f2e3d4c", "token": "0123456789abcdef", "last_seq": 12},
        "resume_big_seq": {"type": "resume", "session": "s1", "token": "t", "last_seq": 1e15},
        "resume_bad": {"type": "resume", "session": 1, "last_seq": -1},
    }
    for name, m in msgs_.items():
        put("start", name, json.dumps(m).encode())
    put("start", "not_object", b"[1,2,3]")
    put("start", "nested", b'{"type":"start","vad":' * 20 + b"{}" + b"}" * 20)


def records(opts, recs):
    """link_stub.h's input: an option byte, then (flag, bytes) records."""
    out = bytearray([opts])
    for flag, data in recs:
        if isinstance(data, (dict, list)):
            data = json.dumps(data).encode()
        out += bytes([flag]) + struct.pack("<H", len(data)) + data
    return bytes(out)


def b64(data):
    import base64
    return base64.b64encode(data).decode()


EV = 0x80  # a session event for the dialect to translate


def session_events(final_text=" Hello world."):
    return [(EV, {"type": "hello", "protocol": "sotto.v1", "seq": 1}),
            (EV, {"type": "ready", "session": "s7-1f2e3d4c", "token": "t"}),
            (EV, {"type": "ack", "offset": 4000}),
            (EV, {"type": "speech_start", "utterance": 1, "start": 0.42}),
            (EV, {"type": "partial", "utterance": 1, "pass": 1, "committed": "", "tentative": " Hello"}),
            (EV, {"type": "commit", "utterance": 1, "pass": 2, "text": " Hello", "committed": " Hello"}),
            (EV, {"type": "speech_end", "utterance": 1, "end": 3.1}),
            (EV, {"type": "final", "utterance": 1, "text": final_text, "start": 0.42, "end": 3.1}),
            (EV, {"type": "done", "audio_seconds": 3.5, "dropped_seconds": 0})]


def make_realtime():
    pcm = pcm_bytes(tone(480, 24000), 16)
    ga = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 24000},
        "transcription": {"model": "gpt-4o-transcribe", "language": "en", "prompt": "sotto"},
        "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                           "silence_duration_ms": 500}}}}}
    beta = {"type": "transcription_session.update", "session": {
        "input_audio_format": "g711_ulaw", "input_audio_transcription": {"model": "whisper-1"},
        "turn_detection": None}}
    append = {"type": "input_audio_buffer.append", "audio": b64(pcm), "event_id": "evt_1"}
    put("realtime", "ga_session", records(0, [(0, ga), (0, append), (0, append),
                                              (0, {"type": "input_audio_buffer.commit"})] + session_events()))
    put("realtime", "beta_ulaw", records(0, [(0, beta), (0, {"type": "input_audio_buffer.append",
                                                             "audio": b64(b"\xff\x7f" * 80)}),
                                             (0, {"type": "input_audio_buffer.clear"})] + session_events()))
    put("realtime", "alaw_model_name", records(0, [(0, {"type": "session.update", "session": {"audio": {"input": {
        "format": {"type": "audio/pcma"}, "transcription": {"model": "whisper-tiny.en:q8"}}}}}),
        (0, {"type": "input_audio_buffer.append", "audio": b64(b"\x55" * 160)})]))
    put("realtime", "start_fails", records(1, [(0, append), (0, append)]))
    put("realtime", "errors", records(0, [(1, b"\x00\x01binary"), (0, b"not json"), (0, {"no": "type"}),
                                          (0, {"type": "response.create"}),
                                          (0, {"type": "input_audio_buffer.append", "audio": "!!"}),
                                          (0, {"type": "input_audio_buffer.append", "audio": b64(b"abc")}),
                                          (0, {"type": "input_audio_buffer.commit"}),
                                          (0, {"type": "session.update", "session": {"type": "realtime"}}),
                                          (0, {"type": "session.update", "session": {"audio": {"input": {
                                              "format": {"type": "audio/pcm", "rate": 4e9},
                                              "turn_detection": {"type": "semantic_vad", "threshold": 2}}}}})]))
    put("realtime", "events_odd", records(0, [(0, append)] + [
        (EV, {"type": "speech_start", "utterance": -5, "start": 1e300}),
        (EV, {"type": "final", "utterance": 3e10, "text": "x", "start": -1, "end": 1e308}),
        (EV, {"type": "error", "code": "internal", "message": "m", "fatal": True, "utterance": -64}),
        (EV, {"type": "error", "code": "overloaded", "fatal": True})]))
    put("realtime", "update_after_start", records(0, [(0, append), (0, ga), (0, beta)]))


def make_deepgram(tmp):
    pcm = pcm_bytes(tone(320, 16000), 16)
    ka, fin, close = {"type": "KeepAlive"}, {"type": "Finalize"}, {"type": "CloseStream"}
    put("deepgram", "linear16", b"encoding=linear16&sample_rate=16000&channels=1&interim_results=true&"
        b"vad_events=true&endpointing=300&utterance_end_ms=1000&language=en-US&model=nova-2\0" +
        records(0, [(1, pcm), (0, ka), (1, pcm), (0, fin)] + session_events() + [(0, close)]))
    put("deepgram", "mulaw", b"encoding=mulaw&sample_rate=8000\0" + records(0, [(1, b"\xff" * 160), (0, close)]))
    put("deepgram", "alaw_stereo", b"encoding=alaw&sample_rate=8000&channels=2&endpointing=false\0" +
        records(0, [(1, b"\xd5" * 161)]))
    put("deepgram", "defaults", b"\0" + records(0, [(1, pcm[:3]), (0, b"junk"), (0, {"type": "Other"})]))
    put("deepgram", "bad_query", b"encoding=flac&sample_rate=99999999999999999999\0" + records(0, [(1, pcm)]))
    put("deepgram", "bad_numbers", b"sample_rate=-8000&channels=3&endpointing=-1&utterance_end_ms=99\0")
    put("deepgram", "model_weights", b"model=tiny.en:q8&language=multi\0" + records(1, [(1, pcm)]))
    src48 = os.path.join(tmp, "src48.wav")
    if shutil.which("opusenc") and os.path.exists(src48):
        dst = os.path.join(tmp, "dg.opus")
        subprocess.run(["opusenc", "--quiet", "--bitrate", "16", src48, dst], check=True)
        ogg = open(dst, "rb").read()[:6000]
        put("deepgram", "ogg_opus", b"encoding=ogg-opus\0" + records(0, [(1, ogg[i:i + 700]) for i in range(0, len(ogg), 700)]
                                                                      + session_events() + [(0, close)]))
        put("deepgram", "opus_sniffed_ogg", b"encoding=opus\0" + records(0, [(1, ogg)]))
        pk = ogg_packets(open(dst, "rb").read())[2:8]
        put("deepgram", "opus_raw", b"encoding=opus&sample_rate=48000\0" + records(0, [(1, p) for p in pk]))
        put("ogg_opus", "stream", b"".join(struct.pack("<H", len(ogg[i:i + 500])) + ogg[i:i + 500]
                                           for i in range(0, len(ogg), 500)))
        put("ogg_opus", "one_message", struct.pack("<H", len(ogg)) + ogg)
        # garbage between pages, a second logical stream
        pages, pos = [], 0
        while pos + 27 <= len(ogg) and ogg[pos:pos + 4] == b"OggS":
            nseg = ogg[pos + 26]
            end = pos + 27 + nseg + sum(ogg[pos + 27:pos + 27 + nseg])
            pages.append(ogg[pos:end])
            pos = end
        junk = b"O" * 40 + b"Og"
        mixed = junk.join(pages[:6])
        put("ogg_opus", "junk_between_pages", struct.pack("<H", len(mixed)) + mixed)
        other = bytearray(pages[0])
        other[14:18] = b"\x01\x02\x03\x04"
        two = bytes(other) + b"".join(pages[:4])
        put("ogg_opus", "second_stream", struct.pack("<H", len(two)) + two)
    else:
        print("make_seeds: no opusenc: the Ogg deepgram / ogg_opus seeds skipped")
    # a packet continued over many pages (lacing values all 255)
    def page(seq, body, cont, lace=None, serial=1):
        lace = lace if lace is not None else [255] * (len(body) // 255)
        hdr = b"OggS\0" + bytes([1 if cont else 0]) + struct.pack("<qIII", 0, serial, seq, 0) + bytes([len(lace)]) + bytes(lace)
        return hdr + body
    head = b"OpusHead\x01\x01\x38\x01\x80\xbb\0\0\0\0\0"
    st = page(0, head, False, [len(head)]) + page(1, b"OpusTags" + b"\0" * 8, False, [16])
    long_pk = b"".join(page(2 + i, b"\x11" * 255 * 20, i > 0) for i in range(3))
    put("ogg_opus", "long_packet", struct.pack("<H", len(st)) + st + struct.pack("<H", len(long_pk)) + long_pk)
    put("ogg_opus", "no_opushead", struct.pack("<H", 40) + page(0, b"NotOpus" + b"\0" * 12, False, [19])[:40])


def make_dialects(tmp):
    make_start()
    make_realtime()
    make_deepgram(tmp)


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    with tempfile.TemporaryDirectory() as tmp:
        make_wav()
        make_upload(tmp)
        make_audio_in(tmp)
        make_safetensors()
        make_tokenizer()
        make_ct2()
        make_snapshot()
        make_multipart()
        make_dialects(tmp)
    total = 0
    for d in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, d))
        size = sum(os.path.getsize(os.path.join(CORPUS, d, f)) for f in files)
        total += size
        print(f"  {d}: {len(files)} seeds, {size // 1024} KB")
    print(f"make_seeds: {total // 1024} KB in {CORPUS}")


if __name__ == "__main__":
    main()
