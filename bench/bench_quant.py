#!/usr/bin/env python3
"""Quantized weights: accuracy, memory and speed of each weight format against f32.

Every variant runs in its own processes (a model leaks nothing into the next
one): `sotto info` with the variant's flags reports the weight bytes, the
policy and the peak RSS right after loading (VmHWM); then `sotto transcribe`
over all the clips (model loaded once) gives the transcripts, per-clip wall
times and, from wait4, the whole transcription process's peak RSS.

Accuracy: corpus WER against the manifest references after Whisper's English
normalizer, and the difference to the f32 reference with a paired bootstrap
95% CI (clips resampled with replacement; on each resample both WERs come
from the resampled clips' error and word counts). Also the share of clips
whose normalized text differs from f32.

    python3 bench/bench_quant.py --sotto build/sotto --model models/tiny.en --threads 2

A variant is WEIGHTS[:POLICY], e.g. `nf4`, `nvfp4:decoder=q8`,
`f32:encoder=nvfp4,embed=bf16`. Validate with --limit 3; the full run belongs
on a quiet machine. Exits non-zero if a variant fails to load or transcribe.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "ref"))
sys.path.insert(0, HERE)

import refcommon  # noqa: E402  (manifest, normalizer, edit distance)
from bench_cpu import (cpu_model, fmt, parse_json_lines, percentile, run_child,  # noqa: E402
                       wav_seconds, warm_page_cache)

FORMATS = ("f32", "bf16", "q8", "nf4", "nvfp4")
# f32 first: it is the reference. The mixed policies follow ../shared/BACKGROUND.md:
# an NVFP4 encoder with an 8-bit decoder was the best 4-bit mix on large-v3-turbo
# (the decoder is the sensitive part), its mirror image tells which half matters
# on tiny, and an 8-bit encoder with a 4-bit decoder is the HQQ whisper-tiny recipe.
DEFAULT_VARIANTS = ("f32", "bf16", "q8", "nf4", "nvfp4", "nvfp4:decoder=q8",
                    "nvfp4:encoder=q8", "nf4:encoder=q8")
LOAD_RE = re.compile(r"model (.*) loaded in ([0-9.]+) s: ([0-9.]+) MB of weights \((.*)\), "
                     r"peak RSS ([0-9.]+) MB")
MB = 1e6  # every MB in the report is 10^6 bytes, as in sotto's own log


SCALES = ("search", "calib")


def parse_variant(spec):
    """'nvfp4:decoder=q8@calib' -> (label, weights, policy or None, scales or None).
    @search: 4-bit block scales by least squared error (--scale-search);
    @calib: weighted by the --calib file's activation statistics."""
    spec = spec.strip()
    spec, _, scales = spec.partition("@")
    weights, _, policy = spec.partition(":")
    if weights not in FORMATS:
        raise ValueError(f"variant '{spec}': weights must be one of {', '.join(FORMATS)}")
    scales = scales.strip() or None
    if scales is not None and scales not in SCALES:
        raise ValueError(f"variant '{spec}@{scales}': after @ comes one of {', '.join(SCALES)}")
    policy = policy.strip() or None
    label = weights + (f" + {policy}" if policy else "") + (f" @{scales}" if scales else "")
    return label, weights, policy, scales


def variant_flags(args, weights, policy, scales):
    f = ["--weights", weights] + (["--policy", policy] if policy else [])
    if scales == "search":
        f.append("--scale-search")
    elif scales == "calib":
        f += ["--calib", args.calib]
    return f


def crc32_file(path):
    crc = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            crc = zlib.crc32(chunk, crc)
    return f"{crc & 0xffffffff:08x}"


def calib_clips(path):
    """The clip list in a calibration file's safetensors metadata."""
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        if n > 1 << 26:
            raise ValueError(f"{path}: not a safetensors file")
        header = json.loads(fh.read(n))
    meta = header.get("__metadata__", {})
    if meta.get("sotto_calib") != "1":
        raise ValueError(f"{path}: not a sotto calibration file")
    return json.loads(meta.get("clips", "[]"))


def check_calib_disjoint(calib, files):
    """Refuses (ValueError) when an evaluation clip was also a calibration clip:
    the same bytes (size and CRC-32) or the same file name."""
    clips = calib_clips(calib)
    by_crc = {(c["bytes"], c["crc32"]) for c in clips}
    names = {c["file"] for c in clips}
    overlap = [f for f in files
               if os.path.basename(f) in names or (os.path.getsize(f), crc32_file(f)) in by_crc]
    if overlap:
        raise ValueError(f"{len(overlap)} evaluation clip(s) were used for calibration "
                         f"({calib}): {', '.join(os.path.basename(f) for f in overlap[:5])}; "
                         "calibrate on other audio")
    return len(clips)


def git_describe():
    """HEAD, and whether the working tree differs from it (the binary may hold
    uncommitted changes)."""
    def git(*a):
        p = subprocess.run(["git", "-C", REPO] + list(a), capture_output=True, text=True,
                           timeout=20)
        return p.stdout.strip() if p.returncode == 0 else None
    try:
        head = git("rev-parse", "--short", "HEAD") or "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return head + (" + uncommitted changes" if dirty else "")
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------
# running one variant
# --------------------------------------------------------------------------

def run_info(args, weights, policy, scales):
    cmd = [args.sotto, "info", "--model", args.model] + variant_flags(args, weights, policy, scales)
    r = run_child(cmd, args.timeout)
    out = {"cmd": cmd, "rc": r["rc"], "maxrss_kb": r["maxrss_kb"],
           "stderr_tail": r["stderr"][-2000:]}
    if r["rc"] == 0:
        try:
            out["info"] = json.loads(r["stdout"])
        except json.JSONDecodeError as e:
            out["rc"] = -1
            out["stderr_tail"] += f"\n(unparsable info JSON: {e})"
    return out


def run_transcribe(args, weights, policy, scales, files):
    cmd = [args.sotto, "transcribe", "--model", args.model, "--format", "json", "--no-progress",
           "--threads", str(args.threads), "--beam", str(args.beam),
           "--temperature", args.temperature] + variant_flags(args, weights, policy, scales)
    if args.best_of:
        cmd += ["--best-of", str(args.best_of)]
    cmd += files
    r = run_child(cmd, args.timeout)
    objs, bad = parse_json_lines(r["stdout"])
    clips = {o["file"]: o for o in objs if "file" in o}
    m = LOAD_RE.search(r["stderr"])
    return {"cmd": cmd[:cmd.index(files[0])] + [f"<{len(files)} clips>"], "rc": r["rc"],
            "timed_out": r["timed_out"], "bad_lines": bad,
            "process_wall_seconds": r["process_wall_seconds"], "maxrss_kb": r["maxrss_kb"],
            "cpu_seconds": r["utime"] + r["stime"],
            "load_seconds": float(m.group(2)) if m else None,
            "log_weight_mb": float(m.group(3)) if m else None,
            "log_policy": m.group(4) if m else None,
            "log_load_peak_mb": float(m.group(5)) if m else None,
            "clips": {f: {"text": c.get("text", ""), "duration": c.get("duration"),
                          "wall_seconds": c.get("wall_seconds")} for f, c in clips.items()},
            "stderr_tail": r["stderr"][-3000:]}


# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------

def clip_errors(refs_norm, hyp):
    """Per-clip (errors, reference words) of one variant's normalized texts."""
    e = np.zeros(len(refs_norm), dtype=np.int64)
    n = np.zeros(len(refs_norm), dtype=np.int64)
    for i, (r, h) in enumerate(zip(refs_norm, hyp)):
        rw, hw = r.split(), h.split()
        e[i] = refcommon.edit_distance(rw, hw)
        n[i] = len(rw)
    return e, n


def bootstrap_diff(e_var, e_ref, n, resamples, seed):
    """Paired bootstrap of WER(variant) - WER(ref) in percentage points:
    returns (2.5%, 97.5%) percentiles. The same resampled clips feed both."""
    rng = np.random.default_rng(seed)
    k = len(n)
    diffs = np.empty(resamples)
    step = max(1, 2_000_000 // max(k, 1))  # resamples per batch, bounded memory
    for s in range(0, resamples, step):
        b = min(step, resamples - s)
        idx = rng.integers(0, k, size=(b, k))
        words = n[idx].sum(axis=1)
        words = np.where(words == 0, 1, words)
        diffs[s:s + b] = 100.0 * (e_var[idx].sum(axis=1) - e_ref[idx].sum(axis=1)) / words
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

def print_report(cond, results, ref_label, args):
    print("# sotto quantized weights vs f32\n")
    print("## Conditions\n")
    for k, v in cond.items():
        print(f"- {k}: {v}")
    print()
    print("## Results\n")
    print("MB = 10^6 bytes. weights = sotto's weight_bytes (all weight matrices, vectors and "
          "the embedding as stored). load peak = VmHWM right after loading, from `sotto info` "
          "in its own process; process peak = ru_maxrss of the whole `sotto transcribe` "
          "process. WER after Whisper's English normalizer; Δ = variant WER - f32 WER in "
          f"percentage points, [paired bootstrap 95% CI, {args.resamples} resamples of the "
          f"clips, seed {args.seed}]. changed = clips whose normalized text differs from f32. "
          "loops = clips whose transcript holds a repetition loop the reference does not "
          "(refcommon.is_loop: a phrase 3+ times in a row over 9+ words, or over twice the "
          "reference's words + 10). "
          "ms/clip = median per-clip transcription wall (model loaded). speed vs f32 = "
          "f32 total wall / variant total wall (>1: faster than f32).\n")
    print("| variant | policy (as sotto reports it) | weights MB | load peak RSS MB "
          "| process peak RSS MB | WER % | Δ vs f32 pp [95% CI] | changed vs f32 | loops "
          "| median ms/clip | speed vs f32 |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    ref = results.get(ref_label)
    for label, s in results.items():
        if not s.get("ok"):
            print(f"| {label} | FAILED: {s.get('error', '?').splitlines()[0][:120]} "
                  "| | | | | | | | | |")
            continue
        if ref and ref.get("ok") and label != ref_label:
            d = f"{s['wer_diff']:+.2f} [{s['ci'][0]:+.2f}, {s['ci'][1]:+.2f}]"
            ch = f"{s['changed']}/{s['n_clips']} ({100.0 * s['changed'] / s['n_clips']:.0f}%)"
            sp = fmt(s.get("speed_vs_ref"), ".2f")
        elif label == ref_label:
            d, ch, sp = "reference", "-", "1.00"
        else:
            d, ch, sp = "n/a", "n/a", "n/a"
        print(f"| {label} | {s['policy']} | {s['weight_bytes'] / MB:.1f} "
              f"| {fmt(s['load_peak_mb'], '.1f')} | {s['process_peak_mb']:.1f} "
              f"| {s['wer']:.2f} | {d} | {ch} | {len(s['loop_ids'])} | {s['median_ms']:.0f} | {sp} |")
    print()
    ok = {k: s for k, s in results.items() if s.get("ok")}
    if ok:
        print("Load and process details:\n")
        print("| variant | encoder MB | decoder MB | embed MB | RSS before load MB "
              "| largest tensor MB | load s | total wall s | p90 ms/clip | process wall s "
              "| CPU s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for label, s in ok.items():
            pb = s["part_bytes"]
            print(f"| {label} | {pb.get('encoder', 0) / MB:.1f} | {pb.get('decoder', 0) / MB:.1f} "
                  f"| {pb.get('embed', 0) / MB:.1f} | {fmt(s['rss_before_mb'], '.1f')} "
                  f"| {fmt(s['largest_tensor_mb'], '.1f')} | {fmt(s['load_seconds'], '.2f')} "
                  f"| {s['total_wall']:.2f} | {s['p90_ms']:.0f} "
                  f"| {s['process_wall']:.2f} | {s['cpu_seconds']:.2f} |")
        print()
    if ref and ref.get("ok"):
        for label, s in ok.items():
            if label != ref_label and s["changed_ids"]:
                ids = s["changed_ids"]
                print(f"Changed vs f32, {label}: {', '.join(ids[:12])}"
                      f"{' ...' if len(ids) > 12 else ''}")
        for label, s in ok.items():
            if s["loop_ids"]:
                print(f"Loops, {label}: {', '.join(s['loop_ids'])}")
        print()


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sotto", default=os.path.join(REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=None)
    ap.add_argument("--language", default="en",
                    help="manifest language filter, comma-separated, or 'all' (default en)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="first N clips (default all)")
    ap.add_argument("--exclude", nargs="+", default=[],
                    help="manifest ids to leave out (e.g. the long clips, for a quick survey)")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--best-of", type=int, default=0,
                    help="samples per non-zero temperature (default: sotto's)")
    ap.add_argument("--temperature", default="0",
                    help="temperature or comma-separated fallback list (default 0)")
    ap.add_argument("--variants", nargs="+", default=None,
                    help="WEIGHTS[:POLICY] ... (also ';'-separated); f32 is added as the "
                         f"reference if missing. Default: {' '.join(DEFAULT_VARIANTS)}")
    ap.add_argument("--calib", default=None,
                    help="calibration file (sotto calibrate) for @calib variants; refused if "
                         "it was recorded on any of the evaluation clips")
    ap.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (>= 2000)")
    ap.add_argument("--seed", type=int, default=20261129, help="bootstrap seed")
    ap.add_argument("--json", default=None, help="save raw per-clip results here")
    ap.add_argument("--timeout", type=float, default=7200, help="per process, s")
    args = ap.parse_args()

    if args.resamples < 2000:
        sys.exit("--resamples must be >= 2000")
    if args.threads < 1:
        sys.exit("--threads must be >= 1")
    specs = []
    for item in (args.variants or DEFAULT_VARIANTS):
        specs += [s for s in item.split(";") if s.strip()]
    try:
        variants = [parse_variant(s) for s in specs]
    except ValueError as e:
        sys.exit(str(e))
    ref_label = "f32"
    if not any(v[0] == ref_label for v in variants):
        variants.insert(0, (ref_label, "f32", None, None))
    else:  # the reference runs first
        variants.sort(key=lambda v: v[0] != ref_label)
    seen = set()
    variants = [v for v in variants if not (v[0] in seen or seen.add(v[0]))]

    args.sotto = os.path.abspath(args.sotto)
    if not os.access(args.sotto, os.X_OK):
        sys.exit(f"sotto binary not found: {args.sotto}")
    if not os.path.isdir(args.model):
        sys.exit(f"model directory not found: {args.model}")

    langs = None if args.language == "all" else set(args.language.split(","))
    manifest = args.manifest or refcommon.DEFAULT_MANIFEST
    rows = refcommon.load_manifest(manifest, languages=langs)
    unknown = set(args.exclude) - {r["id"] for r in rows}
    if unknown:
        sys.exit(f"--exclude: not in the manifest: {', '.join(sorted(unknown))}")
    rows = [r for r in rows if r["id"] not in set(args.exclude)]
    if args.limit:
        rows = rows[:args.limit]
    if not rows:
        sys.exit("no clips selected")
    files = [r["file"] for r in rows]
    ids = {r["file"]: r["id"] for r in rows}
    seconds = {f: wav_seconds(f) for f in files}
    refs_norm = [refcommon.normalize(r["text"]) for r in rows]
    n_calib = None
    if any(v[3] == "calib" for v in variants):
        if not args.calib:
            sys.exit("@calib variants need --calib FILE")
        try:
            n_calib = check_calib_disjoint(args.calib, files)
        except (OSError, ValueError) as e:
            sys.exit(f"bench_quant: {e}")

    load0 = os.getloadavg()
    cond = {
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "CPU": cpu_model(),
        "cores (os.cpu_count / affinity)": f"{os.cpu_count()} / {len(os.sched_getaffinity(0))}",
        "platform": platform.platform(),
        "threads": args.threads,
        "model": args.model,
        "decoding": f"beam {args.beam}, temperature {args.temperature}"
                    + (f", best_of {args.best_of}" if args.best_of else ""),
        "clips": f"{len(files)} (manifest language {args.language}"
                 + (f", leaving out {', '.join(args.exclude)}" if args.exclude else "")
                 + f"{', first ' + str(args.limit) if args.limit else ''}) from {manifest}",
        "total audio s": f"{sum(seconds.values()):.2f}",
        "variants": ", ".join(v[0] for v in variants),
        "calibration": (f"{args.calib} ({n_calib} clips, none of them an evaluation clip)"
                        if n_calib is not None else "none"),
        "sotto": f"{args.sotto} (repo {git_describe()})",
        "process per variant": "`sotto info` then `sotto transcribe` (model loaded once for "
                               "all clips), each in a fresh process",
        "env": ", ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ)
                         if k.startswith(("OMP_", "OPENBLAS_", "MKL_", "SOTTO_")))
               or "(no OMP_/OPENBLAS_/MKL_/SOTTO_ variables)",
    }
    warm_page_cache([os.path.join(args.model, n) for n in os.listdir(args.model)] + files)

    raw, results, errors = {}, {}, []
    for label, weights, policy, scales in variants:
        print(f"[{label}] info ...", file=sys.stderr, flush=True)
        info = run_info(args, weights, policy, scales)
        print(f"[{label}] transcribe {len(files)} clips ...", file=sys.stderr, flush=True)
        tr = run_transcribe(args, weights, policy, scales, files)
        raw[label] = {"weights": weights, "policy_arg": policy, "scales": scales, "info": info, "transcribe": tr}
        problems = []
        if info["rc"] != 0:
            problems.append(f"sotto info exit {info['rc']}: {info['stderr_tail'][-600:].strip()}")
        if tr["rc"] != 0:
            problems.append(f"sotto transcribe exit {tr['rc']}"
                            f"{' (timed out)' if tr['timed_out'] else ''}: "
                            f"{tr['stderr_tail'][-600:].strip()}")
        missing = [ids[f] for f in files if f not in tr["clips"]]
        if missing and tr["rc"] == 0:
            problems.append(f"no result for {len(missing)} clips: {', '.join(missing[:8])}")
        if tr["bad_lines"]:
            problems.append(f"{tr['bad_lines']} unparsable output lines")
        print(f"[{label}] done in {tr['process_wall_seconds']:.1f} s, exit {tr['rc']}",
              file=sys.stderr, flush=True)
        if problems:
            results[label] = {"ok": False, "error": "; ".join(problems)}
            errors += [f"{label}: {p}" for p in problems]
            continue
        inf = info["info"]
        if tr["log_policy"] is not None and tr["log_policy"] != inf["policy"]:
            errors.append(f"{label}: transcribe loaded policy {tr['log_policy']} but info "
                          f"reports {inf['policy']}")
        hyp = [refcommon.normalize(tr["clips"][f]["text"]) for f in files]
        e, n = clip_errors(refs_norm, hyp)
        loop_ids = [ids[f] for f, r, h in zip(files, refs_norm, hyp) if refcommon.is_loop(r, h)]
        walls = [tr["clips"][f]["wall_seconds"] for f in files]
        results[label] = {
            "ok": True, "weights": weights, "policy_arg": policy, "policy": inf["policy"],
            "weight_bytes": inf["weight_bytes"], "part_bytes": inf.get("part_bytes", {}),
            "load_peak_mb": inf.get("peak_rss_after_load", 0) / MB or None,
            "rss_before_mb": inf.get("rss_before_load", 0) / MB or None,
            "largest_tensor_mb": inf.get("largest_tensor_bytes", 0) / MB or None,
            "info_process_peak_mb": info["maxrss_kb"] * 1024 / MB,
            "process_peak_mb": tr["maxrss_kb"] * 1024 / MB,
            "load_seconds": tr["load_seconds"], "process_wall": tr["process_wall_seconds"],
            "cpu_seconds": tr["cpu_seconds"],
            "wer": 100.0 * e.sum() / max(n.sum(), 1), "errors": e, "loop_ids": loop_ids, "words": n, "hyp": hyp,
            "median_ms": 1000 * statistics.median(walls), "p90_ms": 1000 * percentile(walls, 0.9),
            "total_wall": sum(walls), "n_clips": len(files),
        }

    ref = results.get(ref_label)
    if ref and ref["ok"]:
        for label, s in results.items():
            if not s["ok"] or label == ref_label:
                continue
            s["wer_diff"] = s["wer"] - ref["wer"]
            s["ci"] = bootstrap_diff(s["errors"], ref["errors"], ref["words"], args.resamples,
                                     args.seed)
            changed = [ids[f] for f, a, b in zip(files, s["hyp"], ref["hyp"]) if a != b]
            s["changed"], s["changed_ids"] = len(changed), changed
            s["speed_vs_ref"] = ref["total_wall"] / s["total_wall"] if s["total_wall"] else None
    load1 = os.getloadavg()
    cond["load average (1/5/15 min) before / after"] = \
        f"{' '.join(f'{x:.2f}' for x in load0)} / {' '.join(f'{x:.2f}' for x in load1)}"
    if load0[0] >= 0.5:
        # the load after the run includes this harness's own threads, so only the
        # load before it tells whether other jobs were competing for the CPU
        cond["WARNING"] = (f"1-min load average was {load0[0]:.2f} on {os.cpu_count()} cores "
                           "when the run started: other processes competed for the CPU, so "
                           "the timings are not those of a quiet machine")
    print_report(cond, results, ref_label, args)

    if args.json:
        def clean(s):
            return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in s.items()}
        out = {"conditions": cond, "args": vars(args),
               "clips": [{"id": ids[f], "file": f, "seconds": seconds[f], "reference": r["text"]}
                         for f, r in zip(files, rows)],
               "summary": {k: clean(s) for k, s in results.items()}, "runs": raw}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        print(f"raw results: {args.json}", file=sys.stderr)

    if errors:
        print("ERRORS:\n" + "\n".join(errors), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
