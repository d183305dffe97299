"""Reference test of a multilingual model (models/base): language detection,
non-English transcription and translation, against faster-whisper (same
model, compute_type float32, beam_size 1, temperature 0).

For every non-English clip of the dev manifest (es, de, fr, ja, zh at least):
  - `sotto transcribe --language auto --beam 1 --temperature 0 --format json`
    must detect the manifest's language, and so must faster-whisper;
  - the transcripts of both are printed with their character error rate
    against the manifest text (Whisper's basic normalizer; characters, spaces
    removed for ja/zh);
  - sotto's transcript must equal faster-whisper's (whitespace stripped) on
    at least all but one clip.
Then `--task translate` on one clip must give non-empty English-looking text.

usage: test_multilingual.py --sotto build/sotto --model models/base [--manifest M]
"""
import argparse
import os
import sys
import time

from refcommon import DEFAULT_MANIFEST, load_manifest, read_wav_16k, run_sotto

LANGUAGES = {"es", "de", "fr", "ja", "zh"}  # must be present; any other non-English clip is tested too
CJK = {"ja", "zh", "ko", "yue"}
TRANSLATE_CLIP = "picovoice_de"

_basic = None


def norm_chars(text, lang):
    """Characters compared for the CER: basic-normalized, whitespace removed
    for CJK (no word spaces), collapsed elsewhere."""
    global _basic
    if _basic is None:
        from whisper_normalizer.basic import BasicTextNormalizer

        _basic = BasicTextNormalizer()
    t = _basic(text)
    return "".join(t.split()) if lang in CJK else " ".join(t.split())


def levenshtein(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def cer(ref, hyp, lang):
    r, h = norm_chars(ref, lang), norm_chars(hyp, lang)
    return 100.0 * levenshtein(r, h) / max(len(r), 1)


def squash(text):
    return "".join(text.split())


def run_faster_whisper(model_dir, rows, threads):
    from faster_whisper import WhisperModel

    m = WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=threads)
    out = {}
    for r in rows:
        segs, info = m.transcribe(read_wav_16k(r["file"]), beam_size=1, temperature=0.0)
        out[r["file"]] = ("".join(s.text for s in segs), info.language, info.language_probability)
    return out


def english_looking(text):
    letters = [c for c in text if c.isalpha()]
    ascii_letters = [c for c in letters if c.isascii()]
    return len(letters) >= 3 and len(ascii_letters) >= 0.9 * len(letters)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sotto", required=True)
    ap.add_argument("--model", required=True, help="multilingual CTranslate2 model (base)")
    ap.add_argument("--manifest", default=DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    rows = [r for r in load_manifest(args.manifest) if r["language"] != "en"]
    found = {r["language"] for r in rows}
    if not LANGUAGES <= found:
        sys.exit(f"manifest lacks clips for {sorted(LANGUAGES - found)}")
    files = [r["file"] for r in rows]

    t0 = time.time()
    ours = run_sotto(args.sotto, args.model, files,
                     ["--language", "auto", "--beam", "1", "--temperature", "0"], threads=args.threads)
    t_sotto = time.time() - t0
    t0 = time.time()
    theirs = run_faster_whisper(args.model, rows, args.threads)
    t_fw = time.time() - t0

    ok = True
    same = 0
    for r in rows:
        s, (f, f_lang, f_prob) = ours[r["file"]], theirs[r["file"]]
        lang = r["language"]
        s_lang, s_prob = s["language"], s["language_probability"]
        identical = squash(s["text"]) == squash(f)
        same += identical
        print(f"{r['id']} [{lang}]: sotto {s_lang} p={s_prob:.4f}, faster-whisper {f_lang} p={f_prob:.4f}; "
              f"{'identical' if identical else 'DIFFERENT'}")
        print(f"  reference:      {r['text']}")
        print(f"  sotto:          {s['text'].strip()}   (CER {cer(r['text'], s['text'], lang):.1f}%)")
        print(f"  faster-whisper: {f.strip()}   (CER {cer(r['text'], f, lang):.1f}%)")
        if s_lang != lang:
            print(f"  FAIL: sotto detected {s_lang!r}, manifest says {lang!r}")
            ok = False
        if f_lang != lang:
            print(f"  FAIL: faster-whisper detected {f_lang!r}, manifest says {lang!r}")
            ok = False
        if abs(s_prob - f_prob) > 0.01:
            print(f"  note: language probabilities differ by {s_prob - f_prob:+.4f}")
    n = len(rows)
    print(f"transcripts identical to faster-whisper: {same}/{n}")
    if same < n - 1:
        print(f"FAIL: only {same}/{n} identical (need >= {n - 1})")
        ok = False

    tr_row = next((r for r in rows if r["id"] == TRANSLATE_CLIP), rows[0])
    tr = run_sotto(args.sotto, args.model, [tr_row["file"]],
                   ["--language", "auto", "--task", "translate", "--beam", "1", "--temperature", "0"],
                   threads=args.threads)[tr_row["file"]]
    text = tr["text"].strip()
    print(f"translate {tr_row['id']} [{tr['language']}]: {text}")
    if not english_looking(text):
        print("FAIL: translation is empty or not English-looking")
        ok = False
    print(f"wall: sotto {t_sotto:.1f} s (incl. model load), faster-whisper {t_fw:.1f} s")
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
