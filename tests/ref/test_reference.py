"""Reference test on real speech: sotto vs faster-whisper (same model, greedy,
temperature 0, float32) on every English clip of the dev manifest.

Asserts: at least 90% of clips identical after Whisper's English
normalization, and corpus WER within 0.5 percentage points of the
reference's. Prints both WERs and every clip that differs.

usage: test_reference.py --sotto build/sotto --model models/tiny.en [--manifest M]
       [--save results.json]
"""
import argparse
import json
import os
import sys
import time

import refcommon
from refcommon import DEFAULT_MANIFEST, corpus_wer, load_manifest, normalize, read_wav_16k, run_sotto


def run_faster_whisper(model_dir, rows, threads):
    from faster_whisper import WhisperModel

    m = WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=threads)
    out = {}
    for r in rows:
        segs, _ = m.transcribe(read_wav_16k(r["file"]), beam_size=1, temperature=0.0,
                               language="en" if not m.model.is_multilingual else None)
        out[r["file"]] = "".join(s.text for s in segs)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sotto", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--manifest", default=DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--save", help="write the transcripts here (JSON)")
    ap.add_argument("--reference-json", help="use saved faster-whisper transcripts instead of running it")
    args = ap.parse_args()

    rows = load_manifest(args.manifest, languages={"en"})
    files = [r["file"] for r in rows]
    t0 = time.time()
    ours = run_sotto(args.sotto, args.model, files, ["--beam", "1", "--temperature", "0"],
                     threads=args.threads)
    t_sotto = time.time() - t0
    cached = refcommon.last_cached
    t0 = time.time()
    if args.reference_json:
        with open(args.reference_json) as f:
            theirs = json.load(f)["faster_whisper"]
    else:
        theirs = run_faster_whisper(args.model, rows, args.threads)
    t_fw = time.time() - t0

    same = 0
    refs, hyp_s, hyp_f = [], [], []
    for r in rows:
        s, f = ours[r["file"]]["text"], theirs[r["file"]]
        refs.append(r["text"])
        hyp_s.append(s)
        hyp_f.append(f)
        if normalize(s) == normalize(f):
            same += 1
        else:
            print(f"DIFF {r['id']}:\n  sotto:          {s.strip()}\n  faster-whisper: {f.strip()}")
    n = len(rows)
    wer_s, wer_f = corpus_wer(refs, hyp_s), corpus_wer(refs, hyp_f)
    audio = sum(r["seconds"] for r in rows)
    print(f"clips: {n} English, {audio:.0f} s of audio; model {args.model}; threads {args.threads}")
    print(f"identical after normalization: {same}/{n} ({100.0 * same / n:.1f}%)")
    print(f"corpus WER: sotto {wer_s:.2f}%  faster-whisper {wer_f:.2f}%  (difference {wer_s - wer_f:+.2f} pp)")
    print(f"wall: sotto {t_sotto:.1f} s (incl. model load"
          + (f"; {cached} of {len(files)} results from the suite's cache, SOTTO_TEST_CACHE" if cached else "")
          + f"), faster-whisper {t_fw:.1f} s")
    if args.save:
        with open(args.save, "w") as f:
            json.dump({"sotto": {k: v["text"] for k, v in ours.items()}, "faster_whisper": theirs}, f,
                      indent=1)
    ok = True
    if same < 0.9 * n:
        print(f"FAIL: only {same}/{n} clips identical (need >= 90%)")
        ok = False
    if abs(wer_s - wer_f) > 0.5:
        print(f"FAIL: WER differs by {wer_s - wer_f:+.2f} pp (limit 0.5)")
        ok = False
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
