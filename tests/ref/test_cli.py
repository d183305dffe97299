"""The `sotto` command line as people type it (issue 17: a conventional CLI).

Every subcommand parses with getopt_long: options before or after the
files, `--` ends them, `--help` on each, unknown options and bad values
rejected with exit 2 and the option named. Runs the release `sotto` on one
dev clip with tiny.en and base.

  python3 tests/ref/test_cli.py --sotto build/sotto --model models/tiny.en \\
      --base-model models/base --manifest ../shared/audio/manifest.tsv
"""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

import refcommon as rc

SUBCOMMANDS = ["transcribe", "info", "encode", "mel", "tokens", "quantize", "calibrate"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sotto", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--server", help="sotto-server: its options are checked too")
    ap.add_argument("--mic", help="sotto-mic: its options are checked too")
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    args = ap.parse_args()
    args.sotto, args.model, args.base_model = (os.path.abspath(x) for x in
                                               (args.sotto, args.model, args.base_model))
    args.server, args.mic = (os.path.abspath(x) if x else None for x in (args.server, args.mic))
    rows = rc.load_manifest(args.manifest, {"en"})
    clip = os.path.abspath(min(rows, key=lambda r: float(r["seconds"]))["file"])
    tmp = tempfile.mkdtemp(prefix="sotto-cli-")
    fails = []
    n = 0

    def ok(name, cond, detail=""):
        nonlocal n
        n += 1
        print(f"  [{'ok  ' if cond else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
        if not cond:
            fails.append(name)

    def run(*a, timeout=300):
        return subprocess.run([args.sotto, *a], capture_output=True, text=True, timeout=timeout)

    print("== help and usage errors, every subcommand")
    for cmd in SUBCOMMANDS:
        p = run(cmd, "--help")
        ok(f"{cmd} --help: exit 0, usage on stdout", p.returncode == 0 and
           p.stdout.startswith(f"usage: sotto {cmd}"), f"exit {p.returncode}; {p.stdout[:60]!r}")
        p = run(cmd, "--frobnicate", clip)
        ok(f"{cmd} --frobnicate: exit 2 naming the option", p.returncode == 2 and
           "'--frobnicate'" in p.stderr, f"exit {p.returncode}; {p.stderr.strip()[:100]!r}")
        p = run(cmd, "-Z", clip)
        ok(f"{cmd} -Z: exit 2 naming the option", p.returncode == 2 and "'-Z'" in p.stderr,
           f"exit {p.returncode}; {p.stderr.strip()[:100]!r}")

    print("== bad and missing values are named")
    cases = [
        (["transcribe", clip, "--beam", "0"], "--beam"),
        (["transcribe", clip, "--beam=abc"], "--beam"),
        (["transcribe", clip, "--threads", "x"], "--threads"),
        (["transcribe", clip, "--weights", "nf5"], "--weights"),
        (["transcribe", clip, "--device", "gpu"], "--device"),
        (["transcribe", clip, "--format", "docx"], "--format"),
        (["transcribe", clip, "--model"], "--model"),
        (["info", "--threads", "-1"], "--threads"),
        (["info", "--weights"], "--weights"),
        (["mel", clip, os.path.join(tmp, "m.f32"), "--n-mels", "0"], "--n-mels"),
        (["tokens", "encode", "--model"], "--model"),
        (["quantize", args.model, os.path.join(tmp, "q"), "--weights", "int3"], "--weights"),
        (["calibrate", "-o", os.path.join(tmp, "c.bin"), clip, "--threads", "many"], "--threads"),
    ]
    for argv, opt in cases:
        p = run(*argv)
        ok(f"{' '.join(argv[:1] + argv[-2:])}: exit 2 naming {opt}",
           p.returncode == 2 and opt in p.stderr, f"exit {p.returncode}; {p.stderr.strip()[:120]!r}")

    print("== options after the files")
    common = ["--format", "json", "--beam", "1", "--threads", "1", "--log-level", "info"]
    before = run("transcribe", "--model", args.base_model, *common, clip)
    after = run("transcribe", clip, *common, "--model", args.base_model)
    for name, p in (("before", before), ("after", after)):
        ok(f"transcribe with --model base {name} the file loads base",
           p.returncode == 0 and f"model {args.base_model} loaded" in p.stderr,
           f"exit {p.returncode}; {[l for l in p.stderr.splitlines() if 'loaded' in l][:1]}")
    try:
        tb, ta = json.loads(before.stdout)["text"], json.loads(after.stdout)["text"]
    except (ValueError, KeyError) as e:
        tb, ta = f"unparsable: {e}", None
    ok("... and both orders give the same transcript", tb == ta, repr(tb)[:100])
    m1, m2 = os.path.join(tmp, "m1.f32"), os.path.join(tmp, "m2.f32")
    p1 = run("mel", "--n-mels", "128", "--pad", "480000", clip, m1)
    p2 = run("mel", clip, m2, "--pad", "480000", "--n-mels", "128")
    ok("mel: options before and after the files give the same bytes",
       p1.returncode == 0 and p2.returncode == 0 and filecmp.cmp(m1, m2, shallow=False),
       f"exits {p1.returncode}, {p2.returncode}")
    i1, i2 = run("info", "--model", args.base_model), run("info", "--weights", "q8", "--model", args.model)
    try:
        d1, d2 = json.loads(i1.stdout), json.loads(i2.stdout)
        ok("info: --model and --weights in any order", d1 != d2 and i1.returncode == 0 and
           i2.returncode == 0 and "q8" in i2.stdout, f"{len(i1.stdout)} / {len(i2.stdout)} bytes")
    except ValueError:
        ok("info: --model and --weights in any order", False, i1.stderr[-200:] + i2.stderr[-200:])

    print("== -- ends the options")
    odd = os.path.join(tmp, "--odd.wav")
    shutil.copy(clip, odd)
    os.chdir(tmp)
    p = run("transcribe", "--model", args.model, "--format", "txt", "--threads", "1", "--", "--odd.wav")
    ok("transcribe -- --odd.wav transcribes the file", p.returncode == 0 and len(p.stdout.split()) > 3,
       f"exit {p.returncode}; {p.stdout.strip()[:80]!r}")
    p = run("transcribe", "--model", args.model, "--odd.wav")
    ok("without --, --odd.wav is an unknown option", p.returncode == 2 and "'--odd.wav'" in p.stderr,
       p.stderr.strip()[:100])
    p = run("tokens", "--model", args.model, "id", "--", "<|en|>")
    ok("tokens id -- TOKEN", p.returncode == 0 and p.stdout.strip().isdigit(), p.stdout.strip())

    for prog, path in (("sotto-server", args.server), ("sotto-mic", args.mic)):
        if not path:
            continue
        print(f"== {prog}")

        def prun(*a):
            return subprocess.run([path, *a], capture_output=True, text=True, timeout=60)
        p = prun("--help")
        ok(f"{prog} --help: exit 0, usage on stdout", p.returncode == 0 and
           p.stdout.startswith(f"usage: {prog}"), f"exit {p.returncode}")
        bad = [(["--frobnicate"], "'--frobnicate'"), (["stray"], "'stray'"),
               (["--log-level"], "--log-level")]
        bad += ([(["--port=abc"], "port"), (["--max-sessions", "0"], "max-sessions"),
                 (["--device", "gpu"], "gpu")] if prog == "sotto-server" else
                [(["--speed=fast"], "--speed"), (["--reconnects", "-1"], "--reconnects")])
        for argv, named in bad:
            p = prun(*argv)
            ok(f"{prog} {' '.join(argv)}: exit 2 naming {named}", p.returncode == 2 and named in p.stderr,
               f"exit {p.returncode}; {p.stderr.strip().splitlines()[:1]}")

    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{n} checks, {len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
