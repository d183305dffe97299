#!/usr/bin/env python3
"""Compares `sotto tokens` with the Hugging Face `tokenizers` reference.

For every string (the `text` column of the audio manifest, its upper- and
lower-case and space-prefixed variants, and a list of tricky strings):
  * `sotto tokens encode` must give exactly HF's encode(add_special_tokens=False)
    ids (HF told not to parse special tokens, as sotto never does);
  * `sotto tokens decode` of those ids must give the string back.
Then random id sequences (half of them drawn from the 256 single-byte tokens,
to split multi-byte characters) must decode exactly as HF decodes them.

The strings and id sequences go through `sotto tokens --jsonl` (one process
per model, not one per string: ~650 tokenizer loads took 70 s of the suite);
every 20th string, and every string holding U+0000 (which --jsonl refuses),
also goes through the plain one-text-per-process encode and decode, which
must answer alike. --jsonl's error lines are checked too: a bad line in the
middle is answered {"error": ...}, the lines around it are still answered,
and the exit status is 1.

Usage: test_tokenizer_ref.py --sotto PATH/TO/sotto --model models/tiny.en
           [--manifest ../shared/audio/manifest.tsv] [--random 200] [--seed 1]
Plain asserts are not used: every mismatch is reported, and the exit status is
1 if any check failed.
"""
import argparse
import csv
import json
import os
import random
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRICKY = [
    "", " ", "  ", "\n", "\n\n", "\t", " \t ", "a", "A", "0", "'", "''",
    "Hello world", " Hello world", "Hello  world", "  multiple   spaces  ",
    "trailing space ", "line one\nline two\n\nline four\n",
    "tabs\tand\t\ttabs", "mixed \t\n whitespace\r\nCRLF",
    "don't can't won't I'm you're we've they'll he'd it's",
    "DON'T I'M YOU'RE WE'VE THEY'LL HE'D IT'S", "'s 't 're 've 'm 'll 'd",
    "rock'n'roll ''quoted'' 'single' \"double\"",
    "1 12 123 1234 12345 3.14159 1,000,000 2024-05-01 10:30 -42 +7 1e10",
    "$100 50% #hashtag @user a&b x<y>z {braces} [brackets] (parens)",
    "...!!!???,,,;;;:::---___===+++***///\\\\\\|||~~~```^^^",
    "email@example.com https://example.com/path?q=1&r=2#frag",
    "\u201cSmart quotes\u201d \u2018single\u2019 \u2014 em dash \u2013 en dash \u2026 ellipsis",
    "\u00abguillemets\u00bb \u00bfQu\u00e9? \u00a1S\u00ed! \u00b7 \u2022 bullet \u00a7 \u00b6 \u00a9 \u00ae \u2122",
    "non\u00a0breaking\u00a0space and\u2009thin\u2009space and\u3000ideographic",
    "zero\u200bwidth\u200cjoiner\u200dmarks\ufeffbom",
    "Gr\u00fc\u00dfe aus M\u00fcnchen! \u00c4rger \u00fcber \u00d6l und Stra\u00dfe.",
    "Fa\u00e7ade, na\u00efve caf\u00e9, \u00e9l\u00e8ve, No\u00ebl, \u0153uvre, \u00e0 bient\u00f4t.",
    "Ma\u00f1ana el ni\u00f1o comi\u00f3 pi\u00f1a.",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\uff01",
    "\u30ab\u30bf\u30ab\u30ca \u3072\u3089\u304c\u306a \u6f22\u5b57 \uff21\uff22\uff23 \uff11\uff12\uff13",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u5427\u3002\u4e2d\u6587\u6807\u70b9\u201c\u5f15\u53f7\u201d",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0639\u0631\u0628\u064a \u05e2\u05d1\u05e8\u05d9\u05ea \u0939\u093f\u0928\u094d\u0926\u0940 \u0e44\u0e17\u0e22",
    "emoji \U0001f600\U0001f389\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1e9\U0001f1ea flags \u2764\ufe0f",
    "math \u2211 \u221a \u221e \u2248 \u2260 \u00b1 \u00d7 \u00f7 \u00bd \u00b2 \u00b3 \u2153 \u2162 \u2460",
    "combining e\u0301 a\u0308 n\u0303 and precomposed \u00e9 \u00e4 \u00f1",
    "control \x00\x01\x07\x1b\x7f chars and \u0085 NEL \u2028 LS \u2029 PS",
    "newly assigned \u1c89\u1c8a \U000105c0\U000105c1 \U00010d40\U00010d41",
    "<|endoftext|> <|en|> <|0.00|> are plain text here",
    "     leading spaces", "ends with newline\n", "a\n b\n  c\n   d",
    "The year 1999 and the 21st century; 3rd place, 100th time.",
    "x" * 300, "ab" * 200 + " " + "\u00e9" * 100, " " * 50 + "word",
]


def run_sotto(sotto, model, args, stdin=b""):
    proc = subprocess.run([sotto, "tokens", "--model", model] + args, input=stdin,
                          capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"sotto {' '.join(args[:3])} exited {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def sotto_encode(sotto, model, text):
    out = run_sotto(sotto, model, ["encode"], text.encode("utf-8")).decode().split()
    return [int(x) for x in out]


def sotto_decode(sotto, model, ids):
    out = run_sotto(sotto, model, ["decode"] + [str(i) for i in ids]).decode("utf-8")
    assert out.endswith("\n"), "decode output must end with a newline"
    return out[:-1]


def sotto_jsonl(sotto, model, cmd, values):
    """Runs `sotto tokens --jsonl cmd` on values (one JSON line each); returns
    (exit status, [answer per line])."""
    data = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values).encode("utf-8")
    proc = subprocess.run([sotto, "tokens", "--model", model, "--jsonl", cmd], input=data,
                          capture_output=True, timeout=300)
    lines = proc.stdout.decode("utf-8").splitlines()
    return proc.returncode, [json.loads(x) for x in lines]


def manifest_texts(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [r["text"] for r in rows if r.get("text")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sotto", required=True, help="path of the sotto binary")
    ap.add_argument("--model", required=True, help="model directory (with tokenizer.json)")
    ap.add_argument("--manifest", default=os.path.join(REPO, "..", "shared", "audio",
                                                       "manifest.tsv"))
    ap.add_argument("--random", type=int, default=200, help="random id sequences to decode")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    import tokenizers  # imported here so that --help works without it

    hf = tokenizers.Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    hf.encode_special_tokens = True  # "<|en|>" is plain text, as in sotto
    failures = []

    if not os.path.isfile(a.manifest):
        print(f"FAIL: manifest {a.manifest} not found (use --manifest)")
        return 1
    texts = manifest_texts(a.manifest)
    print(f"manifest: {len(texts)} texts from {a.manifest}")
    strings = []
    for t in texts:
        strings += [t, t.upper(), t.lower(), " " + t]
    strings.append(" ".join(texts))  # one long text
    strings += TRICKY
    seen = set()
    strings = [s for s in strings if not (s in seen or seen.add(s))]

    n_enc = n_rt = n_plain = 0
    jstrings = [s for s in strings if "\x00" not in s]
    code, got_all = sotto_jsonl(a.sotto, a.model, "encode", jstrings)
    if code != 0 or len(got_all) != len(jstrings):
        failures.append(f"encode --jsonl: exit {code}, {len(got_all)} answers for {len(jstrings)} lines")
        got_all = []
    encoded = dict(zip(jstrings, got_all))
    good = [s for s in jstrings if encoded.get(s) == hf.encode(s, add_special_tokens=False).ids]
    code, back_all = sotto_jsonl(a.sotto, a.model, "decode", [encoded[s] for s in good])
    if code != 0 or len(back_all) != len(good):
        failures.append(f"decode --jsonl: exit {code}, {len(back_all)} answers for {len(good)} lines")
        back_all = []
    decoded = dict(zip(good, back_all))
    for k, s in enumerate(strings):
        want = hf.encode(s, add_special_tokens=False).ids
        plain = "\x00" in s or k % 20 == 0
        try:
            got = sotto_encode(a.sotto, a.model, s) if plain else encoded.get(s)
            if got is None:
                continue  # counted in the --jsonl failure above
            if plain and s in encoded and encoded[s] != got:
                failures.append(f"encode {s[:60]!r}: --jsonl {encoded[s][:20]} != plain {got[:20]}")
            n_enc += 1
            if got != want:
                failures.append(f"encode {s[:60]!r}: sotto {got[:20]} != HF {want[:20]}")
                continue
            back = sotto_decode(a.sotto, a.model, got) if plain else decoded.get(s)
            if back is None:
                continue
            if plain and s in decoded and decoded[s] != back:
                failures.append(f"decode of {s[:60]!r}: --jsonl {decoded[s][:60]!r} != plain {back[:60]!r}")
            n_plain += plain
            n_rt += 1
            # sotto's decode returns a NUL-terminated string: compare up to a NUL.
            if back != s.split("\x00")[0]:
                failures.append(f"round trip {s[:60]!r}: got {back[:60]!r}")
        except RuntimeError as e:
            failures.append(f"{s[:60]!r}: {e}")

    # --jsonl's errors: each bad line answered on its own line, the others still answered, exit 1
    for cmd, values, bad in (("encode", ["a b", 7, "c"], 1), ("encode", ["x", "nul \x00 here", "y"], 1),
                             ("decode", [[64], "not ids", [65, 1.5], [1e20], [66]], (1, 2, 3))):
        bad = bad if isinstance(bad, tuple) else (bad,)
        code, ans = sotto_jsonl(a.sotto, a.model, cmd, values)
        errs = [i for i, x in enumerate(ans) if isinstance(x, dict) and "error" in x]
        if code != 1 or len(ans) != len(values) or tuple(errs) != bad:
            failures.append(f"{cmd} --jsonl with bad lines {values!r}: exit {code}, answers {ans!r}")

    rng = random.Random(a.seed)
    vocab = hf.get_vocab(with_added_tokens=True)
    n_ids = max(vocab.values()) + 1
    # Ids past HF's vocabulary (CTranslate2's timestamp tokens) are specials in
    # sotto and unknown to HF: both skip them. Byte 0 ("\u0100") is left out:
    # sotto's decode returns a NUL-terminated string.
    nul_ids = {i for t, i in vocab.items() if "\u0100" in t}
    pool = [i for i in range(n_ids + 1600) if i not in nul_ids]
    byte_pool = [i for i in range(256) if i not in nul_ids]
    seqs, wants = [], []
    for k in range(a.random):
        src = byte_pool if k % 2 else pool
        ids = [rng.choice(src) for _ in range(rng.randint(1, 12))]
        seqs.append(ids)
        wants.append(hf.decode(ids))
    code, got_all = sotto_jsonl(a.sotto, a.model, "decode", seqs)
    if code != 0 or len(got_all) != len(seqs):
        failures.append(f"random decodes --jsonl: exit {code}, {len(got_all)} answers for {len(seqs)} lines")
        got_all = []
    n_dec = 0
    for ids, want, got in zip(seqs, wants, got_all):
        n_dec += 1
        if got != want:
            failures.append(f"decode {ids}: sotto {got!r} != HF {want!r}")
    for ids, want in list(zip(seqs, wants))[::20]:  # the plain decode alike
        try:
            got = sotto_decode(a.sotto, a.model, ids)
            if got != want:
                failures.append(f"decode {ids} (plain): sotto {got!r} != HF {want!r}")
        except RuntimeError as e:
            failures.append(f"decode {ids} (plain): {e}")

    for f in failures[:50]:
        print("FAIL", f)
    print(f"{n_enc} strings encoded and compared with HF, {n_rt} round trips ({n_plain} also one "
          f"per process), {n_dec} random decodes compared; {len(failures)} failure(s)")
    return 1 if failures or n_enc == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
