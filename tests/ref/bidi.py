"""A small WebDriver BiDi client (https://w3c.github.io/webdriver-bidi/) for
driving a stock Firefox through its built-in remote agent: no geckodriver, no
playwright build of the browser.

    with Firefox(prefs={...}, env=...) as ff:   # firefox --headless --remote-debugging-port
        ctx = ff.context                          # the first top-level browsing context
        ff.navigate(ctx, "http://127.0.0.1:8765/")
        ff.evaluate(ctx, "document.title")        # -> a Python value
        ff.click(ctx, "#start")                   # a real pointer click on the element
        ff.press(ctx, "Tab")                      # a real key press
        ff.screenshot(ctx, "page.png")

Firefox is started in its own process group with a fresh profile (a temporary
directory with a user.js); close() (or leaving the `with`) ends the session,
the browser and every process it started, and removes the profile, also after
an exception. Console messages and uncaught errors of the page are collected
in .logs (the log.entryAdded event) as "TYPE LEVEL: text", TYPE being
"console" or "javascript" (an uncaught exception).

Needs the `websockets` package (version 13 or later, its sync client).
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from websockets.sync.client import connect

# Prefs for an unattended test browser: no first-run pages, telemetry, updates,
# or network services; WebDriver BiDi only.
BASE_PREFS = {
    "remote.active-protocols": 1,
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.startup.page": 0,
    "startup.homepage_welcome_url": "about:blank",
    "startup.homepage_welcome_url.additional": "",
    "browser.aboutwelcome.enabled": False,
    "browser.tabs.warnOnClose": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.unified": False,
    "app.update.disabledForTesting": True,
    "app.update.auto": False,
    "app.normandy.enabled": False,
    "messaging-system.rsexperimentloader.enabled": False,
    "browser.safebrowsing.update.enabled": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "extensions.update.enabled": False,
    "browser.newtabpage.enabled": False,
    "dom.disable_beforeunload": True,
}

KEYS = {  # WebDriver key codes (https://w3c.github.io/webdriver/#keyboard-actions)
    "Tab": "\ue004", "Enter": "\ue007", "Escape": "\ue00c", "Space": " ", " ": " ",
    "Shift": "\ue008", "Control": "\ue009", "Alt": "\ue00a", "Backspace": "\ue003",
    "ArrowLeft": "\ue012", "ArrowUp": "\ue013", "ArrowRight": "\ue014", "ArrowDown": "\ue015",
    "Home": "\ue011", "End": "\ue010", "PageUp": "\ue00e", "PageDown": "\ue00f",
}


class BidiError(Exception):
    """An error response to a command, or a script exception."""


def free_port():
    import server_client  # one port picker for the whole suite (SOTTO_TEST_PORTS)
    return server_client.free_port()


def _group_alive(proc):
    """Whether the process or anything left in its process group runs."""
    proc.poll()  # reaps the leader once it exited
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _pref(v):
    return json.dumps(v)  # true/false, numbers, "strings" are JS literals too


def from_remote(v):
    """A script.RemoteValue as a Python value (objects as dicts, arrays and sets
    as lists); nodes and other non-serializable values stay as the raw dict
    (with their sharedId/handle)."""
    t = v.get("type")
    if t in ("undefined", "null"):
        return None
    if t in ("string", "boolean"):
        return v["value"]
    if t == "number":
        x = v["value"]
        return float(x.replace("Infinity", "inf")) if isinstance(x, str) else x
    if t == "bigint":
        return int(v["value"])
    if t in ("array", "set"):
        return [from_remote(x) for x in v.get("value", [])]
    if t in ("object", "map"):
        out = {}
        for k, x in v.get("value", []):
            out[k if isinstance(k, str) else json.dumps(from_remote(k))] = from_remote(x)
        return out
    if t == "date":
        return v["value"]
    return v


def to_local(x):
    """A Python value as a script.LocalValue (for callFunction arguments)."""
    if x is None:
        return {"type": "null"}
    if isinstance(x, bool):
        return {"type": "boolean", "value": x}
    if isinstance(x, (int, float)):
        return {"type": "number", "value": x}
    if isinstance(x, str):
        return {"type": "string", "value": x}
    if isinstance(x, (list, tuple)):
        return {"type": "array", "value": [to_local(y) for y in x]}
    if isinstance(x, dict) and "sharedId" in x:
        return {"sharedId": x["sharedId"]}
    if isinstance(x, dict):
        return {"type": "object", "value": [[k, to_local(y)] for k, y in x.items()]}
    raise TypeError(f"cannot pass {type(x).__name__} to the page")


class Firefox:
    def __init__(self, binary="firefox-esr", prefs=None, env=None, width=1280, height=900,
                 log_path=None):
        self.binary = binary
        self.prefs = dict(BASE_PREFS, **(prefs or {}))
        self.env = env
        self.width, self.height = width, height
        self.log_path = log_path
        self.profile = None
        self.proc = None
        self.ws = None
        self.port = None
        self.context = None
        self.logs = []      # "TYPE LEVEL: text" of console entries and page errors
        self.events = []    # other events, raw
        self._id = 0
        self._saved_log = ""

    # ---- process -----------------------------------------------------------------

    def start(self, timeout=90.0):
        self.profile = tempfile.mkdtemp(prefix="sotto-firefox-")
        with open(os.path.join(self.profile, "user.js"), "w") as f:
            for k, v in self.prefs.items():
                f.write(f"user_pref({json.dumps(k)}, {_pref(v)});\n")
        if self.log_path is None:
            self.log_path = os.path.join(self.profile, "firefox.log")
        env = dict(os.environ if self.env is None else self.env)
        env["MOZ_HEADLESS"] = "1"
        env.setdefault("MOZ_CRASHREPORTER_DISABLE", "1")
        env["HOME"] = self.profile  # nothing of the user's Firefox, no ~/.mozilla writes
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)
        self.port = free_port()
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                [self.binary, "--headless", "--no-remote", "--profile", self.profile,
                 "--remote-debugging-port", str(self.port), "about:blank"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
        finally:
            log.close()
        try:
            deadline = time.monotonic() + timeout
            while True:
                if self.proc.poll() is not None:
                    raise BidiError(f"firefox exited ({self.proc.returncode}): {self.log()[-1500:]}")
                try:
                    self.ws = connect(f"ws://127.0.0.1:{self.port}/session", max_size=None,
                                      open_timeout=5, close_timeout=2)
                    break
                except Exception as e:  # not listening yet (refused, handshake)
                    if time.monotonic() > deadline:
                        raise BidiError(f"no WebDriver BiDi endpoint after {timeout:.0f} s "
                                        f"({type(e).__name__}: {e}): {self.log()[-1500:]}")
                    time.sleep(0.25)
            self.command("session.new", {"capabilities": {"alwaysMatch": {
                "acceptInsecureCerts": True, "unhandledPromptBehavior": {"default": "dismiss"}}}})
            self.command("session.subscribe", {"events": ["log.entryAdded"]})
            tree = self.command("browsingContext.getTree", {"maxDepth": 0})
            self.context = tree["contexts"][0]["context"]
            self.command("browsingContext.setViewport", {
                "context": self.context, "viewport": {"width": self.width, "height": self.height}})
        except BaseException:
            self.close()
            raise
        return self

    def version(self):
        p = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=30)
        return p.stdout.strip()

    def log(self):
        """Firefox's stdout and stderr (kept after close)."""
        if self.log_path is None:
            return self._saved_log
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        asked = False
        if self.ws is not None:
            try:
                self.command("browser.close", {}, timeout=10)
                asked = True
            except Exception:
                pass
            try:
                self.ws.close()
            except Exception:
                pass
            self.ws = None
        if asked and self.proc is not None and self.proc.poll() is None:
            try:  # Firefox closes itself after browser.close
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:  # the browser's child processes share its group
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if not _group_alive(self.proc):
                    break
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                t = time.monotonic() + 5
                while _group_alive(self.proc) and time.monotonic() < t:
                    time.sleep(0.1)
        if self.profile and self.log_path and self.log_path.startswith(self.profile):
            self._saved_log = self.log()  # the profile (and the log in it) goes
            self.log_path = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    # ---- protocol ----------------------------------------------------------------

    def command(self, method, params, timeout=60.0):
        """Sends a command, returns its result; events that arrive meanwhile are
        recorded. Raises BidiError on an error response."""
        if self.ws is None:
            raise BidiError("not connected")
        self._id += 1
        my = self._id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BidiError(f"{method}: no response in {timeout:.0f} s")
            try:
                msg = json.loads(self.ws.recv(timeout=left))
            except TimeoutError:
                continue
            if msg.get("type") == "event":
                self._event(msg)
                continue
            if msg.get("id") != my:
                continue
            if msg.get("type") == "error":
                raise BidiError(f"{method}: {msg.get('error')}: {msg.get('message')}")
            return msg.get("result", {})

    def _event(self, msg):
        if msg.get("method") == "log.entryAdded":
            p = msg.get("params", {})
            # type "javascript": an uncaught error of the page; "console": console.*
            self.logs.append(f"{p.get('type')} {p.get('level')}: {p.get('text')}")
        else:
            self.events.append(msg)

    def _script_result(self, r, what):
        if r.get("type") == "exception":
            d = r.get("exceptionDetails", {})
            raise BidiError(f"{what[:80]!r} threw: {d.get('text')}")
        return from_remote(r["result"])

    # ---- conveniences ------------------------------------------------------------

    def navigate(self, ctx, url, wait="complete", timeout=60.0):
        return self.command("browsingContext.navigate", {"context": ctx, "url": url, "wait": wait},
                            timeout=timeout)

    def evaluate(self, ctx, expression, await_promise=True, user_activation=False, timeout=60.0):
        r = self.command("script.evaluate", {
            "expression": expression, "target": {"context": ctx}, "awaitPromise": await_promise,
            "resultOwnership": "none", "userActivation": user_activation}, timeout=timeout)
        return self._script_result(r, expression)

    def call(self, ctx, function, *args, await_promise=True, timeout=60.0):
        r = self.command("script.callFunction", {
            "functionDeclaration": function, "target": {"context": ctx},
            "arguments": [to_local(a) for a in args], "awaitPromise": await_promise,
            "resultOwnership": "none"}, timeout=timeout)
        return self._script_result(r, function)

    def wait_for(self, ctx, expression, timeout=30.0, poll=0.1):
        """Polls a JS expression until it is truthy; returns its value. Raises
        TimeoutError with the last value otherwise."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.evaluate(ctx, expression)
            if last:
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} still {last!r} after {timeout:.0f} s")
            time.sleep(poll)

    def element(self, ctx, selector):
        """The element as a node reference (with sharedId), or raises."""
        r = self.command("script.evaluate", {
            "expression": f"document.querySelector({json.dumps(selector)})",
            "target": {"context": ctx}, "awaitPromise": False, "resultOwnership": "none"})
        v = r.get("result", {})
        if r.get("type") != "success" or v.get("type") != "node":
            raise BidiError(f"no element {selector!r}")
        return v

    def click(self, ctx, selector):
        """Moves the mouse to the middle of the element and clicks (input.performActions)."""
        el = self.element(ctx, selector)
        self.command("input.performActions", {"context": ctx, "actions": [{
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [
                {"type": "pointerMove", "x": 0, "y": 0, "duration": 50,
                 "origin": {"type": "element", "element": {"sharedId": el["sharedId"]}}},
                {"type": "pointerDown", "button": 0},
                {"type": "pointerUp", "button": 0}]}]})
        self.command("input.releaseActions", {"context": ctx})

    def press(self, ctx, key, modifiers=()):
        """Presses a key ("Tab", "Enter", "a", ...) with modifiers held ("Shift")."""
        seq = [KEYS.get(m, m) for m in modifiers]
        k = KEYS.get(key, key)
        acts = ([{"type": "keyDown", "value": m} for m in seq] +
                [{"type": "keyDown", "value": k}, {"type": "keyUp", "value": k}] +
                [{"type": "keyUp", "value": m} for m in reversed(seq)])
        self.command("input.performActions", {"context": ctx, "actions": [
            {"type": "key", "id": "keyboard", "actions": acts}]})

    def screenshot(self, ctx, path, origin="document"):
        r = self.command("browsingContext.captureScreenshot", {"context": ctx, "origin": origin})
        data = base64.b64decode(r["data"])
        with open(path, "wb") as f:
            f.write(data)
        return len(data)
