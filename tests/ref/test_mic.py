"""sotto-mic, the desktop client, against a real sotto-server on loopback.

  files      4 dev clips streamed with --file (one at real-time pace, three at 4x):
             exit 0, the --output text within 5 pp corpus WER of the offline CLI
             (`sotto transcribe --beam 1 --temperature 0`) on the same clips.
  resume     --test-drop-after 4: the connection breaks without a close after 4 s of
             audio; sotto-mic resumes the session, resends what was not acknowledged,
             and the transcript is as good as an uninterrupted run's; the server
             counts the resume.
  interrupt  SIGINT 5 s into a 15 s clip at real-time pace: sotto-mic sends stop,
             prints the finals of what was spoken, exits 0 within 10 s.
  errors     a bad URL, an unreachable server (--reconnects 1), a missing file, an
             unknown option, capture with no input device: each exits non-zero with a
             message, without hanging.

Run: python3 tests/ref/test_mic.py --mic build/sotto-mic --server build/sotto-server
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402
from test_server import Checks  # noqa: E402

CLIPS = ["jfk", "librispeech_train-clean-100_163-122947-0032",
         "librispeech_train-clean-100_1867-154075-0031", "librispeech_test-clean_1089-134691-0001"]
LONG_CLIP = "librispeech_train-clean-100_1898-145715-0024"  # 14.8 s


def run_mic(args, mic_args, timeout=180):
    t0 = time.monotonic()
    p = subprocess.run([args.mic] + mic_args, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mic", default=os.path.join(rc.REPO, "build", "sotto-mic"))
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    args = ap.parse_args()
    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    clips = [rows[c] for c in CLIPS if c in rows]
    ck = Checks()
    ck.ok("clips present in the manifest", len(clips) == len(CLIPS) and LONG_CLIP in rows)
    t_all = time.monotonic()
    off = rc.run_sotto(args.sotto, args.model, [r["file"] for r in clips + [rows[LONG_CLIP]]],
                       ["--beam", "1", "--temperature", "0"])
    offline = {r["id"]: off[r["file"]]["text"] for r in clips + [rows[LONG_CLIP]]}
    srv = sc.Server(args.server, args.model).start()
    url = srv.ws_url
    tmp = tempfile.mkdtemp(prefix="sotto-mic-test-")
    try:
        print("== files")
        hyps = {}
        for i, r in enumerate(clips):
            out = os.path.join(tmp, f"{r['id']}.txt")
            speed = "1" if i == 0 else "4"
            p, dt = run_mic(args, ["--server", url, "--file", r["file"], "--speed", speed,
                                   "--output", out, "--quiet"])
            hyps[r["id"]] = read(out).replace("\n", " ")
            ck.ok(f"files: {r['id']} ({r['seconds']:.1f} s at {speed}x) exits 0 in {dt:.1f} s",
                  p.returncode == 0 and dt >= r["seconds"] / float(speed) - 0.5,
                  f"exit {p.returncode}; stderr {p.stderr.strip()[-300:]!r}")
            ck.ok(f"files: {r['id']}: --output equals what was printed",
                  p.stdout.replace("\n", " ").strip() == hyps[r["id"]].strip(),
                  f"stdout {p.stdout.strip()[:100]!r}")
        refs = [r["text"] for r in clips]
        w_mic = rc.corpus_wer(refs, [hyps[r["id"]] for r in clips])
        w_off = rc.corpus_wer(refs, [offline[r["id"]] for r in clips])
        ck.ok(f"files: corpus WER {w_mic:.2f}% vs offline {w_off:.2f}% (limit +5 pp)",
              w_mic <= w_off + 5.0, "; ".join(f"{r['id']}: {hyps[r['id']].strip()[:60]!r}" for r in clips))

        print("== resume")
        r = rows[LONG_CLIP]
        m0 = srv.metrics()
        out = os.path.join(tmp, "resume.txt")
        p, dt = run_mic(args, ["--server", url, "--file", r["file"], "--speed", "2", "--output", out,
                               "--quiet", "--test-drop-after", "4", "--log-level", "info"])
        text = read(out).replace("\n", " ")
        e, n = rc.edit_distance(rc.normalize(r["text"]).split(), rc.normalize(text).split()), \
            len(rc.normalize(r["text"]).split())
        eo = rc.edit_distance(rc.normalize(r["text"]).split(), rc.normalize(offline[r["id"]]).split())
        ck.ok("resume: exit 0 after a dropped connection; 'resumed session' logged",
              p.returncode == 0 and "resumed session" in p.stderr and "dropping the connection" in p.stderr,
              f"exit {p.returncode}; stderr {p.stderr.strip()[-400:]!r}")
        ck.ok("resume: transcript within 3 word errors of the offline CLI's", e <= eo + 3,
              f"{e}/{n} errors (offline {eo}): {text.strip()!r}")
        m1 = srv.metrics()
        ck.ok("resume: the server counted the resume",
              m1.get("sotto_sessions_resumed_total", 0) >= m0.get("sotto_sessions_resumed_total", 0) + 1,
              f"{m0.get('sotto_sessions_resumed_total')} -> {m1.get('sotto_sessions_resumed_total')}")

        print("== interrupt")
        out = os.path.join(tmp, "interrupt.txt")
        proc = subprocess.Popen([args.mic, "--server", url, "--file", r["file"], "--output", out,
                                 "--quiet", "--log-level", "info"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(5.0)
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            so, se = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            so, se = proc.communicate()
        dt = time.monotonic() - t_sig
        text = read(out)
        ck.ok("interrupt: SIGINT -> stop, finals, exit 0 within 10 s",
              proc.returncode == 0 and dt < 10 and "done:" in se,
              f"exit {proc.returncode} after {dt:.1f} s; stderr {se.strip()[-300:]!r}")
        words = rc.normalize(text).split()
        full = rc.normalize(r["text"]).split()
        ck.ok("interrupt: the text covers the ~5 s spoken and not the whole clip",
              3 <= len(words) < len(full), f"{len(words)} of {len(full)} words: {text.strip()!r}")

        print("== errors")
        cases = [
            ("a bad URL", ["--server", "http://127.0.0.1:1/x", "--file", r["file"]], "bad server URL"),
            ("an unreachable server", ["--server", "ws://127.0.0.1:9/v1/stream", "--file", r["file"],
                                        "--reconnects", "1"], "gave up"),
            ("a missing file", ["--server", url, "--file", os.path.join(tmp, "nope.wav")], "nope.wav"),
            ("an unknown option", ["--frobnicate"], "unknown option"),
            ("capture with no input device", ["--server", url, "--device", "999"], "device"),
        ]
        for name, a, needle in cases:
            try:
                p, dt = run_mic(args, a, timeout=60)
                ck.ok(f"errors: {name} -> non-zero exit with a message naming it",
                      p.returncode not in (0, None) and needle in p.stderr,
                      f"exit {p.returncode} in {dt:.1f} s; stderr {p.stderr.strip()[-200:]!r}")
            except subprocess.TimeoutExpired:
                ck.ok(f"errors: {name} -> exits", False, "hung for 60 s")
        ck.ok("server alive", srv.alive())
    finally:
        srv.stop()
    print(f"\n{ck.n} checks, {len(ck.failed)} failed, {time.monotonic() - t_all:.0f} s")
    for f in ck.failed:
        print(f"  FAILED: {f}")
    sys.exit(1 if ck.failed else 0)


if __name__ == "__main__":
    main()
