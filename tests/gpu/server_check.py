#!/usr/bin/env python3
"""The streaming server on the GPU (run by tests/gpu/check.sh on the device
machine, from pack.sh's binaries).

1. Accuracy: the pack's clips streamed at full speed, all at once, to a
   sotto-server on the CPU and to one on the GPU (--device cuda, tiny.en f32
   and nf4): every session must end with done and no error, and the GPU's
   finals must be within --max-word-diff words of the CPU's per clip (pass
   timing differs between the two servers, so windows may be cut elsewhere).
2. Load: N sessions at real-time pace on the GPU server, each streaming one
   of the clips: errors, the step scale the overload policy reached, and the
   final latency (the last final's arrival minus the send time of the clip's
   last audio) p50/p95/max per N. A table for docs/PERF.md, not asserted.

usage: server_check.py --server BIN --model DIR --vad-model FILE --audio DIR
                       [--levels 16,64] [--max-word-diff 2]
Exit status: non-zero if part 1 failed.
"""
import argparse
import asyncio
import difflib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
if os.environ.get("SOTTO_PYPATH"):  # packages the device machine lacks (pack.sh: websockets)
    sys.path.insert(0, os.environ["SOTTO_PYPATH"])
import server_client as sc  # noqa: E402


def words(text):
    return [w.strip(".,?!;:\"'").lower() for w in text.split() if w.strip(".,?!;:\"'")]


def word_diff(a, b):
    sm = difflib.SequenceMatcher(a=words(a), b=words(b), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal")


def clips(audio_dir):
    out = {}
    with open(os.path.join(audio_dir, "manifest.tsv")) as f:
        next(f)
        for line in f:
            cid, path = line.rstrip("\n").split("\t")[:2]
            out[cid] = sc.load_clip(os.path.join(audio_dir, os.path.basename(path)))
    return out


def server(args, device, extra=()):
    s = sc.Server(args.server, model=args.model, threads=os.cpu_count(),
                  args=["--device", device, "--vad-model", args.vad_model, *extra])
    s.start(timeout=120)
    return s


def session_problems(r):
    p = []
    if r.exception:
        p.append(f"exception {r.exception!r}")
    if r.errors:
        p.append(f"errors {r.errors}")
    if not r.done:
        p.append("no done")
    return p


def part_accuracy(args, audios):
    print("== server on the GPU vs on the CPU: the clips streamed at full speed, all at once")
    results, ok = {}, True
    for device in ("cpu", args.gpu_device):
        srv = server(args, device)
        try:
            for weights in ("f32", "nf4"):
                t0 = time.monotonic()
                res = asyncio.run(sc.stream_many(srv.ws_url, audios, concurrency=len(audios), weights=weights))
                results[(device, weights)] = (res, time.monotonic() - t0)
        finally:
            srv.stop()
        log = srv.log()
        if device == "cuda" and "NVIDIA" not in log:
            print("  the GPU server's log does not name the GPU:\n" + log[-2000:])
            ok = False
    print("| clip | weights | words (CPU) | words that differ, GPU vs CPU | problems |")
    print("|---|---|---:|---:|---|")
    for weights in ("f32", "nf4"):
        cpu, t_cpu = results[("cpu", weights)]
        gpu, t_gpu = results[(args.gpu_device, weights)]
        for cid in audios:
            probs = session_problems(cpu[cid]) + session_problems(gpu[cid])
            d = word_diff(cpu[cid].transcript, gpu[cid].transcript)
            if probs or d > args.max_word_diff:
                ok = False
            print(f"| {cid} | {weights} | {len(words(cpu[cid].transcript))} | {d} | {'; '.join(probs) or '-'} |")
            if d:
                print(f"|  | cpu | | | {cpu[cid].transcript.strip()} |")
                print(f"|  | gpu | | | {gpu[cid].transcript.strip()} |")
        print(f"|  | {weights}: wall s, all clips | | CPU {t_cpu:.2f} / GPU {t_gpu:.2f} | |")
    print(f"server accuracy: {'passed' if ok else 'FAILED'} (at most {args.max_word_diff} words apart per clip)")
    return ok


def part_load(args, audios, levels):
    print("\n== real-time sessions on the GPU server (tiny.en f32; each session streams one clip at real-time pace)")
    print("| sessions | errors | no done | final latency p50 s | p95 s | max s | step scale (max) | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = list(audios)
    for n in levels:
        srv = server(args, args.gpu_device, ["--max-sessions", str(n + 8), "--max-batch", "16"])
        try:
            batch = {f"s{i}": audios[keys[i % len(keys)]] for i in range(n)}
            t0 = time.monotonic()
            with sc.MetricsPoller(srv, lambda m: m.get("sotto_step_scale"), 0.5) as poller:
                res = asyncio.run(sc.stream_many(srv.ws_url, batch, concurrency=n, realtime=True))
            wall = time.monotonic() - t0
            vals = [v for v in poller.values() if v is not None]
            scale = f"{max(vals):.2f}" if vals else "-"
        finally:
            srv.stop()
        errors = sum(1 for r in res.values() if r.errors or r.exception)
        nodone = sum(1 for r in res.values() if not r.done)
        lat = []
        for r in res.values():
            fin = r.timed("final")
            if fin and r.sends:
                lat.append(fin[-1][0] - r.sends[-1][0])
        lat.sort()
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")  # noqa: E731
        print(f"| {n} | {errors} | {nodone} | {statistics.median(lat) if lat else float('nan'):.2f} | {q(0.95):.2f} |"
              f" {lat[-1] if lat else float('nan'):.2f} | {scale} | {wall:.1f} |")
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--vad-model", required=True)
    ap.add_argument("--audio", required=True)
    ap.add_argument("--levels", default="16,64")
    ap.add_argument("--max-word-diff", type=int, default=2)
    ap.add_argument("--gpu-device", default="cuda", help="the device of the server under test (cpu: a dry run here)")
    args = ap.parse_args()
    audios = clips(args.audio)
    ok = part_accuracy(args, audios)
    part_load(args, audios, [int(x) for x in args.levels.split(",") if x])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
