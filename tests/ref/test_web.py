"""The browser dictation page (web/) in headless Chromium with a fake microphone.

For each audio path (Opus through WebCodecs, then 16-bit PCM): Chromium's fake
capture device plays a dev clip (`--use-file-for-fake-audio-capture`, no loop),
the page is driven like a person would (choose the audio setting, press Start,
wait for the clip, press Stop), and the transcript that appears must be within 5
word errors of the offline CLI's on the same clip. The page must show which audio
path it used and end in the `stopped` state; a screenshot of each run is saved
(--artifacts). Also: the weights menu lists what GET /v1/info offers; in the Opus
run the page's WebSocket is closed mid-clip and the page must reconnect, resume
and still produce the whole transcript; in the PCM run the session is published
as a feed and the caption viewer page (caption.html) shows its last line; the
caption view, and the transcript downloads as .srt.

Needs Debian's chromium and the PyPI package playwright (no browser download:
the system Chromium is used).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402

CLIP = "librispeech_train-clean-100_1898-145715-0024"  # 14.8 s, 2 utterances


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--artifacts", default=os.path.join(rc.REPO, "build", "test-artifacts"))
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    clip = rows[CLIP]
    os.makedirs(args.artifacts, exist_ok=True)
    off = rc.run_sotto(args.sotto, args.model, [clip["file"]], ["--beam", "1", "--temperature", "0"])
    offline = off[clip["file"]]["text"]
    ref = rc.normalize(clip["text"]).split()
    e_off = rc.edit_distance(ref, rc.normalize(offline).split())
    tmp = tempfile.mkdtemp(prefix="sotto-web-")
    # the fake device plays the clip at 48 kHz, then 2 s of silence so the last
    # utterance ends by the VAD
    wav = os.path.join(tmp, "mic.wav")
    subprocess.run(["sox", clip["file"], "-r", "48000", "-c", "1", wav, "pad", "0", "2"], check=True)
    failed, n = [], 0

    def ok(name, cond, detail=""):
        nonlocal n
        n += 1
        print(f"  [{'ok  ' if cond else 'FAIL'}] {name}" + (f": {detail}" if detail else ""), flush=True)
        if not cond:
            failed.append(name)

    srv = sc.Server(args.server, args.model, ["--web", os.path.join(rc.REPO, "web")]).start()
    try:
        with sync_playwright() as pw:
            for codec, want_shown in (("auto", "Opus"), ("pcm", "PCM")):
                browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=[
                    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                    f"--use-file-for-fake-audio-capture={wav}%noloop",
                    "--autoplay-policy=no-user-gesture-required"])
                page = browser.new_page()
                logs = []
                page.on("console", lambda m: logs.append(f"{m.type}: {m.text}"))
                page.on("pageerror", lambda e: logs.append(f"pageerror: {e}"))
                page.goto(srv.http_url + "/")
                page.click("summary")
                page.wait_for_function("document.querySelectorAll('#weights option').length > 1",
                                       timeout=10000)
                offered = page.eval_on_selector_all("#weights option", "os => os.map(o => o.value)")
                st, info = sc.http_get(srv.http_url + "/v1/info")
                page.select_option("#codec", codec)
                viewer = None
                if codec == "pcm":
                    page.fill("#feed", "web-test")
                t0 = time.monotonic()
                page.click("#start")
                page.wait_for_function("document.querySelector('#status').dataset.kind === 'live'",
                                       timeout=30000)
                shown = page.inner_text("#codecShown")
                if codec == "pcm":
                    viewer = browser.new_page()
                    viewer.goto(srv.http_url + "/caption.html?feed=web-test")
                # partial text appears while the clip is still playing
                page.wait_for_function("document.querySelector('#transcript').innerText.trim().length > 0",
                                       timeout=30000)
                t_first = time.monotonic() - t0
                if codec == "auto":  # the connection breaks 6 s in: reconnect + resume
                    time.sleep(max(0.0, 6.0 - (time.monotonic() - t0)))
                    page.evaluate("window.sotto.state.ws.close()")
                time.sleep(max(0.0, clip["seconds"] + 2.5 - (time.monotonic() - t0)))
                page.click("#stop")
                page.wait_for_function("document.querySelector('#status').textContent === 'stopped'",
                                       timeout=60000)
                text = page.evaluate("window.sotto.transcript.text()")
                resumes = page.evaluate("window.sotto.state.resumes")
                viewer_text = ""
                if viewer is not None:
                    viewer.wait_for_function(
                        "document.querySelector('#status').textContent.includes('ended')", timeout=30000)
                    viewer_text = viewer.inner_text("#captionLines")
                    viewer.screenshot(path=os.path.join(args.artifacts, "web-caption-viewer.png"))
                srt = page.evaluate("window.sotto.transcript.srt()")
                page.click("#captions")
                cap = page.inner_text("#captionLines")
                shot = os.path.join(args.artifacts, f"web-{codec}.png")
                page.keyboard.press("Escape")
                page.screenshot(path=shot, full_page=True)
                err = page.inner_text("#error") if page.is_visible("#error") else ""
                browser.close()
                e = rc.edit_distance(ref, rc.normalize(text).split())
                label = f"{codec} ({shown})"
                want = [w for w in (json.loads(info).get("weights", []) if st == 200 else [])]
                ok(f"{label}: the weights menu lists what /v1/info offers", offered == want and want,
                   f"menu {offered}, /v1/info {want}")
                if codec == "auto":
                    ok(f"{label}: the page reconnected and resumed after its connection broke",
                       resumes >= 1, f"resumes {resumes}")
                else:
                    last_words = text.strip().split()[-3:]
                    ok(f"{label}: the caption viewer of the published feed shows the last line",
                       all(w in viewer_text for w in last_words), f"viewer {viewer_text!r}")
                ok(f"{label}: the page shows its audio path", want_shown in shown, shown)
                ok(f"{label}: text appeared {t_first:.1f} s after Start, before the clip ended",
                   t_first < clip["seconds"], "")
                # one clip, streamed at real-time pace while Chromium (two pages in the PCM
                # run) and the server share 2 cores: commit points vary run to run (seen:
                # 1 to 5 errors of 42). Corpus-level accuracy is asserted in test_server.py.
                ok(f"{label}: transcript within 5 word errors of the offline CLI",
                   e <= e_off + 5 and not err,
                   f"{e}/{len(ref)} errors (offline {e_off}): {text.strip()!r}; error box {err!r}; "
                   f"console {logs[-5:]}")
                ok(f"{label}: caption view shows the last line; .srt export has the cues",
                   cap.strip() != "" and srt.startswith("1\n00:00:") and text.strip().split()[-1] in cap,
                   f"caption {cap!r}; srt {srt[:80]!r}")
                print(f"    screenshot: {shot}")
    finally:
        srv.stop()
    print(f"\n{n} checks, {len(failed)} failed")
    for f in failed:
        print(f"  FAILED: {f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
