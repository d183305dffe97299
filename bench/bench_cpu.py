#!/usr/bin/env python3
"""CPU benchmark: sotto (f32 weights; `sotto-f16`, `sotto-bf16`, `sotto-q8`: --weights
f16 / bf16 / q8; f16 is the CLI's default for a float16 checkpoint)
against faster-whisper (float32 and int8) and whisper.cpp (`wcpp`: f16 ggml,
`wcpp-q8`: q8_0 ggml; the pywhispercpp package) on the dev clips.

Each engine runs in its own process over all the clips (model loaded once),
with the same model directory, thread count and decoding settings. Measured per
engine: per-clip wall time of the transcription (after the model is loaded, WAV
reading excluded, log-mel included), model load time, peak RSS of the engine
process (wait4 ru_maxrss), user+sys CPU time, and corpus WER against the
manifest references after Whisper's English normalizer.

whisper.cpp reads the same model: bench/ggml_convert.py converts the
CTranslate2 directory to a ggml file, cached under build/ggml/ (--ggml-dir) and
converted again when the model or the converter changes; the conversion is not
part of any timing. Its decoding is set to match: greedy (or beam search with
--beam > 1), best_of, temperature with the same fallback steps, conditioned on
the previous text, non-speech tokens suppressed.

    python3 bench/bench_cpu.py --sotto build/sotto --model models/tiny.en --threads 2
    python3 bench/bench_cpu.py --engines sotto,fw-float32,wcpp --limit 3

Validate with --limit 3; the full run belongs on a quiet machine.
"""
import argparse
import datetime
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "ref"))

import refcommon  # noqa: E402  (tests/ref: manifest, normalizer, WER, WAV reader)

ENGINES = ("sotto", "sotto-f16", "sotto-bf16", "sotto-q8", "fw-float32", "fw-int8", "wcpp",
           "wcpp-q8")
SOTTO_WEIGHTS = {"sotto": "f32", "sotto-f16": "f16", "sotto-bf16": "bf16",
                 "sotto-q8": "q8"}  # sotto's --weights
FW_COMPUTE = {"fw-float32": "float32", "fw-int8": "int8"}
WCPP_TYPE = {"wcpp": "f16", "wcpp-q8": "q8_0"}  # ggml weight type (bench/ggml_convert.py)


def compute_type(engine):
    return SOTTO_WEIGHTS.get(engine) or FW_COMPUTE.get(engine) or WCPP_TYPE[engine]


# --------------------------------------------------------------------------
# faster-whisper worker (runs in a child process: `bench_cpu.py --fw-worker JSON`)
# --------------------------------------------------------------------------

def fw_worker(cfg):
    """Loads the model once, transcribes every clip, prints one JSON line each."""
    t0 = time.monotonic()
    import ctranslate2
    import faster_whisper
    from faster_whisper import WhisperModel
    read_wav_16k = refcommon.read_wav_16k

    t1 = time.monotonic()
    m = WhisperModel(cfg["model"], device="cpu", compute_type=cfg["compute_type"],
                     cpu_threads=cfg["threads"])
    load = time.monotonic() - t1
    lang = cfg["language"]
    if lang is None and not m.model.is_multilingual:
        lang = "en"
    print(json.dumps({"event": "load", "load_seconds": load, "import_seconds": t1 - t0,
                      "faster_whisper": faster_whisper.__version__,
                      "ctranslate2": ctranslate2.__version__,
                      "multilingual": bool(m.model.is_multilingual), "language": lang}),
          flush=True)
    for f in cfg["files"]:
        audio = read_wav_16k(f)
        t = time.monotonic()
        segments, _ = m.transcribe(audio, beam_size=cfg["beam"], best_of=cfg["best_of"],
                                   temperature=cfg["temperature"], language=lang)
        text = "".join(s.text for s in segments)  # the generator does the work
        wall = time.monotonic() - t
        print(json.dumps({"file": f, "text": text, "duration": len(audio) / 16000.0,
                          "wall_seconds": wall}), flush=True)


# --------------------------------------------------------------------------
# whisper.cpp worker (child process: `bench_cpu.py --wcpp-worker JSON`)
# --------------------------------------------------------------------------

def wcpp_temperature(temps):
    """faster-whisper's temperature (a value or a fallback list) as whisper.cpp's
    (temperature, temperature_inc, note): whisper.cpp falls back from t0 in steps
    of inc up to 1.0, so only such lists map exactly."""
    if not isinstance(temps, list):
        return float(temps), 0.0, ""
    t0 = temps[0]
    if len(temps) == 1:
        return t0, 0.0, ""
    inc = temps[1] - temps[0]
    n = int(round((1.0 - t0) / inc)) + 1 if inc > 0 else 0
    exact = inc > 0 and len(temps) == n and all(
        abs(t - (t0 + k * inc)) < 1e-6 for k, t in enumerate(temps))
    return t0, inc, "" if exact else (f" (NOT the same list: whisper.cpp only falls back "
                                      f"from {t0:g} in steps of {inc:g} up to 1.0)")


def wcpp_versions():
    """(pywhispercpp version, whisper.cpp version from the bundled libwhisper's name)."""
    ver = pkg_version("pywhispercpp")
    lib = "unknown"
    try:
        import importlib.util
        spec = importlib.util.find_spec("pywhispercpp")
        libs = os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "pywhispercpp.libs")
        for n in sorted(os.listdir(libs)):
            m = re.match(r"libwhisper.*\.so\.(\d+\.\d+\.\d+)$", n)
            if m:
                lib = m.group(1)
    except Exception:
        pass
    return ver, lib


def wcpp_worker(cfg):
    """Loads the ggml model once, transcribes every clip, prints one JSON line each."""
    # whisper.cpp and the binding may print: keep stdout for the JSON lines only
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def emit(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    t0 = time.monotonic()
    import numpy as np
    import _pywhispercpp as pw
    from pywhispercpp.model import Model
    read_wav_16k = refcommon.read_wav_16k

    if not os.path.isfile(cfg["ggml"]):  # a name that is not a file would be downloaded
        sys.exit(f"ggml model not found: {cfg['ggml']}")
    beam = cfg["beam"] > 1
    temp, temp_inc, _ = wcpp_temperature(cfg["temperature"])
    params = dict(n_threads=cfg["threads"], translate=False,
                  # a fresh context per clip, conditioned on the previous text within it, as
                  # the others: whisper.cpp keeps the last call's text in its state and, with
                  # no_context False, prompts the next call (the next clip) with it; the 70 s
                  # concat clip, after the clip it begins with, then lost its first 20 s
                  no_context=True,
                  suppress_nst=True,           # non-speech tokens suppressed, as the others
                  suppress_blank=True, no_timestamps=False, single_segment=False,
                  token_timestamps=False, temperature=temp, temperature_inc=temp_inc,
                  greedy={"best_of": cfg["best_of"]},
                  print_progress=False, print_realtime=False, print_timestamps=False)
    if beam:
        params["beam_search"] = {"beam_size": cfg["beam"], "patience": -1.0}
    t1 = time.monotonic()
    m = Model(os.path.abspath(cfg["ggml"]), params_sampling_strategy=1 if beam else 0,
              redirect_whispercpp_logs_to=False, **params)
    load = time.monotonic() - t1
    multilingual = bool(pw.whisper_is_multilingual(m._ctx))
    # as fw_worker: English-only models get "en" (whisper.cpp would run detection on "auto")
    lang = cfg["language"] or ("auto" if multilingual else "en")
    # what whisper.cpp was given, read back from its whisper_full_params
    got = m.get_params()

    def sub(key, field):
        v = got.get(key)
        return v.get(field) if isinstance(v, dict) else getattr(v, field, v)

    decoding = (f"strategy {got.get('strategy', 'beam search' if beam else 'greedy')}, "
                f"beam_size {sub('beam_search', 'beam_size') if beam else 1}, "
                f"best_of {sub('greedy', 'best_of')}, temperature {got.get('temperature')} "
                f"+ steps of {got.get('temperature_inc')}, n_threads {got.get('n_threads')}, "
                f"no_context {got.get('no_context')}, suppress_nst {got.get('suppress_nst')}, "
                f"flash_attn {getattr(m._context_params, 'flash_attn', '?')}")
    ver, lib = wcpp_versions()
    emit({"event": "load", "load_seconds": load, "import_seconds": t1 - t0,
          "pywhispercpp": ver, "whisper_cpp": lib,
          "system_info": str(Model.system_info()).strip(),
          "multilingual": multilingual,
          "language": lang, "decoding": decoding})
    for f in cfg["files"]:
        audio = np.ascontiguousarray(read_wav_16k(f), dtype=np.float32)
        t = time.monotonic()
        segments = m.transcribe(audio, language=lang)
        wall = time.monotonic() - t
        # the binding strips each segment; whisper.cpp's segment texts carry their spaces
        text = " ".join(s.text for s in segments)
        emit({"file": f, "text": text, "duration": len(audio) / 16000.0, "wall_seconds": wall})


# --------------------------------------------------------------------------
# running one engine process
# --------------------------------------------------------------------------

def run_child(cmd, timeout):
    """Runs cmd to completion; returns rc, stdout, stderr, wall and wait4 rusage."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe)
        timed_out = []

        def kill():
            timed_out.append(True)
            try:
                os.kill(p.pid, signal.SIGKILL)  # not p.kill(): that may reap the child
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode("utf-8", "replace")
        err = fe.read().decode("utf-8", "replace")
    return {"cmd": cmd, "rc": p.returncode, "timed_out": bool(timed_out), "stdout": out,
            "stderr": err, "process_wall_seconds": wall,
            "maxrss_kb": ru.ru_maxrss,  # KiB on Linux
            "utime": ru.ru_utime, "stime": ru.ru_stime}


def parse_json_lines(text):
    objs, bad = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            objs.append(json.loads(line))
        except json.JSONDecodeError:
            bad += 1
    return objs, bad


def run_engine(engine, args, files, language):
    """One process of one engine over all files. Returns a run record."""
    if engine in SOTTO_WEIGHTS:
        cmd = [args.sotto, "transcribe", "--model", args.model, "--weights", SOTTO_WEIGHTS[engine],
               "--format", "json",
               "--no-progress", "--threads", str(args.threads), "--beam", str(args.beam),
               "--best-of", str(args.best_of), "--temperature", args.temperature]
        if language:
            cmd += ["--language", language]
        cmd += files
        res = run_child(cmd, args.timeout)
        m = re.search(r"model .* loaded in ([0-9.]+) s", res["stderr"])
        res["load_seconds"] = float(m.group(1)) if m else None
    elif engine in WCPP_TYPE:
        cfg = {"ggml": args.ggml[engine], "threads": args.threads, "beam": args.beam,
               "best_of": args.best_of, "temperature": parse_temperature(args.temperature),
               "language": language, "files": files}
        cmd = [sys.executable, os.path.abspath(__file__), "--wcpp-worker", json.dumps(cfg)]
        res = run_child(cmd, args.timeout)
        res["load_seconds"] = None
    else:
        cfg = {"model": args.model, "compute_type": FW_COMPUTE[engine], "threads": args.threads,
               "beam": args.beam, "best_of": args.best_of,
               "temperature": parse_temperature(args.temperature), "language": language,
               "files": files}
        cmd = [sys.executable, os.path.abspath(__file__), "--fw-worker", json.dumps(cfg)]
        res = run_child(cmd, args.timeout)
        res["load_seconds"] = None
    objs, bad = parse_json_lines(res["stdout"])
    res["bad_lines"] = bad
    res["clips"] = {}
    for o in objs:
        if o.get("event") == "load":
            res["load_seconds"] = o["load_seconds"]
            res["worker"] = o
        elif "file" in o:
            res["clips"][o["file"]] = {"text": o.get("text", ""),
                                       "duration": o.get("duration"),
                                       "wall_seconds": o.get("wall_seconds")}
    del res["stdout"]
    res["stderr_tail"] = res.pop("stderr")[-4000:]
    res["engine"] = engine
    return res


def parse_temperature(s):
    vals = [float(x) for x in s.split(",") if x.strip()]
    return vals[0] if len(vals) == 1 else vals


# --------------------------------------------------------------------------
# conditions
# --------------------------------------------------------------------------

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pkg_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return "not installed"


def blas_core(bench_engine, model, timeout=300):
    if not bench_engine or not os.access(bench_engine, os.X_OK):
        return "n/a (no bench_engine)"
    try:
        p = subprocess.run([bench_engine, "--model", model, "--threads", "1", "--reps", "1",
                            "--steps", "1"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"n/a ({e.__class__.__name__})"
    m = re.search(r"BLAS core\s+([^,\s]+)", p.stdout + p.stderr)
    return m.group(1) if m else f"n/a (bench_engine rc {p.returncode})"


def model_multilingual(sotto, model):
    """From `sotto info`, else from the vocabulary size (51865+ is multilingual)."""
    try:
        p = subprocess.run([sotto, "info", "--model", model], capture_output=True, text=True,
                           timeout=120)
        if p.returncode == 0:
            return bool(json.loads(p.stdout)["multilingual"])
    except Exception:
        pass
    try:
        with open(os.path.join(model, "vocabulary.txt"), encoding="utf-8") as f:
            return sum(1 for _ in f) >= 51865
    except OSError:
        return None


def git_head():
    try:
        p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        return p.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def wav_seconds(path):
    with wave.open(path) as w:
        return w.getnframes() / float(w.getframerate())


def warm_page_cache(paths):
    """Reads the files once so that no engine pays for a cold disk."""
    for p in paths:
        try:
            with open(p, "rb") as f:
                while f.read(1 << 22):
                    pass
        except OSError:
            pass


# --------------------------------------------------------------------------
# statistics and report
# --------------------------------------------------------------------------

def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def summarize(engine, runs, files, seconds, refs):
    """Per-clip walls are medians over the repeats; totals sum those medians."""
    ok = [r for r in runs if r["rc"] == 0]
    walls = {}
    for f in files:
        w = [r["clips"][f]["wall_seconds"] for r in ok if f in r["clips"]]
        if len(w) == len(runs):
            walls[f] = statistics.median(w)
    complete = len(walls) == len(files) and ok and len(ok) == len(runs)
    s = {"engine": engine, "complete": bool(complete)}
    if not complete:
        return s
    texts = {f: runs[0]["clips"][f]["text"] for f in files}
    varying = sum(1 for f in files if any(r["clips"][f]["text"] != texts[f] for r in runs[1:]))
    per = [walls[f] for f in files]
    loads = [r["load_seconds"] for r in runs if r["load_seconds"] is not None]
    total_wall = sum(per)
    total_audio = sum(seconds[f] for f in files)
    s.update({
        "compute_type": compute_type(engine),
        "total_audio_seconds": total_audio,
        "total_wall_seconds": total_wall,
        "rtfx": total_audio / total_wall if total_wall > 0 else None,
        "median_wall_ms": 1000 * statistics.median(per),
        "p90_wall_ms": 1000 * percentile(per, 0.9),
        "load_seconds": statistics.median(loads) if loads else None,
        "peak_rss_mb": max(r["maxrss_kb"] for r in runs) / 1024.0,
        "wer": refcommon.corpus_wer([refs[f] for f in files], [texts[f] for f in files]),
        "process_wall_seconds": statistics.median(r["process_wall_seconds"] for r in runs),
        "cpu_seconds": statistics.median(r["utime"] + r["stime"] for r in runs),
        "sum_clip_wall_seconds_per_run": [sum(r["clips"][f]["wall_seconds"] for f in files)
                                          for r in runs],
        "texts_varying_across_repeats": varying,
        "walls": walls, "texts": texts,
    })
    return s


def print_report(cond, summaries, files, seconds, ids, args):
    peers = ["faster-whisper"] + (["whisper.cpp"] if any(e in WCPP_TYPE for e in summaries)
                                  else [])
    print(f"# sotto vs {' vs '.join(peers)}, CPU\n")
    print("## Conditions\n")
    for k, v in cond.items():
        print(f"- {k}: {v}")
    print()

    base = summaries.get("sotto")
    base_wall = base["total_wall_seconds"] if base and base["complete"] else None
    print("## Results\n")
    rep = f" (per-clip walls are medians of {args.repeat} runs; totals sum them)" \
        if args.repeat > 1 else ""
    print(f"Wall = transcription only, model already loaded{rep}. "
          "Speed vs sotto = engine total wall / sotto total wall (>1: sotto is faster).\n")
    print("| engine | compute | audio s | wall s | RTFx | median ms/clip | p90 ms/clip "
          "| load s | peak RSS MB | WER % | speed vs sotto |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for e, s in summaries.items():
        if not s["complete"]:
            print(f"| {e} | FAILED | | | | | | | | | |")
            continue
        ratio = s["total_wall_seconds"] / base_wall if base_wall else None
        print(f"| {e} | {s['compute_type']} | {s['total_audio_seconds']:.1f} "
              f"| {s['total_wall_seconds']:.2f} | {fmt(s['rtfx'], '.2f')} "
              f"| {s['median_wall_ms']:.0f} | {s['p90_wall_ms']:.0f} "
              f"| {fmt(s['load_seconds'], '.2f')} | {s['peak_rss_mb']:.0f} "
              f"| {s['wer']:.2f} | {fmt(ratio, '.2f')} |")
    print()

    done = {e: s for e, s in summaries.items() if s["complete"]}
    if not done:
        return
    # process accounting: does load + per-clip wall explain the process wall?
    print("Process accounting (medians over runs; 'other' = process wall - load - "
          "sum of clip walls: start-up, imports, WAV reading, output, exit):\n")
    print("| engine | process wall s | load s | sum clip wall s | other s "
          "| CPU user+sys s | CPU s / wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for e, s in done.items():
        pw = s["process_wall_seconds"]
        other = pw - (s["load_seconds"] or 0) - s["total_wall_seconds"]
        print(f"| {e} | {pw:.2f} | {fmt(s['load_seconds'], '.2f')} "
              f"| {s['total_wall_seconds']:.2f} | {other:.2f} | {s['cpu_seconds']:.2f} "
              f"| {s['cpu_seconds'] / pw:.2f} |")
    print()

    # clip-length buckets
    buckets = [("< 10 s", 0, 10), ("10-30 s", 10, 30), ("> 30 s", 30, float("inf"))]
    print("Median wall ms per clip by clip length (RTFx of the bucket in brackets):\n")
    print("| clips | n | " + " | ".join(done) + " |")
    print("|---|---:|" + "---:|" * len(done))
    for name, lo, hi in buckets:
        fs = [f for f in files if lo <= seconds[f] < hi]
        if not fs:
            continue
        audio = sum(seconds[f] for f in fs)
        cells = []
        for s in done.values():
            w = [s["walls"][f] for f in fs]
            cells.append(f"{1000 * statistics.median(w):.0f} ({audio / sum(w):.1f}x)")
        print(f"| {name} | {len(fs)} | " + " | ".join(cells) + " |")
    print()

    # agreement of normalized texts
    if "sotto" in done:
        for peer in ("sotto-f16", "sotto-bf16", "sotto-q8", "fw-float32", "fw-int8", "wcpp",
                     "wcpp-q8"):
            if peer not in done:
                continue
            diff = [f for f in files if refcommon.normalize(done["sotto"]["texts"][f])
                    != refcommon.normalize(done[peer]["texts"][f])]
            print(f"Normalized text identical, sotto vs {peer}: "
                  f"{len(files) - len(diff)}/{len(files)} clips"
                  + (f" (differ: {', '.join(ids[f] for f in diff[:10])}"
                     f"{' ...' if len(diff) > 10 else ''})" if diff else ""))
    # the converted model against the original one: whisper.cpp vs faster-whisper
    for a, b in (("fw-float32", "wcpp"), ("fw-int8", "wcpp-q8")):
        if a in done and b in done:
            diff = [f for f in files if refcommon.normalize(done[a]["texts"][f])
                    != refcommon.normalize(done[b]["texts"][f])]
            print(f"Normalized text identical, {a} vs {b}: "
                  f"{len(files) - len(diff)}/{len(files)} clips"
                  + (f" (differ: {', '.join(ids[f] for f in diff[:10])}"
                     f"{' ...' if len(diff) > 10 else ''})" if diff else ""))
    for e, s in done.items():
        if s["texts_varying_across_repeats"]:
            print(f"Note: {e} texts varied across repeats on "
                  f"{s['texts_varying_across_repeats']} clips (WER uses the first run).")
    print()


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sotto", default=os.path.join(REPO, "build", "sotto"))
    ap.add_argument("--bench-engine", default=None,
                    help="for the OpenBLAS core (default: bench_engine next to --sotto)")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--language", default="en",
                    help="manifest language filter, comma-separated, or 'all' (default en)")
    ap.add_argument("--limit", type=int, default=0, help="first N clips (default all)")
    ap.add_argument("--min-seconds", type=float, default=0.0,
                    help="only clips at least this long (e.g. 60: the long files)")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--best-of", type=int, default=5,
                    help="samples per non-zero temperature, all engines (their default 5)")
    ap.add_argument("--temperature", default="0",
                    help="temperature or comma-separated fallback list (default 0)")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each engine process, interleaved across engines")
    ap.add_argument("--ggml-dir", default=os.path.join(REPO, "build", "ggml"),
                    help="cache of the whisper.cpp model converted from --model")
    ap.add_argument("--json", default=None, help="save raw per-clip results here")
    ap.add_argument("--timeout", type=float, default=7200, help="per engine process, s")
    args = ap.parse_args()

    rc = refcommon
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        sys.exit(f"unknown engines {bad}; choose from {', '.join(ENGINES)}")
    if args.repeat < 1 or args.threads < 1:
        sys.exit("--repeat and --threads must be >= 1")
    args.sotto = os.path.abspath(args.sotto)
    if any(e in SOTTO_WEIGHTS for e in engines) and not os.access(args.sotto, os.X_OK):
        sys.exit(f"sotto binary not found: {args.sotto}")
    if not os.path.isdir(args.model):
        sys.exit(f"model directory not found: {args.model}")
    temps = parse_temperature(args.temperature)  # validates

    # whisper.cpp: the same model, converted to ggml (cached; not timed). In a child
    # process: the engine processes inherit this one's peak RSS as their ru_maxrss floor
    args.ggml = {}
    for e in engines:
        if e in WCPP_TYPE:
            p = subprocess.run([sys.executable, os.path.join(HERE, "ggml_convert.py"), args.model,
                                "--cache-dir", args.ggml_dir, "--type", WCPP_TYPE[e]],
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"{e}: converting {args.model} to ggml failed:\n{p.stderr[-2000:]}")
            info = json.loads(p.stdout.splitlines()[0])
            print(f"[{e}] ggml model {info['out']} "
                  f"({'converted now' if info['converted_now'] else 'cached'})",
                  file=sys.stderr, flush=True)
            args.ggml[e] = info["out"]

    langs = None if args.language == "all" else set(args.language.split(","))
    rows = rc.load_manifest(args.manifest or rc.DEFAULT_MANIFEST, languages=langs)
    if args.min_seconds > 0:
        rows = [r for r in rows if r["seconds"] >= args.min_seconds]
        if not rows:
            sys.exit(f"no clip of at least {args.min_seconds} s in the manifest")
    if args.limit:
        rows = rows[:args.limit]
    if not rows:
        sys.exit("no clips selected")
    files = [r["file"] for r in rows]
    refs = {r["file"]: r["text"] for r in rows}
    ids = {r["file"]: r["id"] for r in rows}
    seconds = {f: wav_seconds(f) for f in files}

    multilingual = model_multilingual(args.sotto, args.model)
    # the language both engines are told: one manifest language with a multilingual
    # model; English-only models get none (sotto) / "en" (faster-whisper)
    language = None
    if multilingual and langs and len(langs) == 1:
        language = next(iter(langs))

    be = args.bench_engine or os.path.join(os.path.dirname(args.sotto), "bench_engine")
    core = blas_core(be, args.model) if "sotto" in engines else "n/a (sotto not run)"

    load0 = os.getloadavg()
    cond = {
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "CPU": cpu_model(),
        "cores (os.cpu_count / affinity)": f"{os.cpu_count()} / {len(os.sched_getaffinity(0))}",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "threads (all engines)": args.threads,
        "model": f"{args.model} ({'multilingual' if multilingual else 'English-only'}"
                 f"{', language ' + language if language else ''})",
        "decoding": f"beam {args.beam}, temperature {args.temperature}, best_of {args.best_of}",
        "clips": f"{len(files)} (manifest language {args.language}"
                 f"{', at least ' + str(args.min_seconds) + ' s' if args.min_seconds > 0 else ''}"
                 f"{', first ' + str(args.limit) if args.limit else ''}) from "
                 f"{args.manifest or rc.DEFAULT_MANIFEST}",
        "total audio s": f"{sum(seconds.values()):.2f}",
        "engines": ", ".join(engines),
        "repeats": args.repeat,
        "sotto": f"{args.sotto} (repo {git_head()})",
        "OpenBLAS core sotto uses": core,
        "faster-whisper / ctranslate2 / numpy": f"{pkg_version('faster-whisper')} / "
                                                f"{pkg_version('ctranslate2')} / "
                                                f"{pkg_version('numpy')}",
    }
    if args.ggml:
        t0, inc, note = wcpp_temperature(temps)
        ver, lib = wcpp_versions()
        cond["pywhispercpp / whisper.cpp"] = f"{ver} / {lib}"
        cond["whisper.cpp model"] = ", ".join(f"{e}: {p} ({os.path.getsize(p) / 1e6:.1f} MB)"
                                              for e, p in args.ggml.items())
        cond["whisper.cpp decoding"] = (
            f"{'beam search, beam_size ' + str(args.beam) if args.beam > 1 else 'greedy'}, "
            f"best_of {args.best_of}, temperature {t0:g} + fallback steps of {inc:g}{note}, "
            "no_context true (a fresh prompt per clip; previous text within it), suppress_nst true")
    cond.update({
        "env": ", ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ)
                         if k.startswith(("OMP_", "OPENBLAS_", "MKL_", "CT2_", "SOTTO_")))
               or "(no OMP_/OPENBLAS_/MKL_/CT2_/SOTTO_ variables)",
    })

    warm_page_cache([os.path.join(args.model, n) for n in os.listdir(args.model)] + files)

    runs = {e: [] for e in engines}
    errors = []
    for rep in range(args.repeat):
        for e in engines:
            print(f"[{e} run {rep + 1}/{args.repeat}] {len(files)} clips ...",
                  file=sys.stderr, flush=True)
            r = run_engine(e, args, files, language)
            runs[e].append(r)
            if r["rc"] != 0:
                errors.append(f"{e} run {rep + 1}: exit status {r['rc']}"
                              f"{' (timed out)' if r['timed_out'] else ''}\n"
                              f"{r['stderr_tail'][-1500:]}")
            missing = [ids[f] for f in files if f not in r["clips"]]
            if missing:
                errors.append(f"{e} run {rep + 1}: no result for {len(missing)} clips: "
                              f"{', '.join(missing[:10])}")
            if r["bad_lines"]:
                errors.append(f"{e} run {rep + 1}: {r['bad_lines']} unparsable output lines")
            for f in files:
                c = r["clips"].get(f)
                if c and e == "sotto" and c["duration"] is not None \
                        and abs(c["duration"] - seconds[f]) > 0.01:
                    errors.append(f"sotto run {rep + 1}: {ids[f]} duration {c['duration']} "
                                  f"!= WAV {seconds[f]:.3f}")
            print(f"[{e} run {rep + 1}/{args.repeat}] done in "
                  f"{r['process_wall_seconds']:.1f} s, exit {r['rc']}",
                  file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    cond["load average (1/5/15 min) before / after"] = \
        f"{' '.join(f'{x:.2f}' for x in load0)} / {' '.join(f'{x:.2f}' for x in load1)}"
    for e in engines:
        w = next((r.get("worker") for r in runs[e] if r.get("worker")), None)
        if w and e in WCPP_TYPE:
            cond[f"{e} worker"] = (f"pywhispercpp {w['pywhispercpp']}, whisper.cpp "
                                   f"{w['whisper_cpp']}, language {w['language']}, "
                                   f"python+imports {w['import_seconds']:.2f} s (not in load); "
                                   f"params: {w['decoding']}")
            cond[f"{e} system_info"] = w["system_info"]
        elif w:
            cond[f"{e} worker"] = (f"faster-whisper {w['faster_whisper']}, ctranslate2 "
                                   f"{w['ctranslate2']}, language {w['language']}, "
                                   f"python+imports {w['import_seconds']:.2f} s (not in load)")

    busy = max(load0[0], load1[0])
    if busy >= 0.5:
        cond["WARNING"] = (f"1-min load average reached {busy:.2f} on {os.cpu_count()} cores "
                           "around the run: other processes competed for the CPU, so the "
                           "timings are not those of a quiet machine")
    summaries = {e: summarize(e, runs[e], files, seconds, refs) for e in engines}
    print_report(cond, summaries, files, seconds, ids, args)

    if args.json:
        out = {"conditions": cond, "args": vars(args),
               "clips": [{"id": ids[f], "file": f, "seconds": seconds[f], "reference": refs[f]}
                         for f in files],
               "runs": runs,
               "summary": {e: {k: v for k, v in s.items() if k not in ("walls", "texts")}
                           for e, s in summaries.items()}}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        print(f"raw results: {args.json}", file=sys.stderr)

    if errors:
        print("ERRORS:\n" + "\n".join(errors), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fw-worker":
        fw_worker(json.loads(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--wcpp-worker":
        wcpp_worker(json.loads(sys.argv[2]))
    else:
        main()
