#!/usr/bin/env python3
"""Compare sotto's Silero VAD (vad/silero.c) with onnxruntime on the dev clips.

For every clip of the manifest (16 kHz mono s16 WAVs, read with the wave
module as int16 / 32768), runs onnxruntime on the original silero_vad.onnx
chunk by chunk with state, framed as silero's OnnxWrapper does at 16 kHz
(512 new samples with the previous chunk's last 64 in front, zeros at the
start; the last partial chunk zero-padded), and `silero_probs MODEL WAV`
(bench/silero_probs.c: one probability per chunk). Asserts that the maximum
absolute difference of the probabilities is below --tol, and that both give
the same speech decision (p >= 0.5) on every chunk whose probability is not
within 10 * tol of 0.5. Two clips are also run with white noise added at
0 dB SNR (written as temporary s16 WAVs, outside the repository; both sides
read the same file). Checks that the safetensors file was converted from
this .onnx (the sha256 in its __metadata__). Prints a table; exits non-zero
on any failure.

Needs numpy and onnxruntime.

usage: test_silero_ref.py --probs build/silero_probs --onnx models/silero_vad/silero_vad.onnx
           --model models/silero_vad/silero_vad.safetensors
           [--manifest ../shared/audio/manifest.tsv] [--tol 3e-5] [--max-clips N]
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import wave
import zlib

import numpy as np
import onnxruntime as ort

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHUNK, CONTEXT = 512, 64
NOISY = ["jfk", "earnings22_4482311_3-62s"]  # also run with white noise at 0 dB SNR


def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000, f"{path}: rate {w.getframerate()}"
        assert w.getnchannels() == 1 and w.getsampwidth() == 2, f"{path}: not mono s16"
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def write_wav(path, x):
    s = np.clip(np.round(x * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(s.tobytes())


def ort_probs(sess, x):
    n = (len(x) + CHUNK - 1) // CHUNK
    x = np.concatenate([x, np.zeros(n * CHUNK - len(x), np.float32)])
    state = np.zeros((2, 1, 128), np.float32)
    ctx = np.zeros(CONTEXT, np.float32)
    sr = np.array(16000, np.int64)
    out = np.empty(n, np.float64)
    for i in range(n):
        ch = x[i * CHUNK:(i + 1) * CHUNK]
        inp = np.concatenate([ctx, ch])[None, :]
        p, state = sess.run(None, {"input": inp, "state": state, "sr": sr})
        out[i] = float(p.reshape(-1)[0])
        ctx = ch[-CONTEXT:]
    return out


def sotto_probs(probs, model, wav):
    t0 = time.perf_counter()
    r = subprocess.run([probs, model, wav], check=True, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    return np.array([float(v) for v in r.stdout.split()], np.float64), dt


def model_source_sha(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header.get("__metadata__", {}).get("source_sha256")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probs", default=os.path.join(REPO, "build", "silero_probs"))
    ap.add_argument("--onnx", default=os.path.join(REPO, "models", "silero_vad", "silero_vad.onnx"))
    ap.add_argument("--model",
                    default=os.path.join(REPO, "models", "silero_vad", "silero_vad.safetensors"))
    ap.add_argument("--manifest",
                    default=os.path.join(REPO, "..", "shared", "audio", "manifest.tsv"))
    ap.add_argument("--tol", type=float, default=3e-5)
    ap.add_argument("--max-clips", type=int, default=0, help="0: all clips of the manifest")
    args = ap.parse_args()

    for p, what in ((args.probs, "--probs"), (args.onnx, "--onnx"), (args.model, "--model"),
                    (args.manifest, "--manifest")):
        if not os.path.exists(p):
            sys.exit(f"test_silero_ref: {what} {p} does not exist"
                     + (" (run scripts/fetch_silero.sh)" if what in ("--onnx", "--model") else ""))
    with open(args.onnx, "rb") as f:
        onnx_sha = hashlib.sha256(f.read()).hexdigest()
    src_sha = model_source_sha(args.model)
    if src_sha != onnx_sha:
        sys.exit(f"test_silero_ref: {args.model} was converted from sha256 {src_sha}, "
                 f"but {args.onnx} has {onnx_sha}")

    audio_dir = os.path.dirname(os.path.abspath(args.manifest))
    clips = []
    with open(args.manifest, encoding="utf-8") as f:
        next(f)
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 2:
                clips.append((cols[0], os.path.join(audio_dir, cols[1])))
    if args.max_clips:
        keep = [c for c in clips if c[0] in NOISY or c[0].startswith("long_")]
        rest = [c for c in clips if c not in keep]
        clips = keep + rest[:max(0, args.max_clips - len(keep))]
    if len(clips) < 10:
        sys.exit(f"test_silero_ref: only {len(clips)} clips in {args.manifest} (want >= 10)")

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"])

    failures = []
    worst = 0.0
    n_chunks = 0
    t_sotto = 0.0
    print(f"{'clip':58s} {'chunks':>7s} {'max|d|':>10s} {'mean|d|':>10s} {'flips':>5s} "
          f"{'speech%':>7s}")
    with tempfile.TemporaryDirectory(prefix="sotto_silero_ref_") as tmp:
        jobs = [(cid, path, None) for cid, path in clips]
        jobs += [(cid + " +white 0 dB", path, cid) for cid, path in clips if cid in NOISY]
        for name, path, noisy in jobs:
            x = read_wav(path)
            wav = path
            if noisy:
                rng = np.random.default_rng(zlib.crc32(noisy.encode()))
                p_sig = float(np.mean(x.astype(np.float64) ** 2))
                y = x + rng.standard_normal(len(x)).astype(np.float32) * np.float32(np.sqrt(p_sig))
                peak = float(np.max(np.abs(y)))
                if peak > 0.99:
                    y *= np.float32(0.99 / peak)
                wav = os.path.join(tmp, "noisy.wav")
                write_wav(wav, y)
                x = read_wav(wav)
            ref = ort_probs(sess, x)
            got, dt = sotto_probs(args.probs, args.model, wav)
            t_sotto += dt
            if len(got) != len(ref):
                failures.append(f"{name}: {len(got)} probabilities, onnxruntime gave {len(ref)}")
                print(f"{name:58s} {len(ref):7d}  length mismatch ({len(got)})")
                continue
            d = np.abs(got - ref)
            mx = float(d.max()) if len(d) else 0.0
            far = np.abs(ref - 0.5) > 10 * args.tol
            flips = int(np.sum(((got >= 0.5) != (ref >= 0.5)) & far))
            speech = 100.0 * float(np.mean(ref >= 0.5)) if len(ref) else 0.0
            worst = max(worst, mx)
            n_chunks += len(ref)
            print(f"{name[:58]:58s} {len(ref):7d} {mx:10.2e} {float(d.mean()):10.2e} {flips:5d} "
                  f"{speech:6.1f}%")
            if not mx < args.tol:
                failures.append(f"{name}: max |difference| {mx:.3g} >= {args.tol:g}")
            if flips:
                failures.append(f"{name}: {flips} speech decisions differ")
    print(f"{len(jobs)} runs, {n_chunks} chunks: worst max |difference| {worst:.3g} "
          f"(tolerance {args.tol:g}); silero_probs {1e3 * t_sotto:.0f} ms in all")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
