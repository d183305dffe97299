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

Section `auth`: against a server started with --api-key, Start first shows the
access field and an alert (the server answered `unauthorized`); a key typed
there is exchanged for a short-lived client token (the page keeps the token,
never the key, and the field is emptied) and dictation works; a page opened as
`/#token=ek_...` (a token minted with POST /v1/realtime/client_secrets)
dictates at once and drops the token from its address, and transcribes a file
picked in it with that token.

Section `denied`: with the microphone permission refused, the page's alert says
so and Start stays usable.

Then keyboard only (section `keyboard`): from a fresh page load, with nothing but
key presses (Tab, Shift+Tab, Enter, Space, arrow keys, Escape), open the
settings and change the weights, language and task, start dictation (the
server's ready status must show the chosen weights and language), stop it,
copy the transcript, download it as .txt/.srt/.vtt, open and leave the caption
view (Escape, and Enter on its close button), clear the transcript, undo that
and clear it again. After every
key press the focused element (document.activeElement) must be the expected
one and its focus visible (:focus-visible with an outline or box-shadow);
the one Start/Stop toggle keeps the focus; the caption view keeps
Tab inside it and gives the focus back to its button when it closes; Tab from
the last control leaves it (no trap).

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
    ap.add_argument("--only", default="opus,pcm,keyboard,denied,auth",
                    help="comma-separated sections: opus, pcm, keyboard, denied, auth")
    args = ap.parse_args()
    only = set(args.only.split(","))
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
                if {"auto": "opus", "pcm": "pcm"}[codec] not in only:
                    continue
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
                page.click("#start")  # the toggle, now "Stop dictation"
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
            if "keyboard" in only:
                keyboard_only(pw, args, srv, wav, clip, ref, e_off, ok)
            if "denied" in only:
                denied(pw, args, srv, ok)
            if "auth" in only:
                auth(pw, args, wav, ok)
    finally:
        srv.stop()
    print(f"\n{n} checks, {len(failed)} failed")
    for f in failed:
        print(f"  FAILED: {f}")
    sys.exit(1 if failed else 0)


def auth(pw, args, wav, ok):
    """A server with --api-key: the page asks for a key once, keeps only a token."""
    print("== auth (--api-key)")
    key = "sk-web-test-key-0001"
    srv = sc.Server(args.server, args.model, ["--web", os.path.join(rc.REPO, "web"), "--api-key", key]).start()
    browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=[
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required"])
    try:
        def dictate(page):
            page.click("#start")
            page.wait_for_function("document.querySelector('#status').dataset.kind === 'live'", timeout=30000)
            page.wait_for_function("document.querySelector('#transcript').innerText.trim().length > 0",
                                   timeout=30000)
            page.click("#start")  # Stop dictation
            page.wait_for_function("document.querySelector('#status').textContent === 'stopped'",
                                   timeout=60000)
            return page.evaluate("window.sotto.transcript.text()")

        page = browser.new_page()
        page.goto(srv.http_url + "/")
        page.click("#start")
        page.wait_for_function("!document.querySelector('#access').hidden && "
                               "!document.querySelector('#error').hidden", timeout=20000)
        err = page.inner_text("#error")
        ok("auth: without a key, Start shows the access field and says the server needs a key",
           "API key" in err and page.evaluate("document.activeElement.id") == "accessKey", repr(err))
        page.fill("#accessKey", key)
        text = dictate(page)
        held = page.evaluate("JSON.stringify(window.sotto.access) + JSON.stringify(sessionStorage) + "
                             "JSON.stringify(localStorage) + document.querySelector('#accessKey').value")
        tok = page.evaluate("window.sotto.access.token") or ""
        ok("auth: with the key typed once the page dictates; it keeps a client token, not the key",
           text.strip() != "" and tok.startswith("ek_") and key not in held, f"{text.strip()[:60]!r}, token {tok[:8]}")
        page.close()
        import urllib.request
        req = urllib.request.Request(srv.http_url + "/v1/realtime/client_secrets", method="POST",
                                     headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            minted = json.loads(r.read())["value"]
        page = browser.new_page()
        page.goto(srv.http_url + "/#token=" + minted)
        hash_after = page.evaluate("location.hash")
        text = dictate(page)
        ok("auth: a page opened with #token=ek_... dictates at once and drops the token from its address",
           text.strip() != "" and hash_after == "" and page.is_hidden("#access"), f"hash {hash_after!r}, {text.strip()[:60]!r}")
        page.set_input_files("#file", wav)  # file transcription with the same token
        try:
            page.wait_for_function("document.querySelector('#fileStatus').textContent.includes('transcribed') || "
                                   "!document.querySelector('#error').hidden", timeout=120000)
        except Exception:
            pass
        status = page.inner_text("#fileStatus")
        err = page.inner_text("#error") if page.is_visible("#error") else ""
        ok("auth: a file picked in the page is transcribed with the page's token",
           "transcribed" in status and not err, f"{status!r}, alert {err!r}")
    finally:
        browser.close()
        srv.stop()


def denied(pw, args, srv, ok):
    """The microphone permission refused (no fake-UI flag, no permission
    granted): the page says so in its alert and stays ready to try again."""
    print("== microphone permission denied")
    browser = pw.chromium.launch(executable_path=args.chromium, headless=True,
                                 args=["--use-fake-device-for-media-stream"])
    try:
        context = browser.new_context(permissions=[])
        page = context.new_page()
        page.goto(srv.http_url + "/")
        page.click("#start")
        page.wait_for_function("!document.querySelector('#error').hidden", timeout=15000)
        err = page.inner_text("#error")
        start_enabled = page.eval_on_selector("#start", "b => !b.disabled")
        ok("denied microphone: the alert explains the permission, Start can be pressed again",
           "permission was denied" in err and start_enabled, f"{err!r}, start enabled {start_enabled}")
    finally:
        browser.close()


# The focused element and whether its focus is visible: it matches
# :focus-visible and has an outline or a box-shadow.
FOCUS_JS = """() => {
  const a = document.activeElement;
  if (!a || a === document.body) return {id: 'body', visible: false, behind: false};
  const cs = getComputedStyle(a);
  const ring = (cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) > 0) ||
               (cs.boxShadow !== '' && cs.boxShadow !== 'none');
  return {id: a.id || a.tagName.toLowerCase(), visible: a.matches(':focus-visible') && ring,
          behind: !!a.closest('header, main')};
}"""


def keyboard_only(pw, args, srv, wav, clip, ref, e_off, ok):
    """The page driven with keyboard.press only, from a fresh load (see the module
    docstring). Each phase is one check; its detail names the first wrong step."""
    print("== keyboard only")
    browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=[
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required"])
    try:
        context = browser.new_context(permissions=["clipboard-read", "clipboard-write"],
                                      accept_downloads=True)
        page = context.new_page()
        logs = []
        page.on("console", lambda m: logs.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: logs.append(f"pageerror: {e}"))
        page.goto(srv.http_url + "/")
        page.wait_for_function("document.querySelectorAll('#weights option').length > 1", timeout=10000)
        offered = page.eval_on_selector_all("#weights option", "os => os.map(o => o.value)")
        val = lambda sel: page.eval_on_selector(sel, "e => e.value")  # noqa: E731
        problems = []

        def press(key, want, check=None, what=""):
            """Presses key; the focus must then be on `want` (an id, or the tag
            name of an element without one) and visible; check() must be true."""
            page.keyboard.press(key)
            f = page.evaluate(FOCUS_JS)
            t = time.monotonic()  # what a key starts may finish asynchronously (Start, Copy)
            while (f["id"] != want or (check is not None and not check())) and time.monotonic() - t < 5:
                time.sleep(0.05)
                f = page.evaluate(FOCUS_JS)
            bad = []
            if f["id"] != want:
                bad.append(f"focus on {f['id']}, not {want}")
            elif not f["visible"]:
                bad.append(f"focus on {want} not visible")
            if check is not None and not check():
                bad.append(f"not {what}")
            if bad:
                problems.append(f"{key} -> {'; '.join(bad)}")
            return not bad

        def phase(name, detail=""):
            ok(f"keyboard: {name}", not problems,
               ("; ".join(problems[:3]) + f"; console {logs[-3:]}" if problems else detail))
            problems.clear()

        # -- settings: open them, change weights, language, task
        other = offered[1] if len(offered) > 1 else None
        press("Tab", "start")
        press("Tab", "summary")
        press("Enter", "summary", lambda: page.evaluate("document.querySelector('details').open"),
              "settings open")
        press("Tab", "weights")
        press("ArrowDown", "weights", lambda: other is not None and val("#weights") == other,
              f"weights {other}")
        press("Tab", "language")
        press("ArrowDown", "language", lambda: val("#language") == "en", "language en")
        press("Tab", "task")
        press("ArrowDown", "task", lambda: val("#task") == "translate", "task translate")
        press("ArrowUp", "task", lambda: val("#task") == "transcribe", "task transcribe")
        press("Tab", "codec")
        phase(f"reach the settings and change weights to {other}, language to en, task and back",
              f"weights {val('#weights')}, language {val('#language')}, task {val('#task')}")

        # -- back to Start, dictate, Stop
        for want in ("task", "language", "weights", "summary", "start"):
            press("Shift+Tab", want)
        t0 = time.monotonic()
        press("Enter", "start")  # Start pressed; the toggle keeps the focus
        try:
            page.wait_for_function("document.querySelector('#status').dataset.kind === 'live'",
                                   timeout=30000)
        except Exception:
            problems.append("dictation did not start")
        status = page.inner_text("#status")
        if other and f", {other} (" not in status or ", en" not in status:
            problems.append(f"status {status!r} does not show weights {other} and language en")
        f = page.evaluate(FOCUS_JS)
        label = page.inner_text("#start")
        if f["id"] != "start" or label != "Stop dictation":
            problems.append(f"focus on {f['id']} after the session started, label {label!r}")
        time.sleep(max(0.0, clip["seconds"] + 2.5 - (time.monotonic() - t0)))
        page.keyboard.press("Space")  # Stop dictation
        try:
            page.wait_for_function("document.querySelector('#status').textContent === 'stopped'",
                                   timeout=60000)
        except Exception:
            problems.append(f"not stopped: {page.inner_text('#status')!r}")
        f = page.evaluate(FOCUS_JS)
        if f["id"] != "start" or not f["visible"]:
            problems.append(f"after Stop the focus is on {f['id']} (visible {f['visible']}), not start")
        text = page.evaluate("window.sotto.transcript.text()")
        e = rc.edit_distance(ref, rc.normalize(text).split())
        if e > e_off + 5:
            problems.append(f"{e}/{len(ref)} word errors (offline {e_off}): {text.strip()!r}")
        phase("Enter on the toggle starts dictation, Space on it (now Stop dictation) ends it; the focus stays on it",
              f"status {status!r}; {e}/{len(ref)} word errors (offline {e_off})")

        # -- close the settings, copy, download .txt/.srt/.vtt
        press("Tab", "summary")
        press("Enter", "summary", lambda: not page.evaluate("document.querySelector('details').open"),
              "settings closed")
        press("Tab", "copy")
        press("Enter", "copy", lambda: page.inner_text("#status") == "copied", "status copied")
        clip_text = page.evaluate("navigator.clipboard.readText()")
        if clip_text != text or not text.strip():
            problems.append(f"clipboard {clip_text[:60]!r} is not the transcript")
        downloads = {}
        for key, want, name in (("Enter", "dlTxt", "transcript.txt"), ("Space", "dlSrt", "transcript.srt"),
                                ("Enter", "dlVtt", "transcript.vtt")):
            press("Tab", want)
            try:
                with page.expect_download(timeout=10000) as d:
                    press(key, want)
                with open(d.value.path(), encoding="utf-8") as fh:
                    downloads[d.value.suggested_filename] = fh.read()
            except Exception as ex:
                problems.append(f"{key} on {want}: no download ({type(ex).__name__})")
        if downloads.get("transcript.txt") != text or \
                not downloads.get("transcript.srt", "").startswith("1\n00:00:") or \
                not downloads.get("transcript.vtt", "").startswith("WEBVTT"):
            problems.append(f"downloads {sorted(downloads)}: "
                            f"{ {k: v[:30] for k, v in downloads.items()} }")
        phase("close the settings, copy, download .txt (Enter), .srt (Space), .vtt (Enter)",
              f"downloaded {sorted(downloads)}")

        # -- the caption view: open, Tab stays in it, Escape / Enter leave it
        press("Tab", "clear")
        press("Tab", "captions")
        view = lambda: page.is_visible("#captionView")  # noqa: E731
        press("Enter", "captionsOff", view, "caption view shown")
        cap = page.inner_text("#captionLines")
        if not text.strip() or text.strip().split()[-1] not in cap:
            problems.append(f"caption view shows {cap!r}")
        for key in ("Tab",) * 3 + ("Shift+Tab",) * 3:  # around the page and back
            page.keyboard.press(key)
            f = page.evaluate(FOCUS_JS)
            if f["behind"] or not view():
                problems.append(f"{key} in the caption view moved the focus behind it, to {f['id']}")
            elif f["id"] != "body" and not f["visible"]:
                problems.append(f"{key} in the caption view: focus on {f['id']} not visible")
        if page.evaluate(FOCUS_JS)["id"] != "captionsOff":  # wherever Tab went, back to the button
            press("Tab", "captionsOff")
        press("Escape", "captions", lambda: not view(), "caption view closed")
        press("Space", "captionsOff", view, "caption view shown again")
        press("Enter", "captions", lambda: not view() and not page.evaluate(
            "document.querySelector('main').inert"), "caption view closed by its button")
        page.screenshot(path=os.path.join(args.artifacts, "web-keyboard.png"), full_page=True)
        phase("caption view: Enter opens it with the focus on its close button, Tab stays in it, "
              "Escape and Enter on the button leave it")

        # -- clear; no focus trap at the end
        press("Shift+Tab", "clear")
        # Clear is disabled on an empty transcript: the focus moves on to Undo clear
        press("Enter", "undo", lambda: page.evaluate("window.sotto.transcript.text()") == "",
              "transcript cleared")
        press("Enter", "clear", lambda: page.evaluate("window.sotto.transcript.text()") == text,
              "transcript restored by Undo clear")
        press("Enter", "undo", lambda: page.evaluate("window.sotto.transcript.text()") == "",
              "transcript cleared again")
        press("Tab", "captions")
        press("Tab", "file")
        page.keyboard.press("Tab")
        f = page.evaluate(FOCUS_JS)
        if f["id"] not in ("body", "start"):
            problems.append(f"Tab from the last control went to {f['id']}")
        phase("Enter on Clear empties the transcript (focus on Undo clear, which restores it); "
              "Tab from the last control leaves it", f"then the focus is on {f['id']}")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
