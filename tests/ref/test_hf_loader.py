"""Reference test of the Hugging Face loader: the CTranslate2 model
(models/tiny.en) converted to Hugging Face layouts with convert_ct2_to_hf.py
must transcribe exactly like the original.

Variants (in a temporary directory, removed afterwards):
  hf-f32   float32 model.safetensors + tokenizer.json
  hf-f16   float16 model.safetensors + vocab.json/merges.txt/added_tokens.json
The CT2 weights are float16, so both variants hold the same values and every
segment (text, start, end, tokens) must be identical to the CT2 run
(`sotto transcribe --format json --beam 1 --temperature 0`). `sotto info` on
each HF dir must report format "hf" and the CT2 model's hparams.

usage: test_hf_loader.py --sotto build/sotto --model models/tiny.en [--manifest M]
       [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from convert_ct2_to_hf import convert
from refcommon import DEFAULT_MANIFEST, load_manifest, run_sotto

# Varied English dev clips: short and long, read and spontaneous speech,
# one past 30 s (several windows, seeking) and one of 70 s.
CLIPS = [
    "jfk",
    "librispeech_test-clean_1089-134686-0000",
    "librispeech_test-clean_1089-134686-0001",
    "librispeech_test-clean_1089-134691-0000",
    "librispeech_test-clean_1089-134686-0000-0009_concat70s",
    "librispeech_train-clean-100_19-198-0004",
    "librispeech_train-clean-100_1737-146161-0010",
    "librivox_sense-and-sensibility-01_0880",
    "librispeech_dev-clean_1272-128104-0000_picovoice",
    "earnings22_4482311_3-62s",
]


def sotto_info(sotto, model):
    p = subprocess.run([sotto, "info", "--model", model], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"sotto info --model {model} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout)


def segments(result):
    return [(s["start"], s["end"], s["text"], s["tokens"]) for s in result["segments"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sotto", required=True)
    ap.add_argument("--model", required=True, help="CTranslate2 model directory (tiny.en)")
    ap.add_argument("--manifest", default=DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--keep", help="write the converted models here and keep them")
    args = ap.parse_args()

    rows = {r["id"]: r for r in load_manifest(args.manifest, languages={"en"})}
    missing = [c for c in CLIPS if c not in rows]
    if missing:
        sys.exit(f"clips missing from the manifest: {missing}")
    files = [rows[c]["file"] for c in CLIPS]

    tmp = args.keep or tempfile.mkdtemp(prefix="sotto_hf_")
    ok = True
    try:
        variants = {"hf-f32": ("float32", "json"), "hf-f16": ("float16", "vocab")}
        dirs = {}
        for name, (dtype, tok) in variants.items():
            d = os.path.join(tmp, name)
            t0 = time.time()
            convert(args.model, d, dtype=dtype, tokenizer=tok)
            print(f"converted {args.model} -> {d} ({dtype}, tokenizer {tok}) in {time.time() - t0:.1f} s: "
                  f"{sorted(os.listdir(d))}")
            dirs[name] = d

        ref_info = sotto_info(args.sotto, args.model)
        if ref_info["format"] != "ct2":
            print(f"FAIL: sotto info on {args.model} reports format {ref_info['format']!r}, expected 'ct2'")
            ok = False
        for name, d in dirs.items():
            info = sotto_info(args.sotto, d)
            if info["format"] != "hf":
                print(f"FAIL: {name}: sotto info reports format {info['format']!r}, expected 'hf'")
                ok = False
            for key in ("hparams", "special", "multilingual"):
                if info[key] != ref_info[key]:
                    print(f"FAIL: {name}: {key} differ:\n  ct2: {ref_info[key]}\n  hf:  {info[key]}")
                    ok = False
            print(f"sotto info {name}: format {info['format']}, hparams "
                  f"{'same' if info['hparams'] == ref_info['hparams'] else 'DIFFERENT'}, "
                  f"weight_bytes {info['weight_bytes']}")

        opts = ["--beam", "1", "--temperature", "0"]
        t0 = time.time()
        ref = run_sotto(args.sotto, args.model, files, opts, threads=args.threads)
        print(f"ct2: {len(files)} clips in {time.time() - t0:.1f} s")
        results = {}
        for name, d in dirs.items():
            t0 = time.time()
            results[name] = run_sotto(args.sotto, d, files, opts, threads=args.threads)
            print(f"{name}: {len(files)} clips in {time.time() - t0:.1f} s")

        for name, res in results.items():
            same = 0
            for clip, f in zip(CLIPS, files):
                a, b = segments(ref[f]), segments(res[f])
                if a == b:
                    same += 1
                    continue
                ok = False
                print(f"DIFF {name} {clip}:")
                for i in range(max(len(a), len(b))):
                    sa = a[i][:3] if i < len(a) else None
                    sb = b[i][:3] if i < len(b) else None
                    tag = "  " if i < len(a) and i < len(b) and a[i] == b[i] else "!!"
                    print(f"  {tag} ct2: {sa}\n  {tag} {name}: {sb}")
            n_seg = sum(len(ref[f]["segments"]) for f in files)
            print(f"{name}: {same}/{len(files)} clips identical to ct2 (segments: text, start, end, tokens; "
                  f"{n_seg} segments in the ct2 run)")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
