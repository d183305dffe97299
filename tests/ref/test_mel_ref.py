#!/usr/bin/env python3
"""Compare `sotto mel` with faster-whisper's FeatureExtractor on real speech.

For every clip in the manifest (16 kHz mono s16 WAVs), runs
`sotto mel --n-mels 80 --pad 160` and FeatureExtractor(feature_size=80)
(audio read with the wave module as int16 / 32768) and asserts that the
maximum absolute difference is <= 1e-3. On a few clips it also checks
n_mels 128 and pad 480000 (OpenAI Whisper's padding). Prints the worst
difference per clip; exits non-zero on any failure.

usage: test_mel_ref.py --sotto build/sotto [--manifest PATH] [--tol 1e-3]
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
import wave

import numpy as np
from faster_whisper.feature_extractor import FeatureExtractor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_wav(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000, f"{path}: rate {w.getframerate()}"
        assert w.getnchannels() == 1 and w.getsampwidth() == 2, f"{path}: not mono s16"
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def run_sotto(sotto, wav, n_mels, pad, out):
    cmd = [sotto, "mel", "--n-mels", str(n_mels), "--pad", str(pad), wav, out]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    dt = time.perf_counter() - t0
    with open(out, "rb") as f:
        blob = f.read()
    nm, nf = struct.unpack("<ii", blob[:8])
    assert len(blob) == 8 + 4 * nm * nf, f"{out}: size {len(blob)} for {nm}x{nf}"
    return np.frombuffer(blob[8:], dtype="<f4").reshape(nm, nf), dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sotto", default=os.path.join(REPO, "build", "sotto"))
    ap.add_argument("--manifest", default=os.path.join(REPO, "..", "shared", "audio", "manifest.tsv"))
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--extra", type=int, default=4, help="clips also checked with 128 mels / pad 480000")
    args = ap.parse_args()

    audio_dir = os.path.dirname(os.path.abspath(args.manifest))
    with open(args.manifest, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        col = header.index("file")
        clips = [line.rstrip("\n").split("\t")[col] for line in f if line.strip()]
    assert clips, "empty manifest"

    extractors = {80: FeatureExtractor(feature_size=80), 128: FeatureExtractor(feature_size=128)}
    failures = []
    worst = 0.0
    print(f"{'clip':64s} {'mels':>4s} {'pad':>6s} {'frames':>6s} {'max|diff|':>10s} {'sotto s':>7s}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "mel.f32")
        for i, clip in enumerate(clips):
            path = os.path.join(audio_dir, clip)
            audio = read_wav(path)
            configs = [(80, 160)]
            if i < args.extra:
                configs += [(128, 160), (80, 480000), (128, 480000)]
            for n_mels, pad in configs:
                got, dt = run_sotto(args.sotto, path, n_mels, pad, out)
                ref = extractors[n_mels](audio, padding=pad)
                ok = got.shape == ref.shape
                diff = float(np.max(np.abs(got - ref))) if ok and ref.size else (0.0 if ok else float("inf"))
                worst = max(worst, diff)
                flag = "" if ok and diff <= args.tol else "  FAIL"
                if flag:
                    failures.append(f"{clip} n_mels={n_mels} pad={pad}: shape {got.shape} vs "
                                    f"{ref.shape}, max diff {diff:g}")
                print(f"{clip[:64]:64s} {n_mels:4d} {pad:6d} {ref.shape[1]:6d} {diff:10.3g} {dt:7.3f}{flag}")
    print(f"worst max|diff| over all clips and configs: {worst:.3g} (tolerance {args.tol:g})")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
