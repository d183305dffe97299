"""The browser dictation page (web/) in headless Firefox, with a real microphone
path: PulseAudio.

Firefox has no file-backed fake microphone, so the test gives it a real one: a
private PulseAudio server (tests/ref/vaudio.py) whose default source is the
monitor of a null sink, and `paplay` plays a dev clip (plus 2 s of silence)
into that sink. Firefox (Debian's firefox-esr, stock) is driven over WebDriver
BiDi, its built-in remote protocol (tests/ref/bidi.py; no geckodriver). The
null sink runs at 44.1 kHz while the page asks for a 48 kHz AudioContext, as
on much real hardware.

For each audio path (the page's automatic choice, then PCM forced), from a
fresh page load: open the settings, choose the audio setting, click Start
(a real pointer click), play the clip, click Stop when it has played, and
check that
  - the page reports the audio path that is right for this browser: Opus
    (WebCodecs) where Firefox's AudioEncoder supports the page's Opus
    configuration, else PCM; PCM when PCM is chosen;
  - the level meter moved (audio really arrived through the device);
  - text appeared while the clip was still playing;
  - the final transcript is within 5 word errors of the offline CLI's on the
    same clip (the tolerance of tests/ref/test_web.py), with no error shown
    and no uncaught script error;
  - the page ends in the `stopped` state;
and save a screenshot to --artifacts. In the first run also: the .srt download
(clicked; WebDriver BiDi's download events and a download folder) holds the
transcript's cues, and the caption view opens on a click with the focus on its
close button and closes on Escape, the focus back on its button. Then the
caption viewer (caption.html), opened before its feed starts: it waits, shows
the session (tentative words styled apart from committed ones) and says ended.

Needs the Debian packages firefox-esr, pulseaudio, pulseaudio-utils, sox and the
PyPI package websockets.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bidi  # noqa: E402
import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402
import vaudio  # noqa: E402

CLIP = "librispeech_train-clean-100_1898-145715-0024"  # 14.8 s, 2 utterances
SINK_RATE = 44100

# The page's Opus configuration (web/app.js, setupEncoder).
OPUS_CONFIG = {"codec": "opus", "sampleRate": 48000, "numberOfChannels": 1, "bitrate": 32000,
               "opus": {"format": "opus", "frameDuration": 20000}}

FIREFOX_PREFS = {
    "media.navigator.permission.disabled": True,  # no permission prompt for the microphone
    "media.navigator.streams.fake": False,        # the real (PulseAudio) device
    "media.autoplay.default": 0,
    "media.autoplay.blocking_policy": 0,
}


def exports_and_caption_view(ff, c, dl_dir, text, ok):
    """Download .srt (a click) and the caption view (a click, then Escape)."""
    ff.events.clear()
    ff.click(c, "#dlSrt")
    path, srt = os.path.join(dl_dir, "transcript.srt"), ""
    t = time.monotonic()
    while time.monotonic() - t < 10:
        ff.evaluate(c, "0")  # lets the download events arrive
        ends = [e for e in ff.events if e.get("method") == "browsingContext.downloadEnd"]
        if ends:
            path = ends[0]["params"].get("filepath") or path
            break
        time.sleep(0.2)
    try:
        with open(path, encoding="utf-8") as f:
            srt = f.read()
    except OSError:
        pass
    last = text.strip().split()[-1] if text.strip() else "?"
    ok("the .srt download holds the transcript's cues",
       srt.startswith("1\n00:00:") and last in srt, f"{path}: {srt[:80]!r}")
    ff.click(c, "#captions")
    opened = ff.evaluate(c, "[!document.querySelector('#captionView').hidden, document.activeElement.id,"
                            " document.querySelector('#captionLines').innerText]")
    ff.press(c, "Escape")
    closed = ff.evaluate(c, "[document.querySelector('#captionView').hidden, document.activeElement.id]")
    ok("the caption view opens with the focus on its close button and closes on Escape",
       opened[0] and opened[1] == "captionsOff" and last in opened[2] and closed == [True, "captions"],
       f"opened {opened}, then {closed}")


def viewer(ff, c, srv, clip_file, tmp, artifacts, ok):
    """The caption viewer in Firefox: opened before the feed starts it waits;
    it shows the session (tentative words styled apart), then says ended."""
    from test_page import TENTATIVE_JS, Speaker, pcm16k
    ff.navigate(c, srv.http_url + "/caption.html?feed=firefox-feed")
    try:
        ff.wait_for(c, "document.querySelector('#status').textContent.includes('Waiting')", timeout=15)
        waiting = True
    except TimeoutError:
        waiting = False
    before = ff.evaluate(c, "JSON.stringify([document.querySelector('#status').textContent, window.sotto.viewer])")
    sp = Speaker(srv.ws_url, "firefox-feed", pcm16k(clip_file, tmp), realtime=True)
    tent, t0 = None, time.monotonic()
    try:
        while tent is None and time.monotonic() - t0 < 30 and not sp.done.is_set():
            tent = ff.evaluate(c, "(" + TENTATIVE_JS + ")()")
            if tent is None:
                time.sleep(0.05)
        sp.done.wait(120)
        try:
            ff.wait_for(c, "document.querySelector('#status').textContent.includes('ended')", timeout=30)
            ended = True
        except TimeoutError:
            ended = False
        shown = ff.evaluate(c, "document.querySelector('#captionLines').textContent")
        ff.screenshot(c, os.path.join(artifacts, "firefox-caption-viewer.png"))
    finally:
        sp.close()
    last = [w.strip(".,") for w in " ".join(e["text"] for e in sp.finals()).split()[-2:]]
    ok("viewer: opened before the feed it waits, then shows the session and says ended",
       waiting and ended and last and all(w in shown for w in last),
       f"waiting shown {waiting} ({before}), ended shown {ended}; {shown!r}, want {last}; "
       f"status {ff.evaluate(c, 'document.querySelector(`#status`).textContent')!r}; console {ff.logs[-4:]}")
    ok("viewer: tentative words look different from committed ones",
       tent is not None and tent["color"] != tent["base"] and tent["style"] != tent["baseStyle"], f"{tent}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--firefox", default=shutil.which("firefox-esr") or shutil.which("firefox")
                    or "firefox-esr")
    ap.add_argument("--artifacts", default=os.path.join(rc.REPO, "build", "test-artifacts"))
    args = ap.parse_args()
    # SIGTERM (a CI timeout) unwinds like an exception, so the finally blocks end
    # the browser, PulseAudio and the server, which run in their own sessions.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_all = time.monotonic()
    missing = vaudio.missing_tools() + [t for t in (args.firefox, "sox") if not shutil.which(t)]
    if missing:
        sys.exit(f"missing {' '.join(missing)} (apt-get install firefox-esr {vaudio.PACKAGES} sox)")

    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    clip = rows[CLIP]
    os.makedirs(args.artifacts, exist_ok=True)
    off = rc.run_sotto(args.sotto, args.model, [clip["file"]], ["--beam", "1", "--temperature", "0"])
    offline = off[clip["file"]]["text"]
    ref = rc.normalize(clip["text"]).split()
    e_off = rc.edit_distance(ref, rc.normalize(offline).split())
    tmp = tempfile.mkdtemp(prefix="sotto-firefox-test-")
    wav = os.path.join(tmp, "mic.wav")  # the clip, then 2 s of silence to end the utterance
    subprocess.run(["sox", clip["file"], wav, "pad", "0", "2"], check=True)
    failed, n = [], 0

    def ok(name, cond, detail=""):
        nonlocal n
        n += 1
        print(f"  [{'ok  ' if cond else 'FAIL'}] {name}" + (f": {detail}" if detail else ""), flush=True)
        if not cond:
            failed.append(name)

    va = srv = ff = None
    try:
        va = vaudio.VirtualAudio(sink="sotto_firefox_mic", rate=SINK_RATE).start()
        srv = sc.Server(args.server, args.model, ["--web", os.path.join(rc.REPO, "web")]).start()
        ff = bidi.Firefox(args.firefox, prefs=FIREFOX_PREFS, env=va.env()).start()
        c = ff.context
        dl_dir = os.path.join(tmp, "downloads")
        os.makedirs(dl_dir)
        ff.command("browser.setDownloadBehavior", {
            "downloadBehavior": {"type": "allowed", "destinationFolder": dl_dir}})
        ff.command("session.subscribe", {"events": ["browsingContext.downloadEnd"]})
        print(f"{ff.version()}; PulseAudio null sink at {SINK_RATE} Hz, default source {va.source}")
        for codec in ("auto", "pcm"):
            ff.logs.clear()
            ff.navigate(c, srv.http_url + "/")
            # the page keeps its transcript in localStorage: each run starts from an empty one
            ff.evaluate(c, "localStorage.clear()")
            ff.navigate(c, srv.http_url + "/")
            ff.click(c, "summary")  # open the settings
            ff.wait_for(c, "document.querySelectorAll('#weights option').length > 1", timeout=10)
            opus = ff.evaluate(c, "('AudioEncoder' in window) ? AudioEncoder.isConfigSupported("
                               + json.dumps(OPUS_CONFIG) + ").then(r => r.supported, () => false) : false")
            native_rate = ff.evaluate(c, "(async () => { const a = new AudioContext(); const r = a.sampleRate;"
                                         " await a.close(); return r; })()")
            want = "Opus" if codec == "auto" and opus else "PCM"
            ff.call(c, "(v) => { const s = document.querySelector('#codec'); s.value = v;"
                       " s.dispatchEvent(new Event('change', {bubbles: true})); }", codec)
            ff.click(c, "#start")
            ff.wait_for(c, "document.querySelector('#status').dataset.kind === 'live' ||"
                           " !document.querySelector('#error').hidden", timeout=30)
            shown = ff.evaluate(c, "document.querySelector('#codecShown').textContent")
            t0 = time.monotonic()
            player = va.play(wav)
            t_first, level = None, 0
            while player.poll() is None and time.monotonic() - t0 < clip["seconds"] + 30:
                s = ff.evaluate(c, "[document.querySelector('#transcript').innerText.trim().length,"
                                   " parseInt(document.querySelector('#level').style.width) || 0]")
                if s[0] > 0 and t_first is None:
                    t_first = time.monotonic() - t0
                level = max(level, s[1])
                time.sleep(0.25)
            played = time.monotonic() - t0
            perr = player.stderr.read().decode(errors="replace") if player.stderr else ""
            ok(f"{codec}: paplay played the clip into the null sink ({played:.1f} s)",
               player.poll() == 0 and played >= clip["seconds"], f"exit {player.poll()} {perr[-200:]!r}")
            ff.click(c, "#start")  # the toggle: Stop dictation
            stopped = True
            try:
                ff.wait_for(c, "document.querySelector('#status').textContent === 'stopped'", timeout=60)
            except TimeoutError:
                stopped = False
            st = ff.evaluate(c, "({text: window.sotto.transcript.text(), latency: window.sotto.state.finalLatency,"
                                " status: document.querySelector('#status').textContent,"
                                " error: document.querySelector('#error').hidden ? '' :"
                                " document.querySelector('#error').textContent,"
                                " codec: window.sotto.state.codec})")
            shot = os.path.join(args.artifacts, f"firefox-{codec}.png")
            ff.screenshot(c, shot)
            text = st["text"]
            e = rc.edit_distance(ref, rc.normalize(text).split())
            js_errors = [m for m in ff.logs if m.startswith("javascript")]
            label = f"{codec} ({shown})"
            print(f"    Firefox AudioEncoder Opus: {opus}; default AudioContext rate {native_rate} Hz; "
                  f"last final {st['latency']} ms after speech end")
            ok(f"{label}: the page reports the audio path right for this browser ({want})",
               want in shown and st["codec"] == want.lower(), f"shown {shown!r}, state {st['codec']!r}")
            ok(f"{label}: the level meter moved (audio arrived through PulseAudio)", level > 0,
               f"peak {level}%")
            ok(f"{label}: text appeared {t_first if t_first is not None else -1:.1f} s after the clip "
               f"started, before it ended", t_first is not None and t_first < clip["seconds"])
            ok(f"{label}: transcript within 5 word errors of the offline CLI",
               e <= e_off + 5 and not st["error"] and not js_errors,
               f"{e}/{len(ref)} errors (offline {e_off}): {text.strip()!r}; error box {st['error']!r}; "
               f"console {ff.logs[-5:]}")
            ok(f"{label}: the page ends 'stopped'", stopped and st["status"] == "stopped",
               f"status {st['status']!r}")
            print(f"    screenshot: {shot}")
            if codec == "auto":
                exports_and_caption_view(ff, c, dl_dir, text, ok)
        viewer(ff, c, srv, clip["file"], tmp, args.artifacts, ok)
    except (bidi.BidiError, TimeoutError, RuntimeError) as ex:
        ok("the page could be driven in Firefox", False, f"{type(ex).__name__}: {ex}; console "
           f"{ff.logs[-8:] if ff else []}; firefox log {ff.log()[-800:] if ff else ''!r}")
    finally:
        if ff:
            ff.close()
        if srv:
            srv.stop()
        if va:
            va.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{n} checks, {len(failed)} failed, {time.monotonic() - t_all:.0f} s")
    for f in failed:
        print(f"  FAILED: {f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
