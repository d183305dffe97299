#!/usr/bin/env python3
"""--device on the command line and in the server, on a machine with or
without a usable GPU (CI has none; its build has CUDA compiled in).

Checks:
  - `sotto transcribe --device cpu|auto|cuda` on a real clip: auto gives the
    CPU's transcript and says in exactly one log line where it runs (the
    fallback and its reason without a GPU, the GPU's name with one); cuda
    either runs on the GPU (same words as the CPU) or exits non-zero with
    "no usable GPU: <reason>"; an unknown device is a usage error; without
    --device, transcribe runs as auto; auto never picks the CUDA emulation
    of the ASan build (only --device cuda does);
  - `sotto-server --device cuda` without a GPU exits non-zero naming the
    reason; the server's default (auto) serves /healthz and says once where
    the model runs.

usage: test_device_cli.py --sotto build/sotto --server build/sotto-server
                          --model models/tiny.en [--manifest M]
"""
import argparse
import os
import subprocess
import sys
import time
import urllib.request

import server_client as sc
from refcommon import DEFAULT_MANIFEST, edit_distance, load_manifest, normalize


failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures += 1


def transcribe(args, device, wav):
    """(rc, stdout, stderr) of `sotto transcribe`; device None: no --device (the default)."""
    dev = ["--device", device] if device else []
    p = subprocess.run([args.sotto, "transcribe", "--model", args.model, "--beam", "1", *dev, wav],
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout.strip(), p.stderr


def healthy(port, wait_s=60.0):
    """True once the server on port answers /healthz with "ok" (wait_s at most: the
    sanitizer build loading a model beside other tests can take several seconds)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return r.read().decode().strip() == "ok"
        except OSError:
            time.sleep(0.1)
    return False


def free_port():
    return sc.free_port()  # honours SOTTO_TEST_PORTS (scripts/test.sh's second lane)


def out_of_memory(args, wav):
    """Over the emulation, with its device memory limited (SOTTO_EMU_VRAM_MB):
    too little for the weights, and enough for the weights and a state but not
    for the encoder's scratch. Each must be a clear error, not a crash or a hang."""
    env = dict(os.environ)
    for mb, when in ((100, "loading"), (200, "encoding")):
        env["SOTTO_EMU_VRAM_MB"] = str(mb)
        p = subprocess.run([args.sotto, "transcribe", "--model", args.model, "--device", "cuda", wav],
                           capture_output=True, text=True, timeout=300, env=env)
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check(p.returncode == 1 and "GPU out of memory" in p.stderr,
              f"{mb} MiB of GPU memory: the CLI fails while {when} and says why (rc {p.returncode}: {last})")
    port = free_port()
    env["SOTTO_EMU_VRAM_MB"] = "200"
    srv = subprocess.Popen([args.server, "--model", args.model, "--port", str(port), "--device", "cuda"],
                           stderr=subprocess.PIPE, text=True, env=env)
    try:
        ok = healthy(port)
        check(ok, "200 MiB of GPU memory: the server loads the model and serves /healthz")
        res = sc.stream(f"ws://127.0.0.1:{port}/v1/stream", sc.load_clip(wav), timeout=120)
        errs = [e for e in res.errors if e.get("code") == "engine_failed"]
        check(len(errs) == 1 and errs[0].get("fatal") is True and "GPU out of memory" in errs[0].get("message", ""),
              f"a session whose windows cannot be encoded ends with a fatal engine_failed error: "
              f"{errs[0].get('message') if errs else res.summary()}")
        check(healthy(port, wait_s=2), "and the server goes on serving")
    finally:
        srv.terminate()
        srv.communicate(timeout=60)
    check(srv.returncode == 0, f"and exits 0 on SIGTERM (rc {srv.returncode})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sotto", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", default="models/tiny.en")
    ap.add_argument("--manifest", default=DEFAULT_MANIFEST)
    args = ap.parse_args()
    rows = [r for r in load_manifest(args.manifest) if r["id"] == "jfk"]
    wav = rows[0]["file"]

    rc, cpu_text, cpu_err = transcribe(args, "cpu", wav)
    check(rc == 0 and len(cpu_text) > 20, f"--device cpu transcribes ({cpu_text[:50]}...)")
    check("device" not in cpu_err, "--device cpu logs nothing about devices")

    # what this machine has: a real GPU, the CPU emulation of CUDA (the
    # ASan build's), or neither; --device cuda runs only where there is one
    rc_cuda, cuda_text, cuda_err = transcribe(args, "cuda", wav)
    emulated = "CPU emulation" in cuda_err
    gpu = rc_cuda == 0 and not emulated

    rc, auto_text, auto_err = transcribe(args, "auto", wav)
    dev_lines = [l for l in auto_err.splitlines() if "device auto:" in l or "weights on" in l]
    check(rc == 0, f"--device auto exits 0 (rc {rc})")
    check(len(dev_lines) == 1, f"--device auto says where it runs in one line: {dev_lines}")
    # the default of `sotto transcribe` is auto: the same line, the same words
    rc, def_text, def_err = transcribe(args, None, wav)
    def_lines = [l for l in def_err.splitlines() if "device auto:" in l or "weights on" in l]
    check(rc == 0 and len(def_lines) == 1 and len(dev_lines) == 1 and
          def_lines[0].split(" ", 1)[-1] == dev_lines[0].split(" ", 1)[-1] and def_text == auto_text,
          f"without --device, transcribe runs as --device auto: {def_lines}")
    if not gpu:
        if emulated:  # auto never picks the emulation: it is asked for by name
            check(dev_lines and "CPU emulation" in dev_lines[0] and "running on the CPU" in dev_lines[0],
                  "auto does not pick the CUDA emulation, and says so")
        else:
            check(dev_lines and "no usable GPU" in dev_lines[0] and "running on the CPU" in dev_lines[0],
                  "the line gives the fallback and its reason")
        check(auto_text == cpu_text, "auto without a GPU gives the CPU's transcript exactly")
    else:
        check(dev_lines and "weights on" in dev_lines[0], "auto with a GPU puts the weights on it")
        check(auto_text.split() == cpu_text.split(), "auto on the GPU gives the CPU's words")
    if rc_cuda != 0:
        check(cuda_text == "", f"--device cuda without a GPU fails (rc {rc_cuda})")
        check("no usable GPU:" in cuda_err,
              f"and says why: {cuda_err.strip().splitlines()[-1] if cuda_err.strip() else ''}")
    else:
        check(cuda_text.split() == cpu_text.split(), "--device cuda gives the CPU's words")
        # several windows: previous text as the prompt (prompts past 32 rows
        # take the GEMM path), timestamps, seeks
        long = [r for r in load_manifest(args.manifest) if 60 <= r["seconds"] <= 80][:1]
        for r in long:
            rc1, t_cpu, _ = transcribe(args, "cpu", r["file"])
            rc2, t_gpu, _ = transcribe(args, "cuda", r["file"])
            same = t_cpu == t_gpu
            check(rc1 == 0 and rc2 == 0 and len(t_cpu.splitlines()) > 3 and same,
                  f"{r['id']} ({r['seconds']:.0f} s): {len(t_cpu.splitlines())} segments, GPU == CPU: {same}")

    p = subprocess.run([args.sotto, "transcribe", "--model", args.model, "--device", "gpu", wav],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--device" in p.stderr, f"an unknown device is a usage error (rc {p.returncode})")

    # the server
    if rc_cuda != 0:
        port = free_port()
        p = subprocess.run([args.server, "--model", args.model, "--port", str(port), "--device", "cuda"],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and "no usable GPU" in p.stderr,
              f"sotto-server --device cuda without a GPU exits non-zero with the reason (rc {p.returncode})")
    def serve(device_args, label, expect_gpu):
        """The server with device_args: /healthz, one streamed session close to the
        offline CPU transcript, one log line saying where the model runs, exit 0."""
        port = free_port()
        srv = subprocess.Popen([args.server, "--model", args.model, "--port", str(port), *device_args],
                               stderr=subprocess.PIPE, text=True)
        ok = healthy(port)
        if ok:  # one streamed session through the server's batched decoder
            res = sc.stream(f"ws://127.0.0.1:{port}/v1/stream", sc.load_clip(wav), timeout=300)
            words = normalize(res.transcript).split()
            ref = normalize(" ".join(l.split("]", 1)[-1] for l in cpu_text.splitlines())).split()
            errs = edit_distance(ref, words)
            check(res.exception is None and res.done is not None and errs <= 3,
                  f"{label}: a streamed session on the server's {'GPU' if expect_gpu else 'CPU'} model: "
                  f"{errs} word differences from the offline CPU transcript ({' '.join(words)})")
        srv.terminate()
        _, err = srv.communicate(timeout=120)
        check(ok, f"{label}: sotto-server serves /healthz")
        lines = [l for l in err.splitlines() if "device auto:" in l or "weights on" in l]
        check(len(lines) == 1 and ("weights on" in lines[0]) == expect_gpu,
              f"{label}: and says where the model runs once: {lines}")
        check(srv.returncode == 0, f"{label}: and exits 0 on SIGTERM (rc {srv.returncode})")

    serve([], "the default --device (auto)", gpu)
    if rc_cuda == 0:  # the server's batched passes on the GPU (or the emulation)
        serve(["--device", "cuda"], "--device cuda", True)

    if emulated:
        out_of_memory(args, wav)
    print(f"{'all passed' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
