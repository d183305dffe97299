"""Shared helpers for sotto's reference tests and benchmarks: the dev-set
manifest, Whisper's English text normalizer, WER, and running the sotto CLI.
"""
import hashlib
import json
import os
import subprocess
import sys
import wave

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MANIFEST = os.path.join(os.path.dirname(REPO), "shared", "audio", "manifest.tsv")


def load_manifest(path, languages=None):
    """Rows of manifest.tsv as dicts (id, file (absolute), seconds, language, text)."""
    if not os.path.exists(path):
        sys.exit(f"manifest not found: {path} (pass --manifest)")
    base = os.path.dirname(os.path.abspath(path))
    rows = []
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            if not line.strip():
                continue
            r = dict(zip(header, line.rstrip("\n").split("\t")))
            r["file"] = os.path.join(base, r["file"])
            r["seconds"] = float(r["seconds"])
            if languages is None or r["language"] in languages:
                rows.append(r)
    return rows


_normalizer = None


def cpu_q8_fast():
    """True where sotto's q8 weights run on the CPU's int8 dot product (every
    AVX-512 subset kernels/gemm_q8.c needs, as /proc/cpuinfo names them, and
    SOTTO_Q8_GEMM not "0"): there the server's live sessions default to q8."""
    if os.environ.get("SOTTO_Q8_GEMM", "") == "0" or os.environ.get("SOTTO_LINEAR_REF", "") not in ("", "0"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return all(x in flags for x in ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"))


def normalize(text):
    """Whisper's English text normalizer (the whisper-normalizer package)."""
    global _normalizer
    if _normalizer is None:
        from whisper_normalizer.english import EnglishTextNormalizer

        _normalizer = EnglishTextNormalizer()
    return " ".join(_normalizer(text).split())


def edit_distance(ref, hyp):
    """Word-level Levenshtein distance."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def corpus_wer(refs, hyps):
    """Corpus WER (errors / reference words) of normalized texts, in percent."""
    errors = words = 0
    for r, h in zip(refs, hyps):
        rw, hw = normalize(r).split(), normalize(h).split()
        errors += edit_distance(rw, hw)
        words += len(rw)
    return 100.0 * errors / max(words, 1)


def repeated_run(words, max_pattern=16, min_copies=3, min_words=9):
    """The longest run of one phrase repeated back to back in a word list, as
    (pattern length, copies, start index), or None: a phrase of up to
    max_pattern words at least min_copies times in a row, covering at least
    min_words words. The word-level twin of engine/repetition.c's rule, to
    tell a repetition loop in a transcript from ordinary text."""
    best = None
    n = len(words)
    for p in range(1, max_pattern + 1):
        i = 0
        while i + 2 * p <= n:
            c = 1
            while i + (c + 1) * p <= n and words[i + c * p:i + (c + 1) * p] == words[i:i + p]:
                c += 1
            if c >= min_copies and c * p >= min_words and (best is None or c * p > best[0] * best[1]):
                best = (p, c, i)
            i += c * p if c > 1 else 1
    return best


def is_loop(reference_norm, hypothesis_norm):
    """1 if the (normalized) hypothesis holds a repetition loop that the
    reference does not, or runs away to over twice the reference's words
    plus 10."""
    rw, hw = reference_norm.split(), hypothesis_norm.split()
    if len(hw) > 2 * len(rw) + 10:
        return 1
    return int(repeated_run(hw) is not None and repeated_run(rw) is None)


def read_wav_16k(path):
    """The dev clips are 16 kHz mono s16; returns float32 in [-1, 1)."""
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        data = w.readframes(w.getnframes())
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def _file_id(path):
    st = os.stat(path)
    return f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _model_id(model):
    """The model folder's files by name, size and time (a re-fetch or conversion changes it)."""
    parts = []
    if os.path.isdir(model):
        for name in sorted(os.listdir(model)):
            f = os.path.join(model, name)
            if os.path.isfile(f):
                st = os.stat(f)
                parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return f"{os.path.abspath(model)}|{'|'.join(parts)}"


_binary_digests = {}
last_cached = 0  # how many results the latest run_sotto call took from SOTTO_TEST_CACHE


def _run_key(sotto, model, extra, threads):
    """What a result depends on besides the audio file: the binary's SHA-256 (hashed
    once per binary), the model files, the options and the thread count."""
    b = os.path.realpath(sotto)
    st = os.stat(b)
    k = (b, st.st_size, st.st_mtime_ns)
    if k not in _binary_digests:
        with open(b, "rb") as f:
            _binary_digests[k] = hashlib.sha256(f.read()).hexdigest()
    # the CLI's default ("all cores") is OpenMP's: the CPUs this process may run on,
    # unless OMP_NUM_THREADS says otherwise
    n = threads or os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0))
    return json.dumps([_binary_digests[k], _model_id(model), list(extra), str(n)])


def run_sotto(sotto, model, files, extra=(), threads=None, timeout=3600):
    """Runs `sotto transcribe --format json` on files; returns {file: result dict}.

    With SOTTO_TEST_CACHE set (scripts/test.sh sets it to build/test-cache), a
    file's result is kept there under the exact binary (its SHA-256), model
    files, options, thread count and audio file, and later calls with the same
    inputs reuse it instead of transcribing again: the reference tests run the
    same offline transcription of the dev set more than once per suite. Unset,
    every call transcribes."""
    cache = os.environ.get("SOTTO_TEST_CACHE")
    out, keys = {}, {}
    if cache:
        os.makedirs(cache, exist_ok=True)
        run_key = _run_key(sotto, model, extra, threads)
        for f in files:
            keys[f] = hashlib.sha256((run_key + _file_id(f)).encode()).hexdigest()
            try:
                with open(os.path.join(cache, keys[f] + ".json")) as fh:
                    out[f] = dict(json.load(fh), file=f)
            except (OSError, ValueError):
                pass
    todo = [f for f in files if f not in out]
    global last_cached
    last_cached = len(files) - len(todo)
    if todo:
        cmd = [sotto, "transcribe", "--model", model, "--format", "json", "--no-progress"]
        if threads:
            cmd += ["--threads", str(threads)]
        cmd += list(extra) + list(todo)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            sys.exit(f"sotto failed ({p.returncode}):\n{p.stderr[-4000:]}")
        for line in p.stdout.splitlines():
            if line.strip():
                r = json.loads(line)
                out[r["file"]] = r
                if cache and r["file"] in keys:
                    tmp = os.path.join(cache, keys[r["file"]] + f".{os.getpid()}.tmp")
                    with open(tmp, "w") as fh:
                        json.dump(r, fh)
                    os.replace(tmp, os.path.join(cache, keys[r["file"]] + ".json"))
    missing = [f for f in files if f not in out]
    if missing:
        sys.exit(f"sotto gave no result for {missing}")
    return out
