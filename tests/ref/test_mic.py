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
  device     a real PortAudio input device: a private PulseAudio server
             (tests/ref/vaudio.py) with a null sink whose monitor is the default
             source, reached through ALSA's pulse plugin. --list-devices shows the
             "pulse" device; sotto-mic captures from it (--device N, the number that
             list shows) while paplay plays a dev clip plus 2 s of silence into the
             sink, then gets SIGINT: exit 0, the --output transcript within 5 pp WER
             of the offline CLI's on the clip (the files tolerance). --device pulse
             (by name) opens it too; --device with an unknown name fails with a message.
  errors     a bad URL, an unreachable server (--reconnects 1), a missing file, an
             unknown option, capture with no input device: each exits non-zero with a
             message, without hanging.

The device section needs the Debian packages pulseaudio, pulseaudio-utils and
libasound2-plugins (scripts/test.sh installs them).

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
import vaudio  # noqa: E402
from test_server import Checks  # noqa: E402

CLIPS = ["jfk", "librispeech_train-clean-100_163-122947-0032",
         "librispeech_train-clean-100_1867-154075-0031", "librispeech_test-clean_1089-134691-0001"]
LONG_CLIP = "librispeech_train-clean-100_1898-145715-0024"  # 14.8 s


def mic_env(base=None):
    """The environment for sotto-mic: with an ASan build, LeakSanitizer ignores
    what ALSA plugins' library constructors allocate. PortAudio's device scan
    makes ALSA dlopen every plugin it has (libasound2-plugins' a52 pulls in
    libavcodec), and once ALSA dlcloses them, the memory their globals held
    looks leaked; the full unwinder is needed to see snd_dlopen in the stack."""
    e = dict(os.environ if base is None else base)
    supp = os.path.join(tempfile.gettempdir(), "sotto-mic-lsan.supp")
    with open(supp, "w") as f:
        f.write("leak:snd_dlopen\n")
    e["LSAN_OPTIONS"] = ":".join(x for x in (e.get("LSAN_OPTIONS"), f"suppressions={supp}") if x)
    e["ASAN_OPTIONS"] = ":".join(x for x in (e.get("ASAN_OPTIONS"), "fast_unwind_on_malloc=0") if x)
    return e


def run_mic(args, mic_args, timeout=180, env=None):
    t0 = time.monotonic()
    p = subprocess.run([args.mic] + mic_args, capture_output=True, text=True, timeout=timeout,
                       env=mic_env(env))
    return p, time.monotonic() - t0


def device_section(args, ck, url, clip, offline, tmp):
    """sotto-mic capturing from PulseAudio through ALSA's pulse plugin (see the
    module docstring). Ends every process it starts, also on failure."""
    print("== device")
    wav = os.path.join(tmp, "device-clip.wav")
    subprocess.run(["sox", clip["file"], wav, "pad", "0", "2"], check=True)
    proc = None
    with vaudio.VirtualAudio(sink="sotto_mic_test", rate=48000) as va:
        env = va.env()
        p, dt = run_mic(args, ["--list-devices"], timeout=60, env=env)
        index = None
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) >= 2 and f[0].isdigit() and " pulse (" in line:
                index = int(f[0])
        ck.ok(f"device: --list-devices shows ALSA's pulse device ({dt:.1f} s)",
              p.returncode == 0 and index is not None,
              f"exit {p.returncode}; stdout {p.stdout.strip()!r}; stderr {p.stderr.strip()[-300:]!r}")
        if index is None:
            return
        out = os.path.join(tmp, "device.txt")
        err_path = os.path.join(tmp, "device.err")
        try:
            with open(err_path, "w") as err:
                proc = subprocess.Popen([args.mic, "--server", url, "--device", str(index), "--output", out,
                                         "--quiet", "--log-level", "info"], env=mic_env(env),
                                        stdout=subprocess.PIPE, stderr=err, text=True)
            t0 = time.monotonic()
            while "session " not in read(err_path) and proc.poll() is None and time.monotonic() - t0 < 30:
                time.sleep(0.1)  # capturing, and the server's session is ready
            t_play = time.monotonic()
            player = va.play(wav)
            size, t_last = 0, None
            while player.poll() is None and time.monotonic() - t_play < clip["seconds"] + 30:
                n = len(read(out))
                if n != size:
                    size, t_last = n, time.monotonic()
                time.sleep(0.1)
            played = time.monotonic() - t_play
            pe = player.stderr.read().decode(errors="replace") if player.stderr else ""
            ck.ok(f"device: paplay played the clip into the null sink ({played:.1f} s)",
                  player.returncode == 0 and played >= clip["seconds"], f"exit {player.returncode} {pe[-200:]!r}")
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)  # Ctrl-C: stop; the server finishes the text
            t_sig = time.monotonic()
            while proc.poll() is None and time.monotonic() - t_sig < 60:
                n = len(read(out))
                if n != size:
                    size, t_last = n, time.monotonic()
                time.sleep(0.05)
            if len(read(out)) != size:
                t_last = time.monotonic()
            if proc.poll() is None:
                proc.kill()
            so, _ = proc.communicate()
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        se = read(err_path)
        text = read(out).replace("\n", " ")
        lag = (t_last - t_play - clip["seconds"]) if t_last else float("nan")
        ck.ok("device: capturing from 'pulse'; SIGINT -> exit 0 after 'done:'",
              proc.returncode == 0 and "capturing from 'pulse'" in se and "done:" in se,
              f"exit {proc.returncode}; stderr {se.strip()[-400:]!r}")
        w_mic = rc.corpus_wer([clip["text"]], [text])
        w_off = rc.corpus_wer([clip["text"]], [offline])
        ck.ok(f"device: WER {w_mic:.2f}% vs offline {w_off:.2f}% (limit +5 pp); the last final came "
              f"{lag:.1f} s after the speech ended", w_mic <= w_off + 5.0 and so.strip() != "",
              f"{text.strip()!r}; overflow warnings {se.count('input overflow')}")

        proc = subprocess.Popen([args.mic, "--server", url, "--device", "pulse", "--log-level", "info"],
                                env=mic_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(2.0)
            proc.send_signal(signal.SIGINT)
            _, se = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, se = proc.communicate()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        ck.ok("device: --device pulse (by name) captures from it; SIGINT -> exit 0",
              proc.returncode == 0 and "capturing from 'pulse'" in se,
              f"exit {proc.returncode}; stderr {se.strip()[-300:]!r}")
        try:
            p, dt = run_mic(args, ["--server", url, "--device", "no-such-device"], timeout=30, env=env)
            ck.ok("device: --device with an unknown name -> non-zero exit naming it",
                  p.returncode not in (0, None) and "no input device named 'no-such-device'" in p.stderr,
                  f"exit {p.returncode} in {dt:.1f} s; stderr {p.stderr.strip()[-200:]!r}")
        except subprocess.TimeoutExpired:
            ck.ok("device: --device with an unknown name -> exits", False, "still running after 30 s")


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
    # SIGTERM (a CI timeout) unwinds like an exception, so the finally blocks end
    # the browser, PulseAudio and the server, which run in their own sessions.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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

        try:
            device_section(args, ck, url, rows[LONG_CLIP], offline[LONG_CLIP], tmp)
        except RuntimeError as e:  # no PulseAudio
            ck.ok("device: a PulseAudio server for the input device", False, str(e))

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
