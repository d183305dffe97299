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

Cut windows (`sotto encode --audio-ctx N`, the server's --audio-ctx): neither
CTranslate2 nor transformers encodes less than 3000 frames, so the reference
is a plain numpy encoder over the CTranslate2 weights (np_encode below). It is
first checked against CTranslate2 on whole windows (same tolerance), then
compared with sotto on the first 2N frames of each clip's window for several N.

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
CUT_CTX = [100, 350, 600]  # encoder positions of cut windows: 2, 7 and 12 s


def _erf(x):
    """Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7), vectorized."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-x * x)
    return np.sign(x) * y


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


def _conv1d(x, w, b, stride):
    """x [c_in][T], w [c_out][c_in][3], padding 1."""
    xp = np.pad(x, ((0, 0), (1, 1)))
    T_out = (x.shape[1] + 2 - 3) // stride + 1
    cols = np.stack([xp[:, k:k + stride * (T_out - 1) + 1:stride] for k in range(3)], axis=-1)
    return np.einsum("oik,itk->ot", w, cols) + b[:, None]


def _ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def np_encode(ct2, feats):
    """Whisper's encoder in float64 numpy over a CTranslate2 model's weights,
    for features [n_mels][2N]: [N][d]. Positions and attention cover N only."""
    V = ct2.variables

    def g(k):
        return V[k].astype(np.float64)

    x = _gelu(_conv1d(feats.astype(np.float64), g("encoder/conv1/weight"), g("encoder/conv1/bias"), 1))
    x = _gelu(_conv1d(x, g("encoder/conv2/weight"), g("encoder/conv2/bias"), 2)).T
    n, d = x.shape
    x = x + g("encoder/position_encodings/encodings")[:n]
    H = int(V["encoder/num_heads"])
    dh = d // H
    layer = 0
    while f"encoder/layer_{layer}/ffn/linear_0/weight" in V:
        p = f"encoder/layer_{layer}/"
        h = _ln(x, g(p + "self_attention/layer_norm/gamma"), g(p + "self_attention/layer_norm/beta"))
        qkv = h @ g(p + "self_attention/linear_0/weight").T + g(p + "self_attention/linear_0/bias")
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(n, H, dh).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v  # [H][n][dh]
        a = a.transpose(1, 0, 2).reshape(n, d)
        x = x + a @ g(p + "self_attention/linear_1/weight").T + g(p + "self_attention/linear_1/bias")
        h = _ln(x, g(p + "ffn/layer_norm/gamma"), g(p + "ffn/layer_norm/beta"))
        h = _gelu(h @ g(p + "ffn/linear_0/weight").T + g(p + "ffn/linear_0/bias"))
        x = x + h @ g(p + "ffn/linear_1/weight").T + g(p + "ffn/linear_1/bias")
        layer += 1
    return _ln(x, g("encoder/layer_norm/gamma"), g("encoder/layer_norm/beta"))


def rel_err(ours, ref):
    diff = ours.astype(np.float64) - ref.astype(np.float64)
    return np.linalg.norm(diff) / np.linalg.norm(ref.astype(np.float64)), np.abs(diff).max()


def sotto_encode(sotto, model, wav, threads, audio_ctx=None):
    fd, out = tempfile.mkstemp(prefix="sotto_enc_", suffix=".f32")
    os.close(fd)
    try:
        cmd = [sotto, "encode", "--model", model]
        if audio_ctx:
            cmd += ["--audio-ctx", str(audio_ctx)]
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
    return np.array(out)[0], segment.shape, segment


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
    from refmodels import read_ct2
    ct2 = read_ct2(os.path.join(args.model, "model.bin"))

    ok = True
    for clip in CLIPS:
        wav = rows[clip]["file"]
        ours = sotto_encode(args.sotto, args.model, wav, args.threads)
        ref, shape, segment = ct2_encode(fw, read_wav_16k(wav))
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
        # cut windows against the numpy reference, itself checked on the whole window first
        if clip != CLIPS[0]:
            continue
        full = np_encode(ct2, segment)
        rel, mx = rel_err(full, ref)
        verdict = "ok" if rel <= TOLERANCE else "FAIL"
        print(f"{verdict:4s} {clip}: numpy reference vs CTranslate2, whole window: relative L2 {rel:.3e}, "
              f"max |diff| {mx:.3e}")
        ok &= rel <= TOLERANCE
        for n in CUT_CTX:
            cut = sotto_encode(args.sotto, args.model, wav, args.threads, audio_ctx=n)
            want = np_encode(ct2, segment[:, :2 * n])
            if cut.shape != want.shape:
                print(f"FAIL {clip}, --audio-ctx {n}: sotto output {cut.shape}, reference {want.shape}")
                ok = False
                continue
            rel, mx = rel_err(cut, want)
            moved, _ = rel_err(ref[:n], want)  # the cut changes the output: the test can tell
            verdict = "ok" if rel <= TOLERANCE and moved > 10 * TOLERANCE else "FAIL"
            print(f"{verdict:4s} {clip}, --audio-ctx {n} ({2 * n} frames): sotto vs numpy relative L2 "
                  f"{rel:.3e}, max |diff| {mx:.3e}; the whole window's first {n} rows differ by {moved:.3e}")
            ok &= rel <= TOLERANCE and moved > 10 * TOLERANCE
    print(f"tolerance: relative L2 <= {TOLERANCE:g}")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
