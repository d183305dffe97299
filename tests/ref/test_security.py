"""Admission, timeouts, frame limits and authentication of sotto-server (docs/SECURITY.md).

Starts real sotto-server processes (model --model, default models/tiny.en) on
loopback and checks, with python `websockets` clients and raw sockets:

  admission  idle connections (no start) do not take session slots; they are
             closed after --start-timeout-s with `start_timeout`; a started
             session that goes quiet gets `idle_timeout`; connect/start/close
             churn does not lock the server (detached sessions bounded by
             --max-detached, the oldest evicted, the newest still resumable);
             --max-connections-per-ip and --max-connections; lws's own
             timeouts for a TCP connection that never finishes its request.
  frames     a frame header announcing 2^63-1 bytes closes with 1009 (or by
             the idle timeout when no payload follows); invalid close codes
             are answered with 1002, never echoed; unmasked client frames
             (what libwebsockets does with them: see docs/SECURITY.md).
  auth       with --api-key: /v1/stream, /v1/realtime, /v1/listen and uploads
             need a key or token (header, subprotocol and query forms; the
             browser subprotocol forms complete the handshake and echo the
             selected subprotocol); POST /v1/realtime/client_secrets mints
             short-lived tokens (only with a key; they expire); feed names
             belong to the key that first published them; a session cannot be
             resumed with another key; /healthz, /metrics, /v1/info and feed
             viewers stay open.

Exits non-zero on any failure. Run time about a minute and a quarter; with
--parallel each section runs in a child process of its own, at the same time
(their servers are separate and they mostly wait on timeouts), and the
outputs are printed in section order: as long as the longest section.
"""
import argparse
import asyncio
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import refcommon as rc
import server_client as sc
import websockets
from websockets.asyncio.client import connect as ws_connect

CLIP = "jfk"  # 11 s
KEY1, KEY2 = "sk-test-key-one-0001", "sk-test-key-two-0002"


class Checks:
    def __init__(self):
        self.failed = []
        self.n = 0

    def ok(self, name, cond, detail=""):
        self.n += 1
        mark = "ok  " if cond else "FAIL"
        print(f"  [{mark}] {name}" + (f": {detail}" if detail else ""), flush=True)
        if not cond:
            self.failed.append(f"{name}: {detail}" if detail else name)
        return cond

    def note(self, text):
        print(f"  [note] {text}", flush=True)

    @contextlib.contextmanager
    def guard(self, name):
        """A part whose exception fails it (and only it)."""
        try:
            yield
        except Exception as ex:  # noqa: BLE001 - a server without a fix may do anything
            self.ok(f"{name}: ran without an exception", False, f"{type(ex).__name__}: {ex}")


# ---------------------------------------------------------------------------
# clients


async def ws_open(url, headers=None, subprotocols=None, local_ip=None):
    kw = dict(max_size=None, ping_interval=None, open_timeout=10, close_timeout=3)
    if headers:
        kw["additional_headers"] = headers
    if subprotocols:
        kw["subprotocols"] = subprotocols
    if local_ip:
        kw["local_addr"] = (local_ip, 0)
    return await ws_connect(url, **kw)


async def collect(ws, seconds, until=None):
    """Messages (parsed JSON, or bytes) for up to `seconds`, or until the close or until(msg).
    Returns (messages, close code or None while still open)."""
    msgs = []
    t_end = time.monotonic() + seconds
    try:
        while time.monotonic() < t_end:
            try:
                m = await asyncio.wait_for(ws.recv(), max(0.01, t_end - time.monotonic()))
            except asyncio.TimeoutError:
                break
            msgs.append(json.loads(m) if isinstance(m, str) else m)
            if until and until(msgs[-1]):
                break
    except websockets.ConnectionClosed:
        return msgs, ws.close_code
    return msgs, (ws.close_code if ws.state.name == "CLOSED" else None)


def types(msgs):
    return [m.get("type") if isinstance(m, dict) else "<binary>" for m in msgs]


def err(msgs, code=None):
    for m in msgs:
        if isinstance(m, dict) and m.get("type") in ("error", "Error"):
            c = m.get("code") or (m.get("error") or {}).get("code") or m.get("variant")
            if code is None or c == code or (isinstance(c, str) and c.lower() == code):
                return m
    return None


async def send(ws, msg):
    """Sends, ignoring a connection the server has closed (its events tell why)."""
    with contextlib.suppress(websockets.ConnectionClosed):
        await ws.send(msg)


async def start_session(url, audio, headers=None, **kw):
    """Connects, sends start; returns (ws, messages up to ready or error)."""
    ws = await ws_open(url, headers=headers, **kw)
    await send(ws, json.dumps({"type": "start", **audio.start_fields()}))
    msgs, _ = await collect(ws, 60, until=lambda m: isinstance(m, dict) and m.get("type") in ("ready", "error"))
    return ws, msgs


async def full_session(url, audio, headers=None, start=None):
    """A whole session (start, audio, stop); returns (messages, close code)."""
    ws = await ws_open(url, headers=headers)
    await send(ws, json.dumps({"type": "start", **audio.start_fields(), **(start or {})}))
    for m in audio.messages:
        await send(ws, m)
    await send(ws, json.dumps({"type": "stop"}))
    msgs, code = await collect(ws, 120)
    with contextlib.suppress(Exception):
        await ws.close()
    return msgs, code


def http(method, url, headers=None, body=None, timeout=30):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


# ---------------------------------------------------------------------------
# raw WebSocket frames


Raw = sc.RawWS  # a WebSocket client on a plain socket (server_client.py)


def close_code_of(frames):
    for op, p in frames:
        if op == 8:
            return struct.unpack(">H", p[:2])[0] if len(p) >= 2 else len(p)
    return None


def json_frames(frames):
    out = []
    for op, p in frames:
        if op == 1:
            with contextlib.suppress(ValueError):
                out.append(json.loads(p))
    return out


# ---------------------------------------------------------------------------
# admission


def section_admission(ck, args, audio):
    srv = sc.Server(args.server, args.model,
                    ["--max-sessions", "2", "--max-detached", "2", "--start-timeout-s", "2",
                     "--idle-timeout-s", "3", "--resume-grace-s", "60",
                     "--max-connections", "6", "--max-connections-per-ip", "4"]).start()
    url = srv.ws_url
    short = audio.head(3.0)
    try:
        async def idle_lockout():
            idle = [await ws_open(url) for _ in range(3)]  # more than --max-sessions 2
            msgs, code = await full_session(url, short)
            for w in idle:
                await w.close()
            return msgs, code
        msgs, code = sc.run(idle_lockout())
        ck.ok("admission: 3 idle connections (no start) do not take the 2 session slots: a 4th "
              "connection runs a whole session", "ready" in types(msgs) and "done" in types(msgs)
              and not err(msgs), f"{types(msgs)[:4]}... {err(msgs)}")

        async def start_timeout():
            ws = await ws_open(url)
            t0 = time.monotonic()
            msgs, code = await collect(ws, 8)
            return msgs, code, time.monotonic() - t0
        msgs, code, dt = sc.run(start_timeout())
        e = err(msgs, "start_timeout")
        ck.ok("admission: a connection that sends no start gets a fatal start_timeout and a close "
              "(1008) after --start-timeout-s 2", bool(e) and e.get("fatal") is True and code == 1008
              and 1.5 <= dt <= 5, f"{types(msgs)} close {code} after {dt:.1f} s")

        async def idle_timeout():
            ws, msgs = await start_session(url, short)
            t0 = time.monotonic()
            more, code = await collect(ws, 10)
            return msgs + more, code, time.monotonic() - t0
        msgs, code, dt = sc.run(idle_timeout())
        e = err(msgs, "idle_timeout")
        ck.ok("admission: a started session that sends nothing gets a fatal idle_timeout and a close "
              "after --idle-timeout-s 3", bool(e) and e.get("fatal") is True and code == 1008
              and 2.5 <= dt <= 7, f"{types(msgs)} close {code} after {dt:.1f} s")

        async def churn():
            sessions = []
            for _ in range(4):  # start and vanish: each leaves a detached session
                ws, msgs = await start_session(url, short)
                r = next((m for m in msgs if isinstance(m, dict) and m.get("type") == "ready"), {})
                sessions.append((r.get("session"), r.get("token")))
                sc.abort_connection(ws)
                await asyncio.sleep(0.3)
            await asyncio.sleep(0.5)
            ws, msgs = await start_session(url, short)
            await ws.close()
            out = {"after": msgs}
            for name, (sid, tok) in (("oldest", sessions[0]), ("newest", sessions[-1])):
                w = await ws_open(url)
                await send(w, json.dumps({"type": "resume", "session": sid, "token": tok, "last_seq": 0}))
                out[name], _ = await collect(w, 10, until=lambda m: isinstance(m, dict) and
                                             m.get("type") in ("resumed", "error"))
                await w.close()
            return out
        out = sc.run(churn())
        ck.ok("admission: after 4 sessions started and dropped (more than --max-sessions 2), a new "
              "session starts", "ready" in types(out["after"]), f"{types(out['after'])} {err(out['after'])}")
        m = srv.metrics()
        ck.ok("admission: detached sessions bounded by --max-detached 2 (the oldest evicted)",
              m.get("sotto_sessions_evicted_total", 0) >= 2 and m.get("sotto_sessions_detached", 9) <= 2,
              f"evicted {m.get('sotto_sessions_evicted_total')}, detached {m.get('sotto_sessions_detached')}")
        ck.ok("admission: the evicted (oldest) session cannot be resumed, the newest can",
              bool(err(out["oldest"], "unknown_session")) and "resumed" in types(out["newest"]),
              f"oldest {types(out['oldest'])}, newest {types(out['newest'])}")

        async def per_ip():
            mine = [await ws_open(url) for _ in range(4)]
            fifth, _ = await collect(await ws_open(url), 3)
            other = await ws_open(url, local_ip="127.0.0.2")  # another address: 5 in all
            hello_other, _ = await collect(other, 1)
            last = await ws_open(url, local_ip="127.0.0.3")
            await asyncio.sleep(0.1)
            extra = await ws_open(url, local_ip="127.0.0.4")  # the 7th connection: over 6
            over, code = await collect(extra, 3)
            for w in mine + [other, last]:
                await w.close()
            return fifth, hello_other, over, code
        fifth, hello_other, over, code = sc.run(per_ip())
        e = err(fifth, "too_many_connections")
        ck.ok("admission: the 5th connection from one address gets too_many_connections "
              "(--max-connections-per-ip 4)", bool(e) and "per-ip" in e.get("message", ""), f"{fifth}")
        ck.ok("admission: another address still connects", "hello" in types(hello_other), f"{hello_other}")
        e = err(over, "too_many_connections")
        ck.ok("admission: the 7th connection in all gets too_many_connections (--max-connections 6), "
              "close 1013", bool(e) and "max-connections)" in e.get("message", "") and code == 1013,
              f"{over} close {code}")
        m = srv.metrics()
        ck.ok("admission: /metrics counts rejected connections and timeouts",
              m.get("sotto_connections_rejected_total", 0) >= 2 and m.get("sotto_timeouts_total", 0) >= 2,
              f"rejected {m.get('sotto_connections_rejected_total')}, timeouts {m.get('sotto_timeouts_total')}")

        # lws's own timeouts: a TCP connection that never completes its request
        t0 = time.monotonic()
        quiet = socket.create_connection(("127.0.0.1", srv.port))
        half = socket.create_connection(("127.0.0.1", srv.port))
        half.sendall(b"GET /v1/stream HTTP/1.1\r\nHost: x\r\n")
        quiet.settimeout(30)
        half.settimeout(30)
        r1 = r2 = None
        with contextlib.suppress(OSError):
            r1 = quiet.recv(100)
        t1 = time.monotonic() - t0
        with contextlib.suppress(OSError):
            r2 = half.recv(100)
        t2 = time.monotonic() - t0
        ck.ok("admission: a TCP connection that sends nothing, and one that stops half-way through "
              "its request headers, are closed by lws within 20 s", t1 < 20 and t2 < 20 and not r1,
              f"{t1:.1f} s, {t2:.1f} s ({r2[:40] if r2 else r2})")
        quiet.close()
        half.close()
        ck.ok("admission: server alive and healthy", srv.alive() and
              sc.http_get(srv.http_url + "/healthz")[0] == 200)
    finally:
        rcode = srv.stop()
    ck.ok("admission: server exits 0 on SIGTERM", rcode == 0, str(rcode))


# ---------------------------------------------------------------------------
# frames


def section_frames(ck, args, audio):
    srv = sc.Server(args.server, args.model, ["--idle-timeout-s", "3", "--start-timeout-s", "3"]).start()
    start = json.dumps({"type": "start", **audio.start_fields()}).encode()
    try:
        def started():
            r = Raw(srv.port)
            r.send(Raw.frame(1, start))
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                fr, closed = r.frames(0.5)
                if any(m.get("type") == "ready" for m in json_frames(fr)) or closed:
                    break
            r.buf = b""
            return r

        r = started()
        r.send(Raw.frame(2, length=(1 << 63) - 1)[:14] + os.urandom(4096))
        t0 = time.monotonic()
        fr, closed = r.frames(4)
        ck.ok("frames: a binary frame announcing 2^63-1 bytes (payload following) closes the "
              "connection with 1009 at once", close_code_of(fr) == 1009 and
              time.monotonic() - t0 < 4, f"close {close_code_of(fr)}, closed {closed}")
        r.close()

        r = started()
        r.send(Raw.frame(2, length=(1 << 63) - 1)[:14])  # the header alone, then nothing
        t0 = time.monotonic()
        fr, closed = r.frames(10)
        e = err(json_frames(fr), "idle_timeout")
        ck.ok("frames: a 2^63-1 header with no payload is closed by the idle timeout (3 s)",
              closed and bool(e) and close_code_of(fr) == 1008,
              f"{json_frames(fr)[-1:]} close {close_code_of(fr)} after {time.monotonic() - t0:.1f} s")
        r.close()

        r = Raw(srv.port)
        r.send(Raw.frame(2, length=20 * 1024 * 1024)[:8] + os.urandom(1000))  # 20 MiB announced
        fr, closed = r.frames(3)
        ck.ok("frames: a 20 MiB frame (over 16 x --max-frame-bytes) closes with 1009",
              close_code_of(fr) == 1009, f"close {close_code_of(fr)}")
        r.close()

        for code in (5000, 65535, 1016, 2999, 1005, 999):
            r = Raw(srv.port)
            r.send(Raw.frame(8, struct.pack(">H", code) + b"bye"))
            fr, closed = r.frames(3)
            got = close_code_of(fr)
            ck.ok(f"frames: a close with the invalid code {code} is answered with 1002, not echoed",
                  got == 1002, f"answered {got}")
            r.close()
        r = Raw(srv.port)
        r.send(Raw.frame(8, b"\x03"))
        fr, closed = r.frames(3)
        after = [op for op, _ in fr[[op for op, _ in fr].index(8) + 1:]] if 8 in [op for op, _ in fr] else []
        ck.ok("frames: a close with a 1-byte body is answered with 1002 and nothing after it",
              close_code_of(fr) == 1002 and not after and closed, f"{fr[-2:]}, closed {closed}")
        r.close()
        r = Raw(srv.port)
        r.send(Raw.frame(8, struct.pack(">H", 4000) + b"ok"))
        fr, closed = r.frames(3)
        ck.ok("frames: a valid close code (4000) is echoed", close_code_of(fr) == 4000, f"{close_code_of(fr)}")
        r.close()

        r = Raw(srv.port)
        r.send(Raw.frame(1, b'{"type":"ping"}', mask=False))
        fr, closed = r.frames(1.5)
        accepted = any(m.get("type") == "pong" for m in json_frames(fr))
        if accepted:
            ck.note("frames: KNOWN LIMITATION: this libwebsockets accepts an unmasked client frame "
                    "(answered pong); sotto cannot see the mask bit through lws's API "
                    "(docs/SECURITY.md). The start timeout still closes the connection.")
            fr2, closed = r.frames(5)
            ck.ok("frames: the unmasked connection is still closed by the start timeout",
                  closed and close_code_of(fr2) == 1008, f"close {close_code_of(fr2)}")
        else:
            ck.ok("frames: an unmasked client frame closes the connection with 1002",
                  closed and close_code_of(fr) == 1002, f"close {close_code_of(fr)}")
        r.close()
        ck.ok("frames: server alive and healthy", srv.alive() and
              sc.http_get(srv.http_url + "/healthz")[0] == 200)
    finally:
        rcode = srv.stop()
    ck.ok("frames: server exits 0 on SIGTERM", rcode == 0, str(rcode))


# ---------------------------------------------------------------------------
# authentication


def mint(srv, key, seconds=None):
    body = json.dumps({"expires_after": {"anchor": "created_at", "seconds": seconds}}).encode() \
        if seconds else None
    h = {"Authorization": f"Bearer {key}"}
    if body:
        h["Content-Type"] = "application/json"
    return http("POST", srv.http_url + "/v1/realtime/client_secrets", h, body)


def section_auth(ck, args, audio, wav_path):
    srv = sc.Server(args.server, args.model, ["--api-key", KEY1, "--api-key", KEY2]).start()
    base = f"ws://127.0.0.1:{srv.port}"
    url = srv.ws_url
    short = audio.head(3.0)
    bearer1 = {"Authorization": f"Bearer {KEY1}"}
    try:
        async def native_forms():
            out = {}
            for name, kw in (("no key", {}), ("wrong key", {"headers": {"Authorization": "Bearer sk-wrong-000000"}}),
                             ("Bearer", {"headers": bearer1}),
                             ("?api_key=", {"url": url + "?api_key=" + KEY2}),
                             ("sotto-key subprotocol", {"subprotocols": ["sotto.v1", "sotto-key." + KEY1]})):
                u = kw.pop("url", url)
                ws = await ws_open(u, **kw)
                msgs, code = await collect(ws, 3, until=lambda m: isinstance(m, dict) and m.get("type") == "hello")
                out[name] = (msgs, code, ws.subprotocol)
                await ws.close()
            return out
        out = sc.run(native_forms())
        for name in ("no key", "wrong key"):
            msgs, code, _ = out[name]
            e = err(msgs, "unauthorized")
            ck.ok(f"auth: /v1/stream with {name} -> unauthorized (fatal), close 1008",
                  bool(e) and e.get("fatal") is True and code == 1008 and "hello" not in types(msgs),
                  f"{types(msgs)} close {code}")
        for name in ("Bearer", "?api_key=", "sotto-key subprotocol"):
            msgs, code, sub = out[name]
            ck.ok(f"auth: /v1/stream with the key as {name} -> hello", "hello" in types(msgs) and not err(msgs),
                  f"{types(msgs)}, subprotocol {sub}")
        ck.ok("auth: the sotto-key subprotocol form selects sotto.v1", out["sotto-key subprotocol"][2] == "sotto.v1",
              str(out["sotto-key subprotocol"][2]))
        msgs, code = sc.run(full_session(url, short, headers=bearer1))
        ck.ok("auth: a whole native session with a key", "done" in types(msgs) and not err(msgs), f"{err(msgs)}")

        async def browser_forms():
            out = {}
            rt = base + "/v1/realtime?intent=transcription"
            for name, u, sub in (
                    ("OpenAI", rt, ["realtime", "openai-insecure-api-key." + KEY1, "openai-beta.realtime-v1"]),
                    ("OpenAI wrong key", rt, ["realtime", "openai-insecure-api-key.sk-wrong-0000", "openai-beta.realtime-v1"]),
                    ("Deepgram", base + "/v1/listen?encoding=linear16&sample_rate=16000", ["token", KEY2]),
                    ("Deepgram bearer", base + "/v1/listen?encoding=linear16&sample_rate=16000", ["bearer", KEY1]),
                    ("Deepgram wrong key", base + "/v1/listen?encoding=linear16&sample_rate=16000", ["token", "sk-wrong-0000"]),
                    ("Deepgram ?token=", base + f"/v1/listen?encoding=linear16&token={KEY1}", None),
                    ("OpenAI no key", rt, None)):
                try:
                    ws = await ws_open(u, subprotocols=sub)
                except Exception as ex:
                    out[name] = (None, None, f"{type(ex).__name__}: {ex}")
                    continue
                if "Deepgram" in name:
                    with contextlib.suppress(websockets.ConnectionClosed):
                        await send(ws, json.dumps({"type": "CloseStream"}))
                msgs, code = await collect(ws, 5, until=lambda m: isinstance(m, dict) and (
                    m.get("type") in ("session.created", "Metadata") and name.endswith("?token=") is False))
                more, code2 = await collect(ws, 2)
                out[name] = (msgs + more, code if code is not None else code2, ws.subprotocol)
                await ws.close()
            return out
        out = sc.run(browser_forms())
        msgs, code, sub = out["OpenAI"]
        ck.ok("auth: OpenAI's browser form (Sec-WebSocket-Protocol realtime, openai-insecure-api-key.KEY) "
              "completes the handshake, echoes 'realtime', session.created",
              sub == "realtime" and "session.created" in (types(msgs) if msgs else []) and not err(msgs or []),
              f"subprotocol {sub}, {types(msgs) if msgs else sub}")
        for name, want in (("Deepgram", "token"), ("Deepgram bearer", "bearer")):
            msgs, code, sub = out[name]
            ck.ok(f"auth: {name}'s browser form ({want}, KEY) completes the handshake, echoes '{want}', "
                  "CloseStream -> Metadata", sub == want and "Metadata" in (types(msgs) if msgs else []),
                  f"subprotocol {sub}, {types(msgs) if msgs else sub}")
        msgs, code, sub = out["Deepgram ?token="]
        ck.ok("auth: Deepgram with ?token=KEY -> Metadata", msgs is not None and "Metadata" in types(msgs),
              f"{types(msgs) if msgs else sub}")
        for name in ("OpenAI wrong key", "OpenAI no key", "Deepgram wrong key"):
            msgs, code, sub = out[name]
            ck.ok(f"auth: {name} -> an error (unauthorized) and close 1008", msgs is not None and
                  bool(err(msgs, "unauthorized")) and code == 1008, f"{msgs and types(msgs)} close {code} {sub}")

        # client tokens
        st, body = http("POST", srv.http_url + "/v1/realtime/client_secrets")
        ck.ok("auth: POST /v1/realtime/client_secrets without a key -> 401", st == 401, f"{st} {body[:100]}")
        st, body = http("GET", srv.http_url + "/v1/realtime/client_secrets", bearer1)
        ck.ok("auth: GET /v1/realtime/client_secrets -> 405", st == 405, f"{st}")
        st, body = mint(srv, KEY1)
        tok = json.loads(body) if st == 200 else {}
        value = tok.get("value", "")
        ck.ok("auth: POST with a key -> {value: ek_..., expires_at ~ now + 600}", st == 200 and
              value.startswith("ek_") and abs(tok.get("expires_at", 0) - (time.time() + 600)) < 30,
              f"{st} {body[:120]}")
        st2, _ = mint(srv, value)
        ck.ok("auth: a client token cannot mint tokens (401)", st2 == 401, str(st2))
        st3, body3 = http("POST", srv.http_url + "/v1/realtime/client_secrets",
                          {**bearer1, "Content-Type": "application/json"}, b'{"expires_after":{"seconds":99999}}')
        ck.ok("auth: expires_after.seconds out of 10..7200 -> 400", st3 == 400, f"{st3} {body3[:100]}")
        st, body = mint(srv, KEY2, 10)
        short_tok = json.loads(body).get("value", "") if st == 200 else ""
        t_short = time.monotonic()

        async def token_uses():
            out = {}
            for name, kw in (("native Bearer", {"headers": {"Authorization": f"Bearer {value}"}}),
                             ("native subprotocol", {"subprotocols": ["sotto.v1", "sotto-key." + value]}),
                             ("OpenAI browser form", {"url": base + "/v1/realtime?intent=transcription",
                                                      "subprotocols": ["realtime", "openai-insecure-api-key." + value]})):
                u = kw.pop("url", url)
                try:
                    ws = await ws_open(u, **kw)
                except Exception as ex:  # noqa: BLE001
                    out[name] = [{"type": "error", "code": f"{type(ex).__name__}: {ex}"}]
                    continue
                msgs, code = await collect(ws, 3, until=lambda m: isinstance(m, dict) and
                                           m.get("type") in ("hello", "session.created"))
                out[name] = msgs
                await ws.close()
            return out
        out = sc.run(token_uses())
        for name, msgs in out.items():
            ck.ok(f"auth: the client token works on {name}", bool(set(types(msgs)) & {"hello", "session.created"})
                  and not err(msgs), f"{types(msgs)}")
        with open(wav_path, "rb") as f:
            wav = f.read()
        bnd = "sottoboundary"
        form = (f"--{bnd}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
                f"--{bnd}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                f"Content-Type: audio/wav\r\n\r\n").encode() + wav + f"\r\n--{bnd}--\r\n".encode()
        ctype = {"Content-Type": f"multipart/form-data; boundary={bnd}"}
        st, body = http("POST", srv.http_url + "/v1/audio/transcriptions", {**ctype, "Authorization": f"Bearer {value}"}, form, 120)
        ck.ok("auth: the client token works for an upload (/v1/audio/transcriptions)", st == 200 and "text" in body,
              f"{st} {body[:100]}")
        st, body = http("POST", srv.http_url + "/v1/audio/transcriptions", ctype, form, 120)
        ck.ok("auth: an upload without a key -> 401", st == 401, f"{st}")

        # feeds belong to the key that first published them
        h2 = {"Authorization": f"Bearer {KEY2}"}
        msgs1, _ = sc.run(full_session(url, short, headers=bearer1, start={"feed": "lecture-1"}))
        ck.ok("auth: key 1 publishes the feed lecture-1", "done" in types(msgs1) and not err(msgs1), f"{err(msgs1)}")

        async def other_key():
            ws, msgs = await start_session(url, short, headers=h2)
            await ws.close()
            return msgs
        async def claim(headers):
            ws = await ws_open(url, headers=headers)
            await send(ws, json.dumps({"type": "start", **short.start_fields(), "feed": "lecture-1"}))
            msgs, _ = await collect(ws, 30, until=lambda m: isinstance(m, dict) and m.get("type") in ("ready", "error"))
            await ws.close()
            return msgs
        m2 = sc.run(claim(h2))
        e = err(m2, "feed_owned")
        ck.ok("auth: after it ended, key 2 cannot publish lecture-1 (feed_owned, not fatal)",
              bool(e) and e.get("fatal") is False and "ready" not in types(m2), f"{m2}")
        m3 = sc.run(claim({"Authorization": f"Bearer {value}"}))  # key 1's token
        ck.ok("auth: key 1 (through its client token) can publish lecture-1 again", "ready" in types(m3), f"{types(m3)}")
        st, body = sc.http_get(srv.http_url + "/v1/feeds/lecture-1.vtt")
        ck.ok("auth: feed captions and viewers need no API key (only the feed's own key, if set)",
              st in (200, 404), f"{st}")

        async def resume_other_key():
            ws, msgs = await start_session(url, short, headers=bearer1)
            r = next((m for m in msgs if isinstance(m, dict) and m.get("type") == "ready"), {})
            sc.abort_connection(ws)
            await asyncio.sleep(0.3)
            out = {}
            for name, h in (("key 2", h2), ("key 1", bearer1)):
                w = await ws_open(url, headers=h)
                await send(w, json.dumps({"type": "resume", "session": r.get("session"),
                                         "token": r.get("token"), "last_seq": 0}))
                out[name], _ = await collect(w, 5, until=lambda m: isinstance(m, dict) and
                                             m.get("type") in ("resumed", "error"))
                await w.close()
            return out
        out = sc.run(resume_other_key())
        ck.ok("auth: a session cannot be resumed with another key (unknown_session); with its own it can",
              bool(err(out["key 2"], "unknown_session")) and "resumed" in types(out["key 1"]),
              f"key 2 {types(out['key 2'])}, key 1 {types(out['key 1'])}")

        for path in ("/healthz", "/metrics", "/v1/info"):
            st, _ = sc.http_get(srv.http_url + path)
            ck.ok(f"auth: {path} is open (documented in docs/SECURITY.md)", st == 200, str(st))

        time.sleep(max(0.0, 11.5 - (time.monotonic() - t_short)))
        async def expired():
            ws = await ws_open(url, headers={"Authorization": f"Bearer {short_tok}"})
            msgs, code = await collect(ws, 3)
            return msgs, code
        msgs, code = sc.run(expired())
        ck.ok("auth: a client token minted for 10 s is refused after it expired", bool(short_tok) and
              bool(err(msgs, "unauthorized")) and code == 1008, f"{types(msgs)} close {code}")
        m = srv.metrics()
        ck.ok("auth: /metrics counts auth failures and minted tokens",
              m.get("sotto_auth_failures_total", 0) >= 5 and m.get("sotto_client_tokens_total", 0) >= 2,
              f"failures {m.get('sotto_auth_failures_total')}, tokens {m.get('sotto_client_tokens_total')}")
        ck.ok("auth: server alive", srv.alive())
    finally:
        rcode = srv.stop()
    ck.ok("auth: server exits 0 on SIGTERM", rcode == 0, str(rcode))


SECTIONS = ["admission", "frames", "auth"]


def run_parallel(args, sections):
    """Runs each section as `this script --only SECTION` at once; prints their
    outputs in order and exits 1 if any child failed (or printed no verdict)."""
    t_all = time.monotonic()
    base = [sys.executable, os.path.abspath(__file__), "--server", args.server, "--sotto", args.sotto,
            "--model", args.model, "--manifest", args.manifest]
    kids = [(s, subprocess.Popen(base + ["--only", s], stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            for s in sections]
    failed = []
    for s, p in kids:
        out, _ = p.communicate()
        sys.stdout.write(out.decode(errors="replace"))
        verdict = [l for l in out.decode(errors="replace").splitlines() if " checks, " in l and " failed, " in l]
        if p.returncode != 0 or not verdict:
            failed.append(f"{s} (exit {p.returncode})")
    print(f"\n{len(sections)} sections in parallel, {time.monotonic() - t_all:.0f} s; "
          + (f"FAILED: {', '.join(failed)}" if failed else "all passed"))
    sys.exit(1 if failed else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--parallel", action="store_true",
                    help="each section in a child process of its own, all at once")
    args = ap.parse_args()
    if not os.access(args.server, os.X_OK):
        sys.exit(f"not executable: {args.server} (build it first)")
    only = [s for s in args.only.split(",") if s] or SECTIONS
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        sys.exit(f"unknown sections {unknown} (sections: {', '.join(SECTIONS)})")
    if args.parallel:
        return run_parallel(args, [s for s in SECTIONS if s in only])
    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    ck = Checks()
    t_all = time.monotonic()
    print(f"sotto-server security tests: {args.server}, model {args.model}, sections {only}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sotto-sectest-") as tmp:
        audio = sc.load_clip(rows[CLIP]["file"], "s16_16k", tmp)
        wav = os.path.join(tmp, "short.wav")
        sc.sox_convert(rows[CLIP]["file"], wav, 16000)
        for s in SECTIONS:
            if s not in only:
                continue
            print(f"\n== {s}", flush=True)
            t0 = time.monotonic()
            try:
                if s == "auth":
                    section_auth(ck, args, audio, wav)
                else:
                    globals()[f"section_{s}"](ck, args, audio)
            except Exception as ex:
                import traceback
                traceback.print_exc()
                ck.ok(f"{s}: ran without an exception", False, f"{type(ex).__name__}: {ex}")
            print(f"== {s}: {time.monotonic() - t0:.1f} s", flush=True)
    ck.ok("no sanitizer report in any server's log", not sc.SANITIZER_REPORTS,
          "\n".join(sc.SANITIZER_REPORTS)[:3000])
    print(f"\n{ck.n} checks, {len(ck.failed)} failed, {time.monotonic() - t_all:.0f} s")
    for f in ck.failed:
        print(f"  FAILED: {f[:400]}")
    sys.exit(1 if ck.failed else 0)


if __name__ == "__main__":
    main()
