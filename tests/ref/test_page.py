"""The dictation page and the caption viewer as people use them (issue 18), in
headless Debian Chromium (playwright, no browser download) against a real
sotto-server. Sections (--only):

- `down`: the page served by a plain HTTP server with no sotto behind it:
  Start retries with backoff, says in the alert that the server cannot be
  reached, and ends stopped with every microphone track ended; pressing Start
  twice opens one capture, not two.
- `taken`: another client publishes feed F; the page starting with feed F
  says the name is in use, ends stopped with the microphone released, and
  dictates after the name is changed (no reload).
- `busy`: a server whose only session slot is taken: the page says the
  server is busy (a fatal `overloaded`) and ends stopped, microphone released.
- `viewer`: caption.html?feed=F opened before the talk says it is waiting
  (it heard the server's not_found before the close); it shows the
  session's text once F starts (tentative words styled differently from
  committed ones: colour and font style), says "ended" after `done`, follows
  a second session under the same name, and a third one that starts and
  ends while the viewer cannot connect (offline); its .vtt/.srt links work
  after the feed ended. On a server with --resume-grace-s 0: a feed whose
  session is gone still has its captions (viewer, .vtt, its viewer key still
  needed), and the oldest of more than 64 ended feeds is dropped.
- `cues`: a 60 s dictation published as a feed: the server's .srt and .vtt
  (stream/subtitle.c) and the page's .srt (captions.js) have cues of at most
  2 lines of 42 characters and 7 s, hold every word of the finals in order,
  and agree with each other; the caption view and the viewer show at most two
  lines, each one line high and within the width, at 320 px and 1280 px.
- `layout`: no horizontal scroll at 320, 375 and 414 px (settings open), and
  axe-core finds no violations (WCAG 2 A/AA rules, contrast included) on the
  page (light and dark, and with the caption view open) and the viewer (each
  theme).
- `insecure`: without navigator.mediaDevices (plain http from another
  device), Start says to open the page over https or on localhost, and no
  script error is raised.
- `use`: a fresh page has Copy/Download/Clear disabled; a dictation (fake
  microphone) shows the elapsed time, the "speech detected" state, a level
  meter below 100 % and the text delay in seconds, without moving the
  transcript; Alt+D stops it; the transcript's polite live region only ever gets
  finals appended (nothing removed, one addition per final); the text
  survives a reload (localStorage); Clear is undone by "Undo clear"; a long
  transcript scrolls and follows new text.
- `upload`: a file picked in the page, and a file dropped on the transcript
  (a drop event with a DataTransfer holding it), are transcribed through
  /v1/audio/transcriptions with the same words as `sotto transcribe`.
- `mic`: the microphone picker lists Chromium's fake device once the
  permission is given; a dictation after choosing it asks getUserMedia for
  exactly that device and records from it; the picker keeps the choice.

Screenshots of each state go to --artifacts (page-*.png).
Needs the PyPI packages playwright and axe-playwright-python.
"""
import argparse
import base64
import functools
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402

WEB = os.path.join(rc.REPO, "web")
SHORT = "jfk"  # 11 s
CLIP = "librispeech_train-clean-100_1898-145715-0024"  # 14.8 s, 2 utterances
SECTIONS = "down,taken,busy,viewer,cues,layout,insecure,use,upload,mic"


class Checks:
    def __init__(self):
        self.n, self.failed = 0, []

    def __call__(self, name, cond, detail=""):
        self.n += 1
        print(f"  [{'ok  ' if cond else 'FAIL'}] {name}" + (f": {detail}" if detail else ""), flush=True)
        if not cond:
            self.failed.append(name)
        return cond


def wait(page, js, timeout=30000):
    """True once js is true in page (condition-based: a loaded machine only makes it slower)."""
    try:
        page.wait_for_function(js, timeout=timeout)
        return True
    except Exception:
        return False


def pcm16k(path, tmp, pad=1.0):
    raw = os.path.join(tmp, os.path.basename(path) + ".s16")
    subprocess.run(["sox", path, "-r", "16000", "-c", "1", "-b", "16", "-e", "signed", "-t", "raw", raw,
                    "pad", "0", str(pad)], check=True)
    with open(raw, "rb") as f:
        return f.read()


class Speaker:
    """A sotto.v1 client in a thread that publishes a feed: start, audio
    (real-time pace or as fast as it goes), stop, done."""

    def __init__(self, url, feed, pcm, realtime=False, partials=True, hold=False, feed_key=None):
        from websockets.sync.client import connect
        self.ws = connect(url, max_size=None, open_timeout=30)
        start = {"type": "start", "encoding": "pcm_s16le", "sample_rate": 16000, "feed": feed, "partials": partials}
        if feed_key:
            start["feed_key"] = feed_key
        self.ws.send(json.dumps(start))
        self.events, self.done = [], threading.Event()
        self.pcm, self.realtime, self.hold = pcm, realtime, hold
        self.ready = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _recv(self):
        try:
            for m in self.ws:
                e = json.loads(m)
                self.events.append(e)
                if e.get("type") in ("ready", "error"):
                    self.ready.set()
                if e.get("type") == "done":
                    break
        except Exception:
            pass
        self.ready.set()
        self.done.set()

    def _run(self):
        r = threading.Thread(target=self._recv, daemon=True)
        r.start()
        self.ready.wait(60)
        if self.hold:  # keep the session (and its feed name) alive until close()
            while not self.done.is_set():
                try:
                    self.ws.send(json.dumps({"type": "ping"}))
                except Exception:
                    break
                self.done.wait(2)
            return
        step = 3200  # 100 ms
        t0 = time.monotonic()
        try:
            for k in range(0, len(self.pcm), step):
                self.ws.send(self.pcm[k:k + step])
                if self.realtime:
                    time.sleep(max(0.0, t0 + (k // step + 1) * 0.1 - time.monotonic()))
            self.ws.send(json.dumps({"type": "stop"}))
        except Exception:
            pass
        r.join(300)

    def close(self):
        self.done.set()
        try:
            self.ws.close()
        except Exception:
            pass

    def finals(self):
        return [e for e in self.events if e.get("type") == "final" and e.get("text", "").strip()]

    def session(self):
        """The log's name for the session ("s12" of "s12-3fa0c1d2")."""
        r = [e for e in self.events if e.get("type") == "ready"]
        return r[0]["session"].split("-")[0] if r else None

    def last_words(self, n=2):
        return [w.strip(".,?!") for w in " ".join(e["text"] for e in self.finals()).split()[-n:]]


def parse_subs(text, vtt):
    """[(start, end, [lines])] of an .srt or .vtt."""
    def secs(s):
        h, m, rest = s.replace(",", ".").split(":")
        return int(h) * 3600 + int(m) * 60 + float(rest)
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    if vtt:
        assert blocks and blocks[0].startswith("WEBVTT"), "no WEBVTT header"
        blocks = blocks[1:]
    cues = []
    for i, b in enumerate(blocks):
        ls = b.split("\n")
        if not vtt:
            assert ls[0] == str(i + 1), f"cue {i + 1} numbered {ls[0]!r}"
            ls = ls[1:]
        a, z = ls[0].split(" --> ")
        cues.append((secs(a), secs(z), ls[1:]))
    return cues


def cue_problems(cues, limit_s=7.0, chars=42, lines=2):
    bad = []
    for i, (a, z, ls) in enumerate(cues):
        if len(ls) > lines or not ls:
            bad.append(f"cue {i + 1} has {len(ls)} lines")
        for ln in ls:
            if len(ln) > chars and " " in ln:
                bad.append(f"cue {i + 1} line of {len(ln)} chars: {ln!r}")
        if z - a > limit_s + 0.0015:
            bad.append(f"cue {i + 1} lasts {z - a:.2f} s")
        if z < a:
            bad.append(f"cue {i + 1} ends before it starts")
    return bad


# Lines of a caption element: how many, and whether each is one line high and
# within the element's width.
LINES_JS = """(sel) => {
  const el = document.querySelector(sel);
  const lh = parseFloat(getComputedStyle(el).lineHeight) || parseFloat(getComputedStyle(el).fontSize) * 1.3;
  const out = [];
  for (const d of el.children) {
    const r = document.createRange(); r.selectNodeContents(d);
    const rects = [...r.getClientRects()].filter((x) => x.width > 0);
    const tops = new Set(rects.map((x) => Math.round(x.top)));
    const right = Math.max(0, ...rects.map((x) => x.right)), left = el.getBoundingClientRect().left;
    out.push({text: d.textContent, rows: tops.size, h: d.getBoundingClientRect().height, lh,
              over: right - el.getBoundingClientRect().right, w: el.clientWidth});
  }
  return {lines: out, n: el.children.length, scroll: el.scrollWidth - el.clientWidth};
}"""


def lines_ok(info):
    bad = [ln for ln in info["lines"] if ln["rows"] > 1 or ln["h"] > 1.5 * ln["lh"] or ln["over"] > 1]
    return info["n"] <= 2 and info["n"] > 0 and not bad, bad


def main():
    global WEB
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--artifacts", default=os.path.join(rc.REPO, "build", "test-artifacts"))
    ap.add_argument("--web", default=WEB, help="the page's files (another version to compare)")
    ap.add_argument("--only", default=SECTIONS, help=f"comma-separated sections: {SECTIONS}")
    args = ap.parse_args()
    only = set(args.only.split(","))
    WEB = os.path.abspath(args.web)
    from playwright.sync_api import sync_playwright

    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    os.makedirs(args.artifacts, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sotto-page-")
    mic = os.path.join(tmp, "mic.wav")  # the fake microphone: a clip at 48 kHz, then 2 s of silence
    subprocess.run(["sox", rows[CLIP]["file"], "-r", "48000", "-c", "1", mic, "pad", "0", "2"], check=True)
    ok = Checks()
    shot = lambda page, name: page.screenshot(path=os.path.join(args.artifacts, f"page-{name}.png"))  # noqa: E731
    srv = sc.Server(args.server, args.model, ["--web", WEB]).start()
    t_start = time.monotonic()
    try:
        with sync_playwright() as pw:
            def browser(fake_mic=True):
                a = ["--autoplay-policy=no-user-gesture-required"]
                if fake_mic:
                    a += ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                          f"--use-file-for-fake-audio-capture={mic}%noloop"]
                return pw.chromium.launch(executable_path=args.chromium, headless=True, args=a)

            ctx = dict(args=args, srv=srv, ok=ok, shot=shot, browser=browser, rows=rows, tmp=tmp)
            for name in SECTIONS.split(","):
                if name in only:
                    t0 = time.monotonic()
                    print(f"== {name}", flush=True)
                    try:
                        globals()["section_" + name](**ctx)
                    except Exception as ex:  # a broken section fails, the others still run
                        ok(f"{name}: ran to the end", False, f"{type(ex).__name__}: {ex}")
                    print(f"   ({time.monotonic() - t0:.0f} s)")
    finally:
        srv.stop()
    print(f"\n{ok.n} checks, {len(ok.failed)} failed ({time.monotonic() - t_start:.0f} s)")
    for f in ok.failed:
        print(f"  FAILED: {f}")
    sys.exit(1 if ok.failed else 0)


# Records every microphone stream the page opens (window.__streams).
TRACK_STREAMS = """(() => {
  window.__streams = [];
  const md = navigator.mediaDevices;
  if (!md) return;
  const orig = md.getUserMedia.bind(md);
  md.getUserMedia = async (c) => { const s = await orig(c); window.__streams.push(s); return s; };
})();"""
LIVE_TRACKS = "window.__streams.flatMap(s => s.getTracks()).filter(t => t.readyState === 'live').length"


def section_down(args, srv, ok, shot, browser, **_):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    handler = functools.partial(Quiet, directory=WEB)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    b = browser()
    try:
        page = b.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.add_init_script(TRACK_STREAMS)
        page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/")
        # Start pressed twice at once: both presses in one task, so the second always
        # comes while the first is still opening the microphone (a second press
        # after that is a Stop, and a busy machine made that happen)
        page.evaluate("() => { const b = document.querySelector('#start'); b.click(); b.click(); }")
        retrying = wait(page, "document.querySelector('#status').textContent.includes('retrying')", 15000)
        shot(page, "server-down-retrying")
        gave_up = wait(page, "!document.querySelector('#error').hidden && "
                             "document.querySelector('#error').textContent.includes('Cannot reach')", 40000)
        err = page.inner_text("#error") if page.is_visible("#error") else ""
        shot(page, "server-down")
        live = page.evaluate(LIVE_TRACKS)
        opened = page.evaluate("window.__streams.length")
        start_ok = page.eval_on_selector("#start", "b => !b.disabled")
        label = page.inner_text("#start")
        ok("down: Start retries, then says the server cannot be reached",
           retrying and gave_up, f"retrying shown {retrying}; alert {err!r}")
        ok("down: after giving up the microphone is released and Start is usable again",
           gave_up and live == 0 and start_ok and label == "Start dictation",
           f"live tracks {live}, start enabled {start_ok}, label {label!r}")
        ok("down: a second press of Start opens no second capture", opened == 1 and not errors,
           f"{opened} captures; page errors {errors[:2]}")
    finally:
        b.close()
        httpd.shutdown()


def section_taken(args, srv, ok, shot, browser, **_):
    other = Speaker(srv.ws_url, "taken-feed", b"", hold=True)
    other.ready.wait(30)
    b = browser()
    try:
        page = b.new_page()
        page.add_init_script(TRACK_STREAMS)
        page.goto(srv.http_url + "/")
        page.click("summary")
        page.fill("#feed", "taken-feed")
        page.click("#start")
        shown = wait(page, "!document.querySelector('#error').hidden && "
                           "document.querySelector('#error').textContent.includes('in use')", 30000)
        err = page.inner_text("#error") if page.is_visible("#error") else ""
        stopped = wait(page, "document.querySelector('#status').textContent.startsWith('stopped')", 10000)
        shot(page, "feed-taken")
        live = page.evaluate(LIVE_TRACKS)
        start_ok = page.eval_on_selector("#start", "b => !b.disabled")
        ok("taken: the page says the feed name is in use and stops, microphone released",
           shown and stopped and live == 0 and start_ok,
           f"alert {err!r}; status {page.inner_text('#status')!r}; live tracks {live}")
        page.fill("#feed", "taken-feed-2")
        page.click("#start")
        again = wait(page, "document.querySelector('#status').dataset.kind === 'live'", 30000)
        page.click("#start")  # Stop dictation
        done = wait(page, "document.querySelector('#status').textContent === 'stopped'", 60000)
        ok("taken: with another name the same page dictates (no reload)", again and done,
           page.inner_text("#status"))
    finally:
        b.close()
        other.close()


def section_busy(args, srv, ok, shot, browser, **_):
    """A fatal server error (overloaded: the only session slot is taken)."""
    busy = sc.Server(args.server, args.model, ["--web", WEB, "--max-sessions", "1"]).start()
    other = Speaker(busy.ws_url, "busy-feed", b"", hold=True)
    other.ready.wait(30)
    b = browser()
    try:
        page = b.new_page()
        page.add_init_script(TRACK_STREAMS)
        page.goto(busy.http_url + "/")
        page.click("#start")
        shown = wait(page, "!document.querySelector('#error').hidden && "
                           "document.querySelector('#error').textContent.includes('busy')", 30000)
        err = page.inner_text("#error") if page.is_visible("#error") else ""
        stopped = wait(page, "document.querySelector('#status').textContent.startsWith('stopped')", 10000)
        shot(page, "server-busy")
        live = page.evaluate(LIVE_TRACKS)
        ok("busy: a fatal error (overloaded) is explained and the page stops, microphone released",
           shown and stopped and live == 0 and page.inner_text("#start") == "Start dictation",
           f"alert {err!r}; status {page.inner_text('#status')!r}; live tracks {live}")
    finally:
        b.close()
        other.close()
        busy.stop()


TENTATIVE_JS = """() => {
  const t = document.querySelector('#captionLines .tentative');
  if (!t || !t.textContent.trim()) return null;
  const line = t.closest('.caption-line'), a = getComputedStyle(t), c = getComputedStyle(line);
  return {color: a.color, base: c.color, style: a.fontStyle, baseStyle: c.fontStyle, text: t.textContent};
}"""


def section_viewer(args, srv, ok, shot, browser, rows, tmp, **_):
    b = browser(fake_mic=False)
    sp = None
    try:
        v = b.new_page(viewport={"width": 1000, "height": 600})
        v.goto(srv.http_url + "/caption.html?feed=later-feed")
        waiting = wait(v, "document.querySelector('#status').textContent.includes('Waiting') && "
                          "window.sotto.viewer.lastClose", 15000)
        shot(v, "viewer-waiting")
        closed = v.evaluate("window.sotto.viewer.lastClose")
        ok("viewer: opened before the talk it says it is waiting for the feed, having heard not_found "
           "before the close", waiting and closed and closed["heard"] and closed["code"] == 1000,
           f"{v.inner_text('#status')!r}; close {closed}")
        time.sleep(2.5)  # it keeps waiting (asks again) rather than giving up
        sp = Speaker(srv.ws_url, "later-feed", pcm16k(rows[SHORT]["file"], tmp), realtime=True)
        live = wait(v, "document.querySelector('#status').textContent.includes('live')", 30000)
        tent, t0 = None, time.monotonic()
        while tent is None and time.monotonic() - t0 < 25 and not sp.done.is_set():
            tent = v.evaluate(TENTATIVE_JS)
            if tent is None:
                time.sleep(0.05)
        if tent is not None:
            shot(v, "viewer-tentative")
        ok("viewer: the feed started later is shown live", live, v.inner_text("#status"))
        ok("viewer: tentative words look different from committed ones (colour and font style)",
           tent is not None and tent["color"] != tent["base"] and tent["style"] != tent["baseStyle"],
           f"{tent}")
        sp.done.wait(120)
        ended = wait(v, "document.querySelector('#status').textContent.includes('ended')", 30000)
        text1 = v.inner_text("#captionLines")
        shot(v, "viewer-ended")
        last = [w.strip(".,") for w in " ".join(e["text"] for e in sp.finals()).split()[-2:]]
        ok("viewer: after the session it says ended and shows its last words",
           ended and last and all(w in text1 for w in last), f"{text1!r}, want {last}")
        sp2 = Speaker(srv.ws_url, "later-feed", pcm16k(rows[CLIP]["file"], tmp), partials=False)
        sp2.done.wait(120)
        last2 = [w.strip(".,") for w in " ".join(e["text"] for e in sp2.finals()).split()[-2:]]
        follows = wait(v, "window.sotto.viewer.sessions >= 2 && " + " && ".join(
            f"document.querySelector('#captionLines').textContent.includes({json.dumps(w)})" for w in last2),
            30000) if last2 else False
        shot(v, "viewer-second-session")
        ok("viewer: it follows a new session under the same name",
           follows, f"{v.inner_text('#captionLines')!r}, want {last2}, "
                    f"sessions {v.evaluate('window.sotto.viewer.sessions')}")
        for what in ("vtt", "srt"):
            href = v.eval_on_selector(f"#dl{what.capitalize()}", "a => a.href")
            st, body = sc.http_get(href)
            ok(f"viewer: its Download .{what} link gives the feed's captions",
               st == 200 and (body.startswith("WEBVTT") if what == "vtt" else body.startswith("1\n")),
               f"{href}: {st} {body[:40]!r}")
        v.select_option("#size", "xl")
        v.select_option("#theme", "light")
        big = v.evaluate("parseFloat(getComputedStyle(document.querySelector('#captionLines')).fontSize)")
        bg = v.evaluate("getComputedStyle(document.querySelector('.caption-view')).backgroundColor")
        shot(v, "viewer-large-light")
        ok("viewer: text size and theme can be changed", big > 40 and bg == "rgb(255, 255, 255)",
           f"font {big}px, background {bg}")
        # a session that starts and ends while the viewer cannot connect: it is
        # never seen live, only in the feed event of the next connection
        n_before = v.evaluate("window.sotto.viewer.sessions")
        v.context.set_offline(True)
        time.sleep(0.5)
        sp3 = Speaker(srv.ws_url, "later-feed", pcm16k(rows[SHORT]["file"], tmp), partials=False)
        sp3.done.wait(120)
        sp3.close()
        unseen = v.evaluate("window.sotto.viewer.sessions") == n_before
        v.context.set_offline(False)
        last3 = sp3.last_words()
        follows3 = wait(v, f"window.sotto.viewer.sessions === {n_before + 1} && " + " && ".join(
            f"document.querySelector('#captionLines').textContent.includes({json.dumps(w)})" for w in last3),
            30000) if last3 else False
        ok("viewer: it follows a session that started and ended while it could not connect",
           unseen and follows3 and "ended" in v.inner_text("#status"),
           f"unseen while offline {unseen}; {v.inner_text('#captionLines')!r}, want {last3}; "
           f"sessions {v.evaluate('window.sotto.viewer.sessions')} (was {n_before}); {v.inner_text('#status')!r}")
    finally:
        if sp:
            sp.close()
        b.close()
    section_viewer_kept(args, ok, shot, browser, rows, tmp)


def section_viewer_kept(args, ok, shot, browser, rows, tmp):
    """Ended feeds outlive their sessions (docs/PROTOCOL.md: 1 hour, at most 64)."""
    kept = sc.Server(args.server, args.model, ["--web", WEB, "--resume-grace-s", "0"]).start()
    b = browser(fake_mic=False)
    try:
        sp = Speaker(kept.ws_url, "kept-0", pcm16k(rows[SHORT]["file"], tmp), partials=False, feed_key="vk")
        sp.done.wait(120)
        sp.close()
        sid, last = sp.session(), sp.last_words()
        time.sleep(0.5)
        # with --resume-grace-s 0 a detached session goes at the server's next wake-up: another
        # session's close is one (the session table then no longer holds kept-0's session)
        poke = Speaker(kept.ws_url, "kept-poke", b"", partials=False)
        poke.done.wait(60)
        poke.close()
        time.sleep(0.5)
        gone = poke.done.is_set() and sid is not None
        sid = f"{sid} (log: {'ended' if kept.log_lines(f'[{sid}] session ended') else 'unlinked, freed later'})"
        v = b.new_page(viewport={"width": 1000, "height": 600})
        v.goto(kept.http_url + "/caption.html?feed=kept-0&key=vk")
        shown = wait(v, "document.querySelector('#status').textContent.includes('ended') && " + " && ".join(
            f"document.querySelector('#captionLines').textContent.includes({json.dumps(w)})" for w in last),
            20000) if last else False
        shot(v, "viewer-kept")
        ok("viewer: a feed whose session is gone still shows its captions (as ended)",
           gone and shown, f"session {sid} gone {gone}; {v.inner_text('#status')!r}; "
                           f"{v.inner_text('#captionLines')!r}, want {last}")
        st, body = sc.http_get(kept.http_url + "/v1/feeds/kept-0.vtt?key=vk")
        st_nokey, _ = sc.http_get(kept.http_url + "/v1/feeds/kept-0.vtt")
        ok("viewer: its .vtt is still served, and still needs its viewer key",
           gone and st == 200 and body.startswith("WEBVTT") and all(w in body for w in last) and st_nokey == 403,
           f"with key {st} {body[:40]!r}; without {st_nokey}")
        v.close()
        for i in range(1, 66):  # 65 more ended feeds (+ kept-poke; the newest may still be in the session table)
            e = Speaker(kept.ws_url, f"kept-{i}", b"", partials=False)
            e.done.wait(60)
            e.close()
        time.sleep(0.5)
        got = {n: sc.http_get(kept.http_url + f"/v1/feeds/kept-{n}.vtt")[0] for n in (0, 2, 40, 65)}
        ok("viewer: of more than 64 ended feeds the oldest is dropped, the newer ones are kept",
           got[0] == 404 and got[2] == 200 and got[40] == 200 and got[65] == 200, f"{got}")
    finally:
        b.close()
        kept.stop()


def section_cues(args, srv, ok, shot, browser, rows, tmp, **_):
    # 60 s of speech: dev clips one after another (with their own pauses)
    ids, total = [], 0.0
    for rid, r in sorted(rows.items()):
        if total >= 60:
            break
        if 8 <= r["seconds"] <= 20:
            ids.append(rid)
            total += r["seconds"]
    wav = os.path.join(tmp, "sixty.wav")
    subprocess.run(["sox"] + [rows[i]["file"] for i in ids] + ["-r", "16000", "-c", "1", wav], check=True)
    sp = Speaker(srv.ws_url, "cue-feed", pcm16k(wav, tmp), partials=False)
    sp.done.wait(300)
    finals = sp.finals()
    longest = max((f["end"] - f["start"] for f in finals), default=0)
    st, srt = sc.http_get(srv.http_url + "/v1/feeds/cue-feed.srt")
    st2, vtt = sc.http_get(srv.http_url + "/v1/feeds/cue-feed.vtt")
    with open(os.path.join(args.artifacts, "page-cues-server.srt"), "w") as f:
        f.write(srt)
    words = " ".join(f["text"] for f in finals).split()
    for name, text, is_vtt in (("server .srt", srt, False), ("server .vtt", vtt, True)):
        try:
            cues = parse_subs(text, is_vtt)
            bad = cue_problems(cues)
            got = " ".join(" ".join(c[2]) for c in cues).split()
        except Exception as ex:
            cues, bad, got = [], [f"unparsable: {ex}"], []
        ok(f"cues: {name} of a {total:.0f} s dictation ({len(finals)} finals, the longest "
           f"{longest:.1f} s): {len(cues)} cues of at most 2 lines of 42 characters and 7 s",
           st == 200 and st2 == 200 and cues and not bad and len(cues) > len(finals), "; ".join(bad[:4]))
        ok(f"cues: {name} holds every word of the finals in order", got == words,
           f"{len(got)} words, finals {len(words)}")
    b = browser(fake_mic=False)
    try:
        for width in (320, 1280):
            v = b.new_page(viewport={"width": width, "height": 640})
            v.goto(srv.http_url + "/caption.html?feed=cue-feed")
            wait(v, "window.sotto.transcript.finals.length > 0", 20000)
            if width == 1280:
                page_srt = v.evaluate("window.sotto.transcript.srt()")
                with open(os.path.join(args.artifacts, "page-cues-page.srt"), "w") as f:
                    f.write(page_srt)
                try:
                    pc, sc_ = parse_subs(page_srt, False), parse_subs(srt, False)
                    bad = cue_problems(pc)
                    same = [c[2] for c in pc] == [c[2] for c in sc_] and all(
                        abs(a[0] - b_[0]) < 0.002 and abs(a[1] - b_[1]) < 0.002 for a, b_ in zip(pc, sc_))
                except Exception as ex:
                    pc, bad, same = [], [f"unparsable: {ex}"], False
                ok("cues: the page's .srt export has subtitle-sized cues, the same as the server's",
                   pc and not bad and same, "; ".join(bad[:4]) + f"; {len(pc)} cues")
            info = v.evaluate(LINES_JS, "#captionLines")
            good, bad = lines_ok(info)
            shot(v, f"viewer-lines-{width}")
            ok(f"cues: the viewer at {width} px shows at most 2 whole lines that fit", good,
               f"{info['n']} lines; {bad[:2]}")
            v.close()
            # the dictation page's caption view, with the same finals
            p = b.new_page(viewport={"width": width, "height": 640})
            p.goto(srv.http_url + "/")
            p.evaluate("(f) => { window.sotto.transcript.finals = f; }", [
                {k: e[k] for k in ("utterance", "text", "start", "end")} for e in finals])
            p.click("#captions")
            info = p.evaluate(LINES_JS, "#captionLines")
            good, bad = lines_ok(info)
            shot(p, f"caption-view-{width}")
            ok(f"cues: the page's caption view at {width} px shows at most 2 whole lines that fit", good,
               f"{info['n']} lines; {bad[:2]}")
            p.close()
    finally:
        b.close()


def section_layout(args, srv, ok, shot, browser, **_):
    from axe_playwright_python.sync_playwright import Axe
    axe = Axe()
    b = browser(fake_mic=False)
    try:
        for w in (320, 375, 414):
            for path in ("/", "/caption.html?feed=nobody"):
                p = b.new_page(viewport={"width": w, "height": 700})
                p.goto(srv.http_url + path)
                if path == "/":
                    p.click("summary")
                    p.evaluate("window.sotto.transcript.finals = [{utterance: 1, text: 'A fairly long first "
                               "sentence of dictated text to wrap.', start: 0, end: 3}]")
                time.sleep(0.3)
                sw = p.evaluate("document.documentElement.scrollWidth")
                if w == 320:
                    shot(p, "phone-320" + ("-viewer" if "caption" in path else ""))
                ok(f"layout: {path} at {w} px does not scroll sideways", sw <= w, f"scrollWidth {sw}")
                p.close()
        opts = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]},
                "resultTypes": ["violations"]}
        for scheme in ("light", "dark"):
            p = b.new_page(color_scheme=scheme)
            p.goto(srv.http_url + "/")
            p.click("summary")
            p.evaluate("() => { const T = window.sotto.transcript; T.finals = [{utterance: 1, text: 'Hello there.', "
                       "start: 0, end: 1}]; T.committed = ' And'; T.tentative = ' then'; }")
            p.evaluate("document.querySelector('#start').blur()")
            p.dispatch_event("#transcript", "focus")
            r = axe.run(p, options=opts)
            v = r.response.get("violations", [])
            ok(f"layout: axe-core finds no violations on the page ({scheme})", not v,
               "; ".join(f"{x['id']}: {[n['target'] for n in x['nodes']][:3]}" for x in v))
            p.close()
        p = b.new_page()
        p.goto(srv.http_url + "/")
        p.evaluate("() => { const T = window.sotto.transcript; T.finals = [{utterance: 1, text: 'Hello there.', "
                   "start: 0, end: 1}]; T.committed = ' And'; T.tentative = ' then'; }")
        p.click("#captions")
        r = axe.run(p, options=opts)
        v = r.response.get("violations", [])
        ok("layout: axe-core finds no violations with the caption view open", not v,
           "; ".join(f"{x['id']}: {[n['target'] for n in x['nodes']][:3]}" for x in v))
        p.close()
        for theme in ("dark", "light", "yellow"):
            p = b.new_page()
            p.goto(srv.http_url + "/caption.html?feed=nobody")
            wait(p, "document.querySelector('#status').textContent.includes('Waiting')", 10000)
            p.select_option("#theme", theme)
            r = axe.run(p, options=opts)
            v = r.response.get("violations", [])
            ok(f"layout: axe-core finds no violations on the viewer ({theme} theme)", not v,
               "; ".join(f"{x['id']}: {[n['target'] for n in x['nodes']][:3]}" for x in v))
            p.close()
    finally:
        b.close()


def section_insecure(args, srv, ok, shot, browser, **_):
    b = browser()
    try:
        p = b.new_page()
        errors = []
        p.on("pageerror", lambda e: errors.append(str(e)))
        # what plain http from another device looks like: no mediaDevices, not a secure context
        p.add_init_script("Object.defineProperty(Navigator.prototype, 'mediaDevices', {get: () => undefined});"
                          "Object.defineProperty(window, 'isSecureContext', {get: () => false});")
        p.goto(srv.http_url + "/")
        p.click("#start")
        shown = wait(p, "!document.querySelector('#error').hidden", 10000)
        err = p.inner_text("#error") if shown else ""
        shot(p, "insecure-origin")
        ok("insecure: Start says to open the page over https or on localhost",
           "https" in err and "localhost" in err and "undefined" not in err and not errors,
           f"{err!r}; page errors {errors[:2]}")
    finally:
        b.close()


LIVE_OBSERVER = """(() => {
  window.__live = {added: 0, removed: 0, changed: 0};
  addEventListener('DOMContentLoaded', () => {
    const o = new MutationObserver((ms) => { for (const m of ms) {
      window.__live.added += m.addedNodes.length; window.__live.removed += m.removedNodes.length;
      if (m.type === 'characterData') window.__live.changed++; } });
    document.querySelectorAll('main [aria-live]').forEach((el) =>
      o.observe(el, {childList: true, subtree: true, characterData: true}));
  });
  window.__seen = {speech: false, elapsed: '', level: 0, recVisible: false, lag: [], top: [1e9, -1e9]};
  setInterval(() => {
    const lag = document.querySelector('#lag'), tr = document.querySelector('#transcript');
    if (lag && lag.textContent && window.__seen.lag.length < 400) window.__seen.lag.push(lag.textContent);
    if (tr && window.sotto && window.sotto.state.active) {
      const y = tr.getBoundingClientRect().top;
      window.__seen.top = [Math.min(window.__seen.top[0], y), Math.max(window.__seen.top[1], y)];
    }
    const s = document.querySelector('#speech'), l = document.querySelector('#meter'), e = document.querySelector('#elapsed');
    if (s && s.dataset.on === 'true' && /speech/.test(s.textContent)) window.__seen.speech = true;
    if (l) window.__seen.level = Math.max(window.__seen.level, +l.getAttribute('aria-valuenow') || 0);
    if (e && getComputedStyle(e).visibility === 'visible' && e.offsetParent) { window.__seen.elapsed = e.textContent; window.__seen.recVisible = true; }
  }, 50);
})();"""


def section_use(args, srv, ok, shot, browser, rows, **_):
    b = browser()
    try:
        ctx = b.new_context()
        p = ctx.new_page()
        errors = []
        p.on("pageerror", lambda e: errors.append(str(e)))
        p.add_init_script(LIVE_OBSERVER)
        p.goto(srv.http_url + "/")
        disabled = p.evaluate("['copy','dlTxt','dlSrt','dlVtt','clear'].every(id => document.getElementById(id).disabled)")
        ok("use: on an empty transcript Copy, Download and Clear are disabled", disabled)
        t0 = time.monotonic()
        p.click("#start")
        wait(p, "document.querySelector('#status').dataset.kind === 'live'", 30000)
        wait(p, "window.__seen.speech", 20000)
        shot(p, "recording")
        time.sleep(max(0.0, rows[CLIP]["seconds"] + 2.5 - (time.monotonic() - t0)))
        p.keyboard.press("Alt+d")  # the shortcut: Stop dictation
        stopped = wait(p, "document.querySelector('#status').textContent === 'stopped'", 60000)
        seen = p.evaluate("window.__seen")
        live = p.evaluate("window.__live")
        n_finals = p.evaluate("window.sotto.transcript.finals.length")
        text = p.evaluate("window.sotto.transcript.text()")
        shot(p, "stopped")
        ok("use: Alt+D stopped the dictation", stopped, p.inner_text("#status"))
        ok("use: while recording the page shows the elapsed time, 'speech detected', and a level below 100 %",
           stopped and seen["recVisible"] and re.match(r"0:\d\d$", seen["elapsed"] or "") and seen["speech"]
           and 10 < seen["level"] < 100, f"{ {k: v for k, v in seen.items() if k != 'lag'} }")
        lags = seen["lag"]
        odd = [x for x in lags if not re.match(r"text delay: \d+(\.\d)? s$", x)]
        shift = seen["top"][1] - seen["top"][0]
        ok("use: the delay is shown in seconds in plain words and the layout does not shift while recording",
           lags and not odd and 0 <= shift <= 1, f"{len(lags)} samples, e.g. {lags[-1:]}, odd {odd[:2]}; "
           f"transcript moved {shift:.1f} px")
        ok("use: the polite live region only gets finals appended (one announcement per final)",
           n_finals > 0 and live["removed"] == 0 and live["changed"] == 0 and live["added"] <= n_finals,
           f"{live}, {n_finals} finals")
        p.reload()
        kept = p.evaluate("window.sotto.transcript.text()")
        shown = p.inner_text("#finals")
        ok("use: a reload keeps the transcript (saved in localStorage)",
           text.strip() and kept == text and text.strip().split()[-1] in shown, f"{kept[:60]!r}")
        p.click("#clear")
        cleared = p.evaluate("window.sotto.transcript.text()") == "" and p.evaluate(
            "document.activeElement.id") == "undo"
        shot(p, "cleared")
        p.click("#undo")
        back = p.evaluate("window.sotto.transcript.text()")
        ok("use: Clear empties the transcript and Undo clear brings it back",
           cleared and back == text and not errors, f"cleared {cleared}; errors {errors[:2]}")
        # a long transcript: the box scrolls, and new text is followed to the end
        follow = p.evaluate("""() => { const T = window.sotto.transcript, box = document.querySelector('#transcript');
          for (let i = 0; i < 60; i++) T.finals.push({utterance: 100 + i, text: 'Line ' + i + ' of a long talk.', start: i, end: i + 1});
          window.sotto.render();
          const a = box.scrollHeight - box.scrollTop - box.clientHeight;
          T.finals.push({utterance: 200, text: 'The newest line.', start: 61, end: 62});
          window.sotto.render();
          return {scrolls: box.scrollHeight > box.clientHeight + 10, gap1: a,
                  gap2: box.scrollHeight - box.scrollTop - box.clientHeight}; }""")
        shot(p, "long-transcript")
        ok("use: the transcript follows new text to its end", follow["scrolls"] and follow["gap1"] < 2
           and follow["gap2"] < 2, f"{follow}")
    finally:
        b.close()


def section_upload(args, srv, ok, shot, browser, rows, **_):
    clip = rows[CLIP]["file"]
    cli = rc.run_sotto(args.sotto, args.model, [clip])[clip]["text"]
    b = browser(fake_mic=False)
    try:
        p = b.new_page()
        p.goto(srv.http_url + "/")
        p.set_input_files("#file", clip)
        done = wait(p, "document.querySelector('#fileStatus').textContent.includes('transcribed') || "
                       "!document.querySelector('#error').hidden", 120000)
        text = p.evaluate("window.sotto.transcript.text()")
        err = p.inner_text("#error") if p.is_visible("#error") else ""
        srt = p.evaluate("window.sotto.transcript.srt()")
        shot(p, "file-transcribed")
        ok("upload: a picked file's transcript has the same words as `sotto transcribe`",
           done and not err and rc.normalize(text).split() == rc.normalize(cli).split(),
           f"page {text.strip()!r}; CLI {cli.strip()!r}; {err!r}")
        try:
            bad = cue_problems(parse_subs(srt, False))
        except Exception as ex:
            bad = [str(ex)]
        ok("upload: the file's .srt export has subtitle-sized cues", srt and not bad, "; ".join(bad[:3]))
        # drag and drop: a real drop event on the transcript, its DataTransfer holding the clip
        p2 = b.new_page()
        p2.goto(srv.http_url + "/")
        with open(clip, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        mime = {".flac": "audio/flac", ".wav": "audio/wav", ".mp3": "audio/mpeg", ".ogg": "audio/ogg"}.get(
            os.path.splitext(clip)[1].lower(), "application/octet-stream")
        dropped = p2.evaluate("""([b64, name, type]) => {
          const bin = atob(b64), u8 = new Uint8Array(bin.length);
          for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
          const dt = new DataTransfer();
          dt.items.add(new File([u8], name, {type}));
          const zone = document.querySelector('#dropZone');
          const over = new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true});
          zone.dispatchEvent(over);
          const marked = document.querySelector('#transcript').classList.contains('drop');
          const drop = new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true});
          zone.dispatchEvent(drop);
          return {files: dt.files.length, overTaken: over.defaultPrevented, marked, dropTaken: drop.defaultPrevented};
        }""", [data, os.path.basename(clip), mime])
        done2 = wait(p2, "document.querySelector('#fileStatus').textContent.includes('transcribed') || "
                         "!document.querySelector('#error').hidden", 120000)
        text2 = p2.evaluate("window.sotto.transcript.text()")
        err2 = p2.inner_text("#error") if p2.is_visible("#error") else ""
        shot(p2, "file-dropped")
        ok("upload: a file dropped on the transcript is transcribed with the same words as `sotto transcribe`",
           dropped["files"] == 1 and dropped["overTaken"] and dropped["dropTaken"] and done2 and not err2
           and rc.normalize(text2).split() == rc.normalize(cli).split(),
           f"{dropped}; page {text2.strip()!r}; CLI {cli.strip()!r}; {err2!r}")
        p2.close()
    finally:
        b.close()


# Records each getUserMedia call's constraints and the device its track records from.
TRACK_MIC = """(() => {
  window.__gum = [];
  const md = navigator.mediaDevices;
  if (!md) return;
  const orig = md.getUserMedia.bind(md);
  md.getUserMedia = async (c) => {
    const s = await orig(c);
    window.__gum.push({asked: JSON.parse(JSON.stringify(c)), got: s.getAudioTracks()[0].getSettings().deviceId});
    return s;
  };
})();"""


def section_mic(args, srv, ok, shot, browser, **_):
    b = browser()
    try:
        p = b.new_page()
        p.add_init_script(TRACK_MIC)
        p.goto(srv.http_url + "/")
        p.click("summary")

        def dictate():
            p.click("#start")
            live = wait(p, "document.querySelector('#status').dataset.kind === 'live'", 30000)
            p.click("#start")  # Stop dictation
            return live and wait(p, "document.querySelector('#status').textContent === 'stopped'", 60000)

        first = dictate()  # the permission: device names and ids are listed after it
        listed = wait(p, "document.querySelector('#mic').options.length > 1", 10000)
        opts = p.evaluate("[...document.querySelector('#mic').options].map(o => ({value: o.value, label: o.textContent}))")
        devs = p.evaluate("navigator.mediaDevices.enumerateDevices().then(ds => ds.filter(d => d.kind === 'audioinput')"
                          ".map(d => ({id: d.deviceId, label: d.label})))")
        real = [d for d in devs if d["id"] and d["id"] != "default"]
        shown = [o for o in opts if o["value"]]
        ok("mic: the picker lists the browser's microphone (Chromium's fake device) by name",
           first and listed and real and [o["value"] for o in shown] == [d["id"] for d in real]
           and all(o["label"] == d["label"] and o["label"] for o, d in zip(shown, real)),
           f"picker {opts}; devices {devs}")
        if not shown:
            return
        choice = shown[-1]["value"]
        p.select_option("#mic", choice)
        second = dictate()
        gum = p.evaluate("window.__gum")
        last = gum[-1] if gum else {}
        asked = ((last.get("asked") or {}).get("audio") or {}).get("deviceId") or {}
        shot(p, "mic-chosen")
        ok("mic: a dictation after choosing it records from exactly that device",
           second and asked.get("exact") == choice and last.get("got") == choice, f"{gum[-1:]}, chose {choice[:12]}")
        ok("mic: the picker keeps the choice after the device list is refreshed",
           p.evaluate("document.querySelector('#mic').value") == choice and p.evaluate(
               "document.querySelector('#mic').options.length") == len(opts))
    finally:
        b.close()


if __name__ == "__main__":
    main()
