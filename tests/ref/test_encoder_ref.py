"""Reference test of the encoder: `sotto encode` vs CTranslate2's encoder (run
through faster-whisper, compute_type float32) on the first 30 s window of
three dev clips: jfk (11 s), a LibriSpeech clip (10 s) and the 70 s concat
(a full window).

Features for CTranslate2 are computed exactly as faster-whisper's transcribe
loop does for its first window: FeatureExtractor output of the clip, the
first min(3000, n_frames - 1) frames, zero-padded to 3000 (pad_or_trim).
`sotto encode` computes its own features (see cli/cmd_model.c) the same way.

Asserts relative L2 error ||sotto - ct2|| / ||ct2|| <= 1e-3 per clip; prints
it together with the max absolute error.

usage: test_encoder_ref.py --sotto build/sotto --model models/tiny.en [--manifest M]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from refcommon import DEFAULT_MANIFEST, load_manifest, read_wav_16k

CLIPS = ["jfk", "librispeech_test-clean_1089-134686-0000",
         "librispeech_test-clean_1089-134686-0000-0009_concat70s"]
TOLERANCE = 1e-3


def sotto_encode(sotto, model, wav, threads):
    fd, out = tempfile.mkstemp(prefix="sotto_enc_", suffix=".f32")
    os.close(fd)
    try:
        cmd = [sotto, "encode", "--model", model]
        if threads:
            cmd += ["--threads", str(threads)]
        p = subprocess.run(cmd + [wav, out], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"sotto encode failed ({p.returncode}):\n{p.stderr[-4000:]}")
        with open(out, "rb") as f:
            raw = f.read()
    finally:
        os.unlink(out)
    n_ctx, width = np.frombuffer(raw[:8], dtype="<i4")
    a = np.frombuffer(raw[8:], dtype="<f4")
    if a.size != n_ctx * width:
        sys.exit(f"sotto encode wrote {a.size} floats, header says {n_ctx} x {width}")
    return a.reshape(n_ctx, width)


def ct2_encode(fw, audio):
    from faster_whisper.audio import pad_or_trim

    features = fw.feature_extractor(audio)  # [n_mels][n_frames]
    content_frames = features.shape[-1] - 1
    segment = pad_or_trim(features[:, :min(fw.feature_extractor.nb_max_frames, content_frames)])
    out = fw.encode(segment)  # get_ctranslate2_storage + model.encode, as transcribe does
    return np.array(out)[0], segment.shape


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sotto", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--manifest", default=DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    from faster_whisper import WhisperModel

    rows = {r["id"]: r for r in load_manifest(args.manifest)}
    missing = [c for c in CLIPS if c not in rows]
    if missing:
        sys.exit(f"clips missing from the manifest: {missing}")
    fw = WhisperModel(args.model, device="cpu", compute_type="float32", cpu_threads=args.threads)

    ok = True
    for clip in CLIPS:
        wav = rows[clip]["file"]
        ours = sotto_encode(args.sotto, args.model, wav, args.threads)
        ref, shape = ct2_encode(fw, read_wav_16k(wav))
        if ours.shape != ref.shape:
            print(f"FAIL {clip}: sotto output {ours.shape}, CTranslate2 {ref.shape}")
            ok = False
            continue
        if not np.all(np.isfinite(ours)):
            print(f"FAIL {clip}: sotto output has non-finite values")
            ok = False
            continue
        diff = ours.astype(np.float64) - ref.astype(np.float64)
        rel = np.linalg.norm(diff) / np.linalg.norm(ref.astype(np.float64))
        worst = np.unravel_index(np.argmax(np.abs(diff)), diff.shape)
        verdict = "ok" if rel <= TOLERANCE else "FAIL"
        print(f"{verdict:4s} {clip} ({rows[clip]['seconds']:.1f} s, features {shape}): "
              f"relative L2 {rel:.3e}, max |diff| {np.abs(diff).max():.3e} at {tuple(int(i) for i in worst)} "
              f"(|ref| max {np.abs(ref).max():.2f})")
        if not rel <= TOLERANCE:
            ok = False
    print(f"tolerance: relative L2 <= {TOLERANCE:g}")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
