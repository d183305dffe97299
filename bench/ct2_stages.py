"""CTranslate2's encoder and greedy decoding timed on their own, as
bench_engine times sotto's (the peer for its table in docs/PERF.md).
Reports; asserts nothing.

  .venv/bin/python bench/ct2_stages.py --model models/tiny.en \
      --clip ../shared/audio/librispeech_test-clean_1089-134686-0000.wav

Encoder: median of 3 `encode` calls on one 30 s window of the clip's
features. Decoding: `generate` greedy from <|startoftranscript|><|notimestamps|>
(second of two calls), wall time divided by the tokens generated, so the
prompt is included.
"""
import argparse
import statistics
import time

import ctranslate2
import numpy as np
from faster_whisper.audio import decode_audio
from faster_whisper.feature_extractor import FeatureExtractor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny.en")
    ap.add_argument("--clip", required=True)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    audio = decode_audio(args.clip)
    m0 = ctranslate2.models.Whisper(args.model, device="cpu", compute_type="float32")
    fe = FeatureExtractor(m0.n_mels)
    feats = np.ascontiguousarray(fe(audio, padding=480000)[:, :3000][None].astype(np.float32))
    print(f"CTranslate2 {ctranslate2.__version__}, model {args.model}, clip {args.clip}")
    print("| threads | encode 30 s, ms | generate, tokens | ms per token |")
    print("|---:|---:|---:|---:|")
    for th in [int(t) for t in args.threads.split(",")]:
        m = ctranslate2.models.Whisper(args.model, device="cpu", compute_type="float32", intra_threads=th)
        sv = ctranslate2.StorageView.from_array(feats)
        m.encode(sv)
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            m.encode(sv)
            ts.append(time.perf_counter() - t)
        enc = m.encode(sv, to_cpu=True)
        prompt = [[50257, 50362]] if m.is_multilingual is False else [[50258, 50259, 50359, 50363]]
        for _ in range(2):
            t = time.perf_counter()
            r = m.generate(enc, prompt, max_length=224, beam_size=1)
            dt = time.perf_counter() - t
        n = len(r[0].sequences_ids[0])
        print(f"| {th} | {statistics.median(ts) * 1e3:.1f} | {n} | {dt * 1e3 / n:.2f} |")


if __name__ == "__main__":
    main()
