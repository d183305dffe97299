#!/usr/bin/env python3
"""Soak test of sotto-server (issue 14): one legitimate real-time session
keeps its transcript while hostile clients run for a while.

Starts one real sotto-server (use the ASan+UBSan build) and first streams a
dev clip, repeated with a pause between repetitions to last --duration
seconds, alone, at real-time pace, on /v1/stream (the reference WER of this
run). Then it streams the same audio again, at real-time pace, while at the
same time:

  idle       --idle connections (default 2000) complete the WebSocket
             handshake and send nothing; the server closes them at
             --start-timeout-s and each one is reopened at once;
  slowloris  --slowloris connections trickle the bytes of an HTTP request
             header, one every 0.5 s; lws's handshake timeout must close them;
  storm      --storm connect/disconnect cycles (default 5000; 2000 with
             --short, what a 2-core machine completes in its 40 s), 32 at a time:
             handshake then close, handshake + start then close, or a reset;
  limit      rounds of 6 sessions that start at once on a server with
             --max-sessions 5 (the legitimate session holds one slot, the
             non-reader often another): the ones past the limit must get
             `overloaded`;
  nonreader  a native session that, once ready, streams silence and 50 pings
             a second and never reads its socket again (a 4 KB receive
             buffer);
  fuzz       random and mutated messages on /v1/stream, /v1/realtime and
             /v1/listen (valid messages of each dialect, byte-level and
             JSON-level mutations, random binary audio, raw frames with
             random opcodes and lengths), 4 clients at a time.

Every few seconds it samples the server's VmRSS (/proc/PID/status) and open
descriptors (/proc/PID/fd), and prints the series at the end.

Checks (each can fail): the legitimate session under attack has no error
event, no dropped audio, consistent events (server_client.check_session), and
at most --word-slack (3) more word errors than the same audio alone; the idle
pool held at least 90% of its target at once and the server closed idle
connections by the start timeout; slowloris connections were closed within
the handshake timeout; the storm completed; sessions past the limit got
`overloaded` and no round had more sessions ready than the free slots, and
after the attack --max-sessions sessions started at once are all ready (no
slot leaked); every
text message the server sent any client parses as JSON; the server stays
healthy; RSS stays under --max-rss-mb and grows less than --max-rss-growth-mb
from the first third of the attack to the last; open descriptors return
within 16 of the pre-attack count once the clients are gone, and within 5 s
every session of theirs but those awaiting a resume leaves the table
(sotto_sessions_held == sotto_sessions_detached); the server
exits 0 on SIGTERM; no sanitizer report in its stderr.

  test_soak.py --server build-asan/sotto-server            # long form: 180 s of attack
  test_soak.py --server build-asan/sotto-server --short    # CI: 40 s of attack, <= 150 s in all

The server runs with --max-connections and --max-connections-per-ip 2400
(the idle pool, the storm, the fuzzers and the legitimate session at once:
the defaults, 1024 and 256, would refuse most of the pool), --max-sessions 5,
--start-timeout-s 15 (the idle pool is reopened that often) and --vad energy
(the Silero VAD's passes would only add to the ASan server's load). The test raises its own RLIMIT_NOFILE (the server
inherits it) to what the pool needs.
"""
import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import socket
import struct
import sys
import time

import refcommon as rc
import server_client as sc
from test_security import Checks, Raw, ws_open

CLIP = "jfk"  # 11 s, with its reference text in the manifest
GAP_S = 3.0   # silence after each repetition (an utterance ends after 2 s)
MAX_SESSIONS = 5
FREE_SLOTS = MAX_SESSIONS - 1  # the legitimate session holds one (the non-reader, when it runs, another)


# ---------------------------------------------------------------------------
# shared state


class Stats:
    def __init__(self):
        self.c = {}
        self.idle_open = 0
        self.idle_peak = 0
        self.idle_lifetimes = []       # seconds, of connections the server closed
        self.slow_lifetimes = []       # seconds, of slowloris connections the server closed
        self.slow_open_at_end = 0
        self.limit_rounds = []         # (ready, overloaded) per round
        self.bad_json = []             # server text messages that did not parse
        self.samples = []              # (t, rss MB, fds, connections gauge)

    def inc(self, k, n=1):
        self.c[k] = self.c.get(k, 0) + n


def check_text(st, where, msg):
    """A text message of the server must be JSON."""
    if isinstance(msg, str):
        try:
            json.loads(msg)
        except ValueError:
            st.bad_json.append(f"{where}: {msg[:200]!r}")


async def handshake(port, path="/v1/stream", sock=None, timeout=10.0):
    """A raw WebSocket handshake on asyncio streams: (reader, writer, status line)."""
    if sock is not None:
        r, w = await asyncio.wait_for(asyncio.open_connection(sock=sock), timeout)
    else:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    w.write((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    await w.drain()
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout)
    return r, w, head.split(b"\r\n")[0].decode(errors="replace")


def close_writer(w, reset=False):
    with contextlib.suppress(Exception):
        if reset:
            s = w.get_extra_info("socket")
            if s is not None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        w.close()


# ---------------------------------------------------------------------------
# attackers


async def idle_pool(port, target, stop, st, start_timeout):
    async def one(k):
        await asyncio.sleep(k * 0.004)  # ramp up: 250 connections a second
        while not stop.is_set():
            try:
                r, w, status = await handshake(port)
            except Exception:
                st.inc("idle_connect_failed")
                await asyncio.sleep(0.5)
                continue
            if " 101 " not in status + " ":
                st.inc("idle_not_101")
                close_writer(w)
                await asyncio.sleep(0.5)
                continue
            t0 = time.monotonic()
            st.idle_open += 1
            st.idle_peak = max(st.idle_peak, st.idle_open)
            closed_by_server = False
            try:
                while not stop.is_set():
                    try:
                        d = await asyncio.wait_for(r.read(4096), 1.0)
                    except asyncio.TimeoutError:
                        continue
                    if not d:
                        closed_by_server = True
                        break
            except Exception:
                closed_by_server = True
            st.idle_open -= 1
            if closed_by_server:
                st.idle_lifetimes.append(time.monotonic() - t0)
            close_writer(w)
            st.inc("idle_cycles")

    await asyncio.gather(*(one(k) for k in range(target)))


async def slowloris(port, n, stop, st):
    header = (b"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nX-Padding: " + b"a" * 4000)

    async def one(k):
        await asyncio.sleep(k * 0.05)
        while not stop.is_set():
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port)
            except Exception:
                st.inc("slow_connect_failed")
                await asyncio.sleep(0.5)
                continue
            t0 = time.monotonic()
            closed = False
            i = 0
            while not stop.is_set() and not closed:
                try:
                    w.write(header[i % len(header):i % len(header) + 1])
                    await w.drain()
                    i += 1
                    d = await asyncio.wait_for(r.read(4096), 0.5)
                    if not d:
                        closed = True
                except asyncio.TimeoutError:
                    pass
                except Exception:
                    closed = True
            if closed:
                st.slow_lifetimes.append(time.monotonic() - t0)
            else:
                st.slow_open_at_end += 1
            close_writer(w)

    await asyncio.gather(*(one(k) for k in range(n)))


async def storm(port, total, stop, st, concurrency=32):
    sem = asyncio.Semaphore(concurrency)
    start = json.dumps({"type": "start"}).encode()

    async def one(k):
        async with sem:
            if stop.is_set():
                return
            try:
                r, w, status = await handshake(port)
            except Exception:
                st.inc("storm_failed")
                return
            kind = k % 3
            if kind == 1:  # start, then gone: a detached session
                with contextlib.suppress(Exception):
                    w.write(Raw.frame(1, start))
                    await w.drain()
            close_writer(w, reset=(kind == 2))
            st.inc("storm_done")

    await asyncio.gather(*(one(k) for k in range(total)))


async def limit_rounds(url, stop, st, audio, n=6):
    """Rounds of n sessions started at once; each ready one streams 2 s of silence."""
    silence = b"\0" * 3200  # 100 ms at 16 kHz

    async def one():
        try:
            ws = await ws_open(url)
        except Exception:
            st.inc("limit_connect_failed")
            return None
        try:
            await ws.send(json.dumps({"type": "start", **audio.start_fields()}))
            while True:
                m = await asyncio.wait_for(ws.recv(), 30)
                check_text(st, "limit", m)
                e = json.loads(m)
                if e.get("type") in ("ready", "error"):
                    break
            res = e.get("type") if e.get("type") == "ready" else e.get("code")
            return ws, res
        except Exception:
            with contextlib.suppress(Exception):
                await ws.close()
            return None

    while not stop.is_set():
        got = await asyncio.gather(*(one() for _ in range(n)))
        got = [g for g in got if g]
        ready = [ws for ws, r in got if r == "ready"]
        st.limit_rounds.append((time.monotonic(), len(ready), sum(1 for _, r in got if r == "overloaded")))
        with contextlib.suppress(Exception):
            for _ in range(20):
                for ws in ready:
                    await ws.send(silence)
                await asyncio.sleep(0.1)
        for ws, _ in got:
            with contextlib.suppress(Exception):
                await ws.close()
        await asyncio.sleep(1.0)


async def nonreader(port, stop, st):
    """A session that reads nothing after its ready: silence at real-time pace and 50
    pings a second (a session refused for a full server tries again)."""
    while not stop.is_set():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
            r, w, status = await handshake(port, sock=s)
        except Exception:
            st.inc("nonreader_failed")
            s.close()
            await asyncio.sleep(1)
            continue
        try:
            w.write(Raw.frame(1, json.dumps({"type": "start"}).encode()))
            got = b""
            while b'"ready"' not in got and b'"error"' not in got:
                d = await asyncio.wait_for(r.read(4096), 30)
                if not d:
                    break
                got += d
            if b'"ready"' not in got:
                st.inc("nonreader_refused")
                close_writer(w)
                await asyncio.sleep(1)
                continue
            st.inc("nonreader_sessions")
            ping = Raw.frame(1, b'{"type":"ping"}')
            silence = Raw.frame(2, b"\0" * 640)  # 20 ms
            t0 = time.monotonic()
            k = 0
            while not stop.is_set():
                w.write(silence + ping)
                await asyncio.wait_for(w.drain(), 30)
                k += 1
                st.inc("nonreader_messages", 2)
                delay = t0 + k * 0.02 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        except Exception as ex:
            st.inc(f"nonreader_closed_{type(ex).__name__}")
        close_writer(w)


# ---- the dialect fuzzers ----------------------------------------------------------


def seed_messages(pcm):
    """Valid messages of each dialect (docs/PROTOCOL.md, docs/COMPAT.md)."""
    b64 = base64.b64encode(pcm[:9600]).decode()
    native = [{"type": "start"}, {"type": "start", "encoding": "pcm_s16le", "sample_rate": 16000, "channels": 1,
                                  "partials": True, "vad": {"kind": "energy", "silence_ms": 500}},
              {"type": "start", "encoding": "opus", "sample_rate": 48000, "channels": 2},
              {"type": "start", "feed": "soak-feed", "feed_key": "k", "prompt": "p" * 100},
              {"type": "flush"}, {"type": "stop"}, {"type": "ping"},
              {"type": "resume", "session": "s1-00000000", "token": "0" * 32, "last_seq": 3}]
    rt = [{"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
              "format": {"type": "audio/pcm", "rate": 24000}, "transcription": {"model": "whisper-1"},
              "turn_detection": {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 500}}}}},
          {"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw",
                                                               "turn_detection": None}},
          {"type": "input_audio_buffer.append", "audio": b64}, {"type": "input_audio_buffer.commit"},
          {"type": "input_audio_buffer.clear"}, {"type": "response.create"}]
    dg = [{"type": "KeepAlive"}, {"type": "Finalize"}, {"type": "CloseStream"}]
    return {"native": native, "rt": rt, "dg": dg}


def mutate_json(rng, obj, depth=0):
    odd = [None, True, -1, 0, 1e308, -1e308, 2 ** 63, 4294967296, 1.5, "", "x" * rng.choice([10, 300, 5000]),
           [], {}, [1, [2, [3]]], {"type": "start"}, "\u0000\ud7ff", -2147483649]
    if isinstance(obj, dict):
        o = dict(obj)
        for k in list(o):
            r = rng.random()
            if r < 0.2:
                o[k] = rng.choice(odd)
            elif r < 0.3:
                del o[k]
            elif r < 0.6 and depth < 4:
                o[k] = mutate_json(rng, o[k], depth + 1)
        if rng.random() < 0.2:
            o[rng.choice(["sample_rate", "channels", "step_ms", "last_seq", "utterance", "rate", "x"])] = rng.choice(odd)
        return o
    if isinstance(obj, list):
        return [mutate_json(rng, x, depth + 1) for x in obj]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return rng.choice(odd + [obj * 1000, -obj])
    if isinstance(obj, str):
        return rng.choice([obj + "x", obj[: len(obj) // 2], "", obj * 3, rng.choice(odd)])
    return rng.choice(odd)


def mutate_bytes(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if not b or r < 0.3:
            b[rng.randrange(len(b) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif r < 0.6:
            b[rng.randrange(len(b))] = rng.randrange(256)
        else:
            del b[rng.randrange(len(b)):rng.randrange(len(b)) + rng.randint(1, 16)]
    return bytes(b)


def one_message(rng, seeds, pcm):
    r = rng.random()
    if r < 0.35:
        return json.dumps(mutate_json(rng, rng.choice(seeds)))
    if r < 0.55:
        return json.dumps(rng.choice(seeds))
    if r < 0.7:  # text, mutated as bytes (often invalid UTF-8: that is a close, 1007)
        return mutate_bytes(rng, json.dumps(rng.choice(seeds)).encode()).decode("utf-8", "replace")
    if r < 0.85:
        off = rng.randrange(0, len(pcm) - 4000)
        return pcm[off:off + rng.choice([1, 3, 320, 3200])]
    return bytes(rng.randrange(256) for _ in range(rng.choice([1, 7, 64, 1000, 4000])))


async def fuzz_clients(port, stop, st, pcm, seed, n=4):
    seeds = seed_messages(pcm)
    base = f"ws://127.0.0.1:{port}"
    urls = [("native", base + "/v1/stream"), ("rt", base + "/v1/realtime?intent=transcription"),
            ("dg", base + "/v1/listen?encoding=linear16&sample_rate=16000&interim_results=true"),
            ("dg", base + "/v1/listen?encoding=mulaw&sample_rate=8000"),
            ("dg", base + "/v1/listen?encoding=opus&sample_rate=48000&endpointing=99999999999999")]

    async def reader(ws, where):
        with contextlib.suppress(Exception):
            async for m in ws:
                check_text(st, where, m)
                st.inc("fuzz_server_messages")

    async def raw_frames(rng):
        try:
            r, w, status = await handshake(port, rng.choice(["/v1/stream", "/v1/realtime", "/v1/listen"]))
        except Exception:
            st.inc("fuzz_connect_failed")
            return
        for _ in range(rng.randint(1, 6)):
            op = rng.choice([0, 1, 2, 3, 7, 8, 9, 10, 11, 15])
            payload = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 125, 126, 300])))
            f = Raw.frame(op, payload, mask=rng.random() < 0.9, fin=rng.random() < 0.8,
                          length=rng.choice([None, None, None, 2 ** 63 - 1, 70000]))
            with contextlib.suppress(Exception):
                w.write(f)
                await w.drain()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(r.read(65536), 0.3)
        close_writer(w, reset=rng.random() < 0.5)
        st.inc("fuzz_raw_connections")

    async def worker(k):
        rng = random.Random(seed * 1000 + k)
        while not stop.is_set():
            if rng.random() < 0.15:
                await raw_frames(rng)
                continue
            kind, url = rng.choice(urls)
            try:
                ws = await ws_open(url)
            except Exception:
                st.inc("fuzz_connect_failed")
                await asyncio.sleep(0.2)
                continue
            rx = asyncio.create_task(reader(ws, kind))
            try:
                for _ in range(rng.randint(1, 15)):
                    await ws.send(one_message(rng, seeds[kind], pcm))
                    st.inc("fuzz_messages")
                    await asyncio.sleep(rng.choice([0, 0, 0.01, 0.1]))
                await asyncio.sleep(rng.choice([0.05, 0.3, 1.0]))
            except Exception:
                pass
            if rng.random() < 0.3:
                sc.abort_connection(ws)
            else:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 3)
            rx.cancel()
            with contextlib.suppress(BaseException):
                await rx
            st.inc("fuzz_connections")

    await asyncio.gather(*(worker(k) for k in range(n)))


# ---------------------------------------------------------------------------
# the server's resources


def proc_sample(pid):
    rss = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024.0
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def sampler(srv, st, stop, t0, every):
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            rss, fds = proc_sample(srv.proc.pid)
        except OSError:
            break
        conns = None
        with contextlib.suppress(Exception):
            m = await loop.run_in_executor(None, srv.metrics)
            conns = int(m.get("sotto_connections", -1))
        st.samples.append((time.monotonic() - t0, rss, fds, conns))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


# ---------------------------------------------------------------------------
# the legitimate session


def repeated(pcm, reps, rate=16000):
    gap = b"\0" * int(GAP_S * rate) * 2
    return sc.Audio.pcm((pcm + gap) * reps, rate, 1, "pcm_s16le", 100)


async def legit(url, pcm, reps, on_first_audio=None):
    audio = repeated(pcm, reps)

    def sent(k, ws):
        if k == 0 and on_first_audio:
            on_first_audio()

    res = await sc.stream_async(url, audio, realtime=True, timeout=300, on_message=sent)
    return res, audio


def wer_of(res, ref, reps):
    return rc.corpus_wer([" ".join([ref] * reps)], [res.transcript])


def errors_of(res, ref, reps):
    """Word errors of the transcript against the reference repeated reps times."""
    return rc.edit_distance(rc.normalize(" ".join([ref] * reps)).split(),
                            rc.normalize(res.transcript).split())


async def sessions_after(url, audio, n):
    """n sessions started at once: what each got (ready, or an error code)."""
    async def one():
        try:
            ws = await ws_open(url)
        except Exception as ex:
            return type(ex).__name__
        try:
            await ws.send(json.dumps({"type": "start", **audio.start_fields()}))
            while True:
                e = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if e.get("type") in ("ready", "error"):
                    return "ready" if e["type"] == "ready" else e.get("code")
        except Exception as ex:
            return type(ex).__name__
        finally:
            with contextlib.suppress(Exception):
                await ws.send(json.dumps({"type": "stop"}))
                await asyncio.wait_for(ws.close(), 5)

    return await asyncio.gather(*(one() for _ in range(n)))


# ---------------------------------------------------------------------------


def repetitions(args, pcm):
    return max(1, round(args.duration / (len(pcm) / 32000 + GAP_S)))


async def attack_phase(args, srv, st, pcm, ref, audio1):
    stop = asyncio.Event()
    t0 = time.monotonic()
    reps = repetitions(args, pcm)
    samp_stop = asyncio.Event()
    samp = asyncio.create_task(sampler(srv, st, samp_stop, t0, args.sample_s))
    tasks = [asyncio.create_task(c) for c in (  # those that start no session
        idle_pool(srv.port, args.idle, stop, st, args.start_timeout),
        slowloris(srv.port, args.slowloris, stop, st))]
    await asyncio.sleep(3.0)  # the idle pool ramps up first
    print(f"  the legitimate session streams the clip {reps} times "
          f"({reps * (len(pcm) / 32000 + GAP_S):.0f} s of audio) at real-time pace", flush=True)
    # its own thread and event loop, so that the attackers' loop cannot slow its pace;
    # the attackers that start sessions wait for its start
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    legit_run = loop.run_in_executor(
        None, lambda: asyncio.run(legit(srv.ws_url, pcm, reps, lambda: loop.call_soon_threadsafe(started.set))))
    await asyncio.wait([asyncio.ensure_future(started.wait()), legit_run], return_when=asyncio.FIRST_COMPLETED)
    tasks += [asyncio.create_task(c) for c in (
        storm(srv.port, args.storm, stop, st),
        limit_rounds(srv.ws_url, stop, st, audio1),
        nonreader(srv.port, stop, st),
        fuzz_clients(srv.port, stop, st, pcm, args.seed))]
    res, audio = await legit_run
    st.legit_end = time.monotonic()
    t_legit = time.monotonic() - t0
    stop.set()
    storm_left = tasks[2] if len(tasks) > 2 else None
    await asyncio.wait(tasks, timeout=30)
    for t in tasks:
        if not t.done():
            t.cancel()
    with contextlib.suppress(BaseException):
        await asyncio.gather(*tasks, return_exceptions=True)
    st.storm_complete = storm_left is not None and storm_left.done() and not storm_left.cancelled()
    attack_end = time.monotonic() - t0
    # the clients are gone: descriptors must come back
    t_rec = time.monotonic()
    while time.monotonic() - t_rec < args.recover_s:
        rss, fds = proc_sample(srv.proc.pid)
        if fds <= st.fds_before + 16:
            break
        await asyncio.sleep(1.0)
    samp_stop.set()
    await samp
    rss, fds = proc_sample(srv.proc.pid)
    st.samples.append((time.monotonic() - t0, rss, fds, None))
    st.fds_after = fds
    # and the sessions of those connections must leave the table (reaped), not pile up:
    # the only ones kept are started sessions waiting for their client to resume
    t_rec, st.held_after, st.detached_after = time.monotonic(), None, None
    while time.monotonic() - t_rec < 5.0:
        m = srv.metrics()
        st.held_after, st.detached_after = m.get("sotto_sessions_held"), m.get("sotto_sessions_detached")
        if st.held_after is not None and st.held_after - st.detached_after <= 2:
            break
        await asyncio.sleep(0.25)
    st.held_wait = time.monotonic() - t_rec
    return res, audio, reps, t_legit, attack_end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build-asan", "sotto-server"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--short", action="store_true", help="the CI form: 40 s of attack, a smaller storm")
    ap.add_argument("--duration", type=float, default=None, help="seconds of attack (default 180; --short 40)")
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--slowloris", type=int, default=50)
    ap.add_argument("--storm", type=int, default=None, help="connect/disconnect cycles (default 5000; --short 2000)")
    ap.add_argument("--start-timeout", type=float, default=15.0)
    ap.add_argument("--sample-s", type=float, default=3.0)
    ap.add_argument("--recover-s", type=float, default=25.0)
    ap.add_argument("--word-slack", type=int, default=3,
                    help="word errors the session under attack may have beyond the same audio "
                         "alone (windows cut at other moments; test_rooms STREAM_TOL is 5)")
    ap.add_argument("--max-rss-mb", type=float, default=4000.0)
    ap.add_argument("--max-rss-growth-mb", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    if args.duration is None:
        args.duration = 40.0 if args.short else 180.0
    if args.storm is None:  # what a 2-core machine completes within the short form's attack
        args.storm = 2000 if args.short else 5000
    if not os.access(args.server, os.X_OK):
        sys.exit(f"not executable: {args.server} (build it first)")
    t_all = time.monotonic()
    # descriptors: the pool, the storm, the fuzzers, and as many again for the server
    need = args.idle + args.slowloris + 512
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, 4096)), hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < need:
        print(f"  [note] RLIMIT_NOFILE {soft} < {need}: the idle pool is cut to fit", flush=True)
        args.idle = max(100, soft - args.slowloris - 512)
    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    pcm, rate, ch = sc.read_wav(rows[CLIP]["file"])
    assert rate == 16000 and ch == 1
    ref = rows[CLIP]["text"]
    ck = Checks()
    st = Stats()
    max_conn = args.idle + 400
    srv = sc.Server(args.server, model=args.model, args=[
        "--max-connections", str(max_conn), "--max-connections-per-ip", str(max_conn),
        "--max-sessions", str(MAX_SESSIONS), "--start-timeout-s", str(args.start_timeout), "--vad", "energy"],
        log_level="warn")
    print(f"sotto-server soak test: {args.server}, {args.duration:.0f} s of attack, idle {args.idle}, "
          f"slowloris {args.slowloris}, storm {args.storm}, RLIMIT_NOFILE {soft}", flush=True)
    srv.start(timeout=120)
    try:
        audio1 = sc.Audio.pcm(pcm, 16000, 1, "pcm_s16le", 100)
        reps = repetitions(args, pcm)
        print(f"\n== alone: the clip {reps} times, at real-time pace", flush=True)
        alone, alone_audio = asyncio.run(legit(srv.ws_url, pcm, reps))
        wer_alone = wer_of(alone, ref, reps)
        probs = sc.check_session(alone, alone_audio.total_units)
        ck.ok("the clip alone: a clean session", not probs, "; ".join(probs)[:500])
        print(f"  alone: WER {wer_alone:.2f} %: {alone.transcript.strip()[:300]!r}", flush=True)
        st.rss_before, st.fds_before = proc_sample(srv.proc.pid)
        print(f"  before the attack: RSS {st.rss_before:.0f} MB, {st.fds_before} descriptors", flush=True)

        print(f"\n== under attack ({args.duration:.0f} s)", flush=True)
        res, audio, reps, t_legit, t_attack = asyncio.run(attack_phase(args, srv, st, pcm, ref, audio1))
        wer_attack = wer_of(res, ref, reps)
        probs = sc.check_session(res, audio.total_units)
        ck.ok("the legitimate session under attack: no error, nothing dropped, consistent events",
              not probs, "; ".join(probs)[:800])
        e_alone, e_attack = errors_of(alone, ref, reps), errors_of(res, ref, reps)
        ok = ck.ok(f"its word errors within {args.word_slack} of the same audio streamed alone",
                   e_attack <= e_alone + args.word_slack,
                   f"alone {e_alone} ({wer_alone:.2f} %), under attack {e_attack} ({wer_attack:.2f} %) "
                   f"over {reps} repetitions")
        if not ok:
            print(f"  alone:        {alone.transcript.strip()!r}\n  under attack: {res.transcript.strip()!r}",
                  flush=True)
        span = res.sends[-1][0] - res.sends[0][0] if res.sends else 0.0
        ck.ok("the legitimate client kept real-time pace", span <= audio.seconds * 1.05 + 1.0,
              f"{audio.seconds:.1f} s of audio sent over {span:.1f} s")
        print(f"  legitimate session: done at {t_legit:.0f} s; attack ended at {t_attack:.0f} s", flush=True)

        # what the attackers saw
        print("  counters: " + ", ".join(f"{k} {v}" for k, v in sorted(st.c.items())), flush=True)
        ck.ok(f"the idle pool held at least 90% of {args.idle} connections at once",
              st.idle_peak >= 0.9 * args.idle, f"peak {st.idle_peak}")
        lt = st.idle_lifetimes
        ck.ok("the server closed idle connections by the start timeout",
              lt and max(lt) <= args.start_timeout + 6,
              f"{len(lt)} closed, lifetime max {max(lt) if lt else 0:.1f} s "
              f"(--start-timeout-s {args.start_timeout:g})")
        sl = st.slow_lifetimes
        ck.ok("slowloris connections were closed by the handshake timeout (10 s)",
              sl and max(sl) <= 16 and st.slow_open_at_end <= args.slowloris,
              f"{len(sl)} closed, lifetime max {max(sl) if sl else 0:.1f} s")
        ck.ok(f"the storm completed its {args.storm} connect/disconnect cycles",
              getattr(st, "storm_complete", False) and st.c.get("storm_done", 0) + st.c.get("storm_failed", 0) == args.storm
              and st.c.get("storm_done", 0) >= 0.95 * args.storm,
              f"{st.c.get('storm_done', 0)} done, {st.c.get('storm_failed', 0)} failed")
        # rounds that ended while the legitimate session held its slot
        rounds = [(r, o) for t, r, o in st.limit_rounds if t < st.legit_end]
        ck.ok("sessions past --max-sessions got overloaded; no round had more ready than the free slots",
              rounds and sum(o for _, o in rounds) > 0 and max(r for r, _ in rounds) <= FREE_SLOTS,
              f"{len(rounds)} rounds of 6: ready {[r for r, _ in rounds]}, "
              f"overloaded {sum(o for _, o in rounds)} (--max-sessions {MAX_SESSIONS}, the legitimate "
              f"session holds 1)")
        ck.ok("the non-reading client ran a session", st.c.get("nonreader_sessions", 0) > 0 and
              st.c.get("nonreader_messages", 0) > 0,
              f"{st.c.get('nonreader_messages', 0)} messages sent, {st.c.get('nonreader_sessions', 0)} sessions")
        ck.ok("the dialect fuzzers ran on all three endpoints",
              st.c.get("fuzz_connections", 0) >= 20 and st.c.get("fuzz_messages", 0) >= 100,
              f"{st.c.get('fuzz_connections', 0)} connections, {st.c.get('fuzz_messages', 0)} messages, "
              f"{st.c.get('fuzz_raw_connections', 0)} of raw frames, "
              f"{st.c.get('fuzz_server_messages', 0)} server messages")
        ck.ok("every text message of the server was JSON", not st.bad_json, "; ".join(st.bad_json[:3]))
        ck.ok("the server is healthy after the attack",
              srv.alive() and sc.http_get(srv.http_url + "/healthz")[0] == 200)
        ready = asyncio.run(sessions_after(srv.ws_url, audio1, MAX_SESSIONS))
        ck.ok(f"no session slot leaked: {MAX_SESSIONS} sessions started at once after the attack are all ready",
              ready.count("ready") == MAX_SESSIONS, f"{ready}")

        # resources
        print("\n  server resources (t s, VmRSS MB, open fds, sotto_connections):", flush=True)
        for t, rss, fds, conns in st.samples:
            print(f"    {t:6.1f} {rss:8.1f} {fds:6d} {'' if conns is None else conns:>6}", flush=True)
        attack = [s for s in st.samples if s[0] <= t_attack]
        third = max(1, len(attack) // 3)
        first_max = max((s[1] for s in attack[:third]), default=st.rss_before)
        last_max = max((s[1] for s in attack[-third:]), default=st.rss_before)
        peak_rss = max((s[1] for s in st.samples), default=0)
        peak_fds = max((s[2] for s in st.samples), default=0)
        ck.ok(f"server RSS under {args.max_rss_mb:.0f} MB", peak_rss <= args.max_rss_mb,
              f"before {st.rss_before:.0f} MB, peak {peak_rss:.0f} MB")
        ck.ok(f"server RSS grew less than {args.max_rss_growth_mb:.0f} MB from the first third of the attack "
              "to the last", last_max - first_max <= args.max_rss_growth_mb,
              f"first third max {first_max:.0f} MB, last third max {last_max:.0f} MB")
        ck.ok("open descriptors bounded by the connections",
              peak_fds <= st.fds_before + max_conn + args.slowloris + 64,
              f"peak {peak_fds} (before {st.fds_before})")
        ck.ok("open descriptors back within 16 of the pre-attack count once the clients are gone",
              st.fds_after <= st.fds_before + 16, f"before {st.fds_before}, after {st.fds_after}")
        ck.ok("within 5 s of its clients, every session of the attack left the table but those awaiting "
              "a resume (sotto_sessions_held - sotto_sessions_detached <= 2; the pile-up it guards against is hundreds)",
              st.held_after is not None and st.held_after - st.detached_after <= 2,
              f"{st.held_after} held, {st.detached_after} detached, after {st.held_wait:.1f} s")
    finally:
        rc_exit = srv.stop(timeout=60)
    ck.ok("the server exits 0 on SIGTERM", rc_exit == 0, f"exit {rc_exit}")
    ck.ok("no sanitizer report in the server's stderr", not sc.SANITIZER_REPORTS,
          "\n".join(sc.SANITIZER_REPORTS)[:3000])
    print(f"\n{ck.n} checks, {len(ck.failed)} failed, {time.monotonic() - t_all:.0f} s", flush=True)
    for f in ck.failed:
        print(f"  FAILED: {f[:400]}")
    sys.exit(1 if ck.failed else 0)


if __name__ == "__main__":
    main()
