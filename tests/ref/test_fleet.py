#!/usr/bin/env python3
"""Several sotto-server instances behind HAProxy, sessions checkpointed to Redis (issue 16).

The test starts its own redis-server, three sotto-server instances (--redis, --instance)
and haproxy (balance leastconn, health checks on /readyz) on loopback ports, and streams
dev clips at real-time pace through HAProxy with a client that behaves as the page and
sotto-mic must: it keeps its audio only from the `durable` offset of the latest ack, and
when its connection breaks or the server says `reconnect`, it resumes through HAProxy and
resends from the offset the `resumed` event names.

Sections (--only NAME,...):
  kill     six sessions spread over the instances; the instance holding the most is killed
           with SIGKILL mid-utterance; its clients resume on the others; every session's
           final transcript matches its uninterrupted run (same clips, same pace, earlier)
           within STREAM_TOL words; a resume never asks for audio before the durable
           offset the client was given.
  sigterm  an instance gets SIGTERM: its sessions are told to reconnect, move and finish
           elsewhere, and it exits 0 within the drain bound.
  redis    Redis is stopped mid-run and started again: the sessions keep transcribing
           (transcripts within the tolerance), /readyz says 503 "redis unreachable" while
           it is away, the servers log what they could not write, and checkpoints are
           written again once it is back; a resume that needs Redis while it is away gets
           `store_unavailable`, not a hang or a crash.
  feeds    a feed published on one instance is followed by 100 viewers on the two others
           (through Redis), in order, with history for late viewers; the .vtt is the same
           from every instance; the name is refused elsewhere while it is live.
  page     the dictation page through HAProxy (headless Chromium, fake microphone); its
           instance is killed mid-utterance; it resumes on another and its transcript
           matches the clip's uninterrupted run.
  keys     two instances with API keys: a token minted on one works on the other, another
           key cannot resume a session elsewhere, feed names belong to their first key.
  full     two instances with one session slot each behind HAProxy: a third session gets
           `overloaded`; with no instance up, the upgrade through HAProxy gets HTTP 503.
  mic      sotto-mic streams a file through HAProxy; its instance is killed mid-utterance;
           it resumes on another and its --output matches an uninterrupted run.
  resume   cross-instance resume rules: a wrong token or an unknown session gets
           `unknown_session` on another instance; a finished session's checkpoint is gone.

Timing goals (resume latency, checkpoint cost) are in bench/, not here.
"""
import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import websockets  # noqa: E402
import server_client as sc  # noqa: E402

# Word errors a streamed transcript may have beyond its uninterrupted run
# (the same tolerance as test_rooms.py / test_compat.py STREAM_TOL): a restored
# session restarts its open utterance at the durable point, with a fresh VAD and
# without the previous utterance's audio as lead, so a word or two may differ.
STREAM_TOL = 5
# The page's baseline is a PCM session, not the page: Chromium's capture path
# (48 kHz fake device, its resampler) moves a word on its own ("If he" -> "If you"),
# and the sentence restarted without its lead cost 5 words once ("Cut a man's flesh
# and it heals" -> "Cottaman's flesh and the teals", 6/42 in all).
PAGE_TOL = STREAM_TOL + 3


class Checker:
    def __init__(self):
        self.failed = []
        self.count = 0

    def ok(self, name, cond, detail=""):
        self.count += 1
        print(f"  {'ok  ' if cond else 'FAIL'} {name}" + (f": {detail}" if detail and not cond else ""),
              flush=True)
        if not cond:
            self.failed.append(name)
        return cond


# ---------------------------------------------------------------------------
# services


def wait_port(port, timeout=10.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


class Redis:
    def __init__(self, tmp):
        self.port = sc.free_port()
        self.tmp = tmp
        self.proc = None
        self.log_path = os.path.join(tmp, "redis.log")

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.tmp, "--logfile", self.log_path],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        if not wait_port(self.port):
            raise RuntimeError("redis-server did not listen")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args):
        """One command over RESP; the raw reply bytes."""
        parts = [f"*{len(args)}\r\n".encode()]
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            parts.append(f"${len(a)}\r\n".encode() + a + b"\r\n")
        with socket.create_connection(("127.0.0.1", self.port), 2) as s:
            s.sendall(b"".join(parts))
            s.settimeout(2)
            data = b""
            while not data.endswith(b"\r\n") or (data.startswith(b"$") and data.count(b"\r\n") < 2
                                                 and not data.startswith(b"$-1")):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

    def get(self, key):
        r = self.command("GET", key)
        if r.startswith(b"$-1"):
            return None
        return r.split(b"\r\n", 1)[1].rsplit(b"\r\n", 1)[0].decode()


HAPROXY_CFG = """global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
    timeout http-request 10s
    option redispatch
    retries 3
frontend fe
    bind 127.0.0.1:{port}
    default_backend sotto
backend sotto
    balance leastconn
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
{servers}
"""


class HAProxy:
    def __init__(self, tmp, backends):
        self.port = sc.free_port()
        self.cfg = os.path.join(tmp, "haproxy.cfg")
        servers = "\n".join(f"    server {name} 127.0.0.1:{port} check" for name, port in backends)
        with open(self.cfg, "w") as f:
            f.write(HAPROXY_CFG.format(port=self.port, servers=servers))
        self.log_path = os.path.join(tmp, "haproxy.log")
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.cfg], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if not wait_port(self.port):
            raise RuntimeError(f"haproxy did not listen: {open(self.log_path).read()[-2000:]}")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
            if self.proc.poll() is None:
                self.proc.kill()
        self.log.close()

    @property
    def ws_url(self):
        return f"ws://127.0.0.1:{self.port}/v1/stream"


class Instance(sc.Server):
    """A sotto-server on a fixed port (HAProxy's configuration names it), restartable."""

    def __init__(self, binary, model, name, port, redis_url, threads, extra=()):
        super().__init__(binary, model=model, threads=threads,
                         args=["--redis", redis_url, "--instance", name, "--resume-grace-s", "60",
                               "--drain-s", "20", *extra])
        self.name = name
        self.fixed_port = port

    def start(self, timeout=60.0):
        self.port = self.fixed_port
        fd, self.log_path = tempfile.mkstemp(prefix=f"sotto-{self.name}-", suffix=".log")
        os.close(fd)
        self._log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self._log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log()[-2000:]}")
            st, _ = sc.http_get(self.http_url + "/readyz", timeout=2.0)
            if st == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready in {timeout} s: {self.log()[-2000:]}")


def wait_ready_in_haproxy(hap, instances, timeout=15.0):
    """Until HAProxy's health checks see every live instance up (rise 2 x 300 ms)."""
    time.sleep(1.0)
    for inst in instances:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            st, _ = sc.http_get(inst.http_url + "/readyz", timeout=1.0)
            if st == 200:
                break
            time.sleep(0.1)


# ---------------------------------------------------------------------------
# the fleet-aware client


class Session:
    """One dictation through the load balancer that survives instance loss."""

    def __init__(self, label, audio, start):
        self.label = label
        self.audio = audio
        self.start = start
        self.events = []          # every event of every connection, in arrival order
        self.times = []           # ... and when each arrived (monotonic)
        self.instances = []       # the instance of each connection (ready / resumed)
        self.durable = 0          # the newest durable offset the server gave: audio before it is dropped
        self.resumes = []         # (resumed event, the durable offset the client held then)
        self.problems = []
        self.session = self.token = None
        self.last_seq = 0
        self.done = False
        self.t_lost = []          # (lost at, first event after the resume at)

    def transcript(self):
        fins = {}
        for e in self.events:
            if e.get("type") == "final":
                fins[e["utterance"]] = e.get("text", "")
        return "".join(fins[u] for u in sorted(fins))

    def final_latencies(self):
        """Seconds from each utterance's speech_end event to its final event."""
        ends, out = {}, []
        for t, e in zip(self.times, self.events):
            if e.get("type") == "speech_end":
                ends[e.get("utterance")] = t
            elif e.get("type") == "final" and e.get("utterance") in ends:
                out.append(t - ends.pop(e.get("utterance")))
        return out

    def open_utterance_at_loss(self):
        """An utterance had started (speech_start) without its final when the connection broke."""
        return getattr(self, "_open_at_loss", False)


async def run_session(url, sess, t_base, realtime=True, max_resumes=5, loss_timeout=30.0):
    """Streams sess.audio at real-time pace from t_base; resumes on loss."""
    audio = sess.audio
    units_total = audio.total_units
    sent_units = 0
    attempt = 0
    while True:
        res = sc.StreamResult()
        try:
            ws = await sc.open_ws(url, timeout=10)
        except Exception as e:  # HAProxy has no backend up for a moment
            attempt += 1
            if attempt > 40:
                sess.problems.append(f"cannot connect: {e}")
                return
            await asyncio.sleep(0.25)
            continue
        rx = asyncio.create_task(sc._receiver(ws, res))
        resumed = sess.session is not None
        if not resumed:
            await ws.send(json.dumps({"type": "start", **audio.start_fields(), **sess.start}))
            ev = await sc.wait_for(res, lambda e: e.get("type") in ("ready", "error"), 60)
            if not ev or ev.get("type") != "ready":
                sess.problems.append(f"no ready: {ev}")
                await ws.close()
                return
            sess.session, sess.token = ev["session"], ev["token"]
            sess.instances.append(ev.get("instance"))
            offset = 0
        else:
            await ws.send(json.dumps({"type": "resume", "session": sess.session, "token": sess.token,
                                      "last_seq": sess.last_seq}))
            ev = await sc.wait_for(res, lambda e: e.get("type") in ("resumed", "error"), 30)
            if not ev or ev.get("type") != "resumed":
                code = ev.get("code") if ev else None
                with contextlib.suppress(Exception):
                    await ws.close()
                if code in ("session_attached", "store_unavailable") and attempt < 40:
                    attempt += 1  # the old connection is not seen gone yet, or Redis is back soon
                    await asyncio.sleep(0.25)
                    continue
                sess.problems.append(f"resume failed: {ev}")
                return
            sess.instances.append(ev.get("instance", "same"))
            offset = int(ev.get("offset", 0))
            sess.resumes.append((ev, sess.durable))
            if offset < sess.durable:
                sess.problems.append(f"resumed at offset {offset}, before the durable offset "
                                     f"{sess.durable} the client was told it may forget")
            if sess.t_lost and sess.t_lost[-1][1] is None:
                sess.t_lost[-1] = (sess.t_lost[-1][0], time.monotonic())
        # record this connection's events as they come (the hello of a resume is its own)
        seen = 0
        lost = False

        async def pump():
            nonlocal seen
            while seen < len(res.events):
                t, e = res.events[seen]
                seen += 1
                if e.get("type") == "hello" and resumed:
                    continue
                sess.events.append(e)
                sess.times.append(t)
                if "seq" in e and e.get("type") != "hello":
                    sess.last_seq = max(sess.last_seq, e["seq"])
                if e.get("type") == "ack" and "durable" in e:
                    sess.durable = max(sess.durable, int(e["durable"]))
                if e.get("type") == "done":
                    sess.done = True
            return not any(e.get("type") == "reconnect" for _, e in res.events)

        rest = audio.from_unit(offset)
        secs0 = offset * audio.durations[0] / audio.units[0] if audio.units else 0.0
        try:
            elapsed = secs0
            for m, d, u in zip(rest.messages, rest.durations, rest.units):
                if realtime:
                    delay = t_base + elapsed - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if not await pump() or res.t_end is not None:
                    lost = True
                    break
                await ws.send(m)
                elapsed += d
                sent_units = max(sent_units, offset + u)
                offset += u
            if not lost:
                await ws.send(json.dumps({"type": "stop"}))
                t0 = time.monotonic()
                while res.t_end is None and time.monotonic() - t0 < 120:
                    if not await pump():
                        break
                    await asyncio.sleep(0.02)
                await pump()
                if not sess.done:
                    lost = True
        except Exception:  # the connection broke under us
            lost = True
        await pump()
        with contextlib.suppress(Exception):
            await ws.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rx, 5)
        await pump()
        if sess.done:
            return
        if not lost:
            sess.problems.append("ended without done")
            return
        if len(sess.resumes) >= max_resumes:
            sess.problems.append(f"lost {max_resumes + 1} times")
            return
        # was an utterance open when it broke?
        started = {e["utterance"] for e in sess.events if e.get("type") == "speech_start"}
        finished = {e["utterance"] for e in sess.events if e.get("type") == "final"}
        sess._open_at_loss = bool(started - finished)
        sess.t_lost.append((time.monotonic(), None))
        attempt = 0
        _ = units_total


async def broken_session(url, audio, seconds, pause=0.3):
    """Starts a session, sends `seconds` of audio, then resets the connection (no close).
    Returns (session id, token, the newest seq received)."""
    ws, res, rx = await sc.connect(url)
    await ws.send(json.dumps({"type": "start", **audio.start_fields()}))
    ev = await sc.wait_for(res, lambda e: e.get("type") in ("ready", "error"), 60)
    if not ev or ev.get("type") != "ready":
        raise RuntimeError(f"no ready: {ev}")
    await sc.send_audio(ws, res, audio.head(seconds))
    await asyncio.sleep(pause)
    sc.abort_connection(ws)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(rx, 5)
    return ev["session"], ev["token"], res.last_seq


def word_errors(ref_text, hyp_text):
    r, h = rc.normalize(ref_text).split(), rc.normalize(hyp_text).split()
    return rc.edit_distance(r, h), len(r)


# ---------------------------------------------------------------------------
# sections


class Fleet:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.redis = Redis(tmp).start()
        self.instances = [Instance(args.server, args.model, f"i{k + 1}", sc.free_port(), self.redis.url,
                                   args.threads) for k in range(3)]
        for inst in self.instances:
            inst.start()
        self.hap = HAProxy(tmp, [(i.name, i.fixed_port) for i in self.instances]).start()
        wait_ready_in_haproxy(self.hap, self.instances)

    def by_name(self, name):
        return next(i for i in self.instances if i.name == name)

    def restart(self, inst):
        inst.stop()
        inst.start()
        wait_ready_in_haproxy(self.hap, [inst])

    def close(self):
        self.hap.stop()
        for inst in self.instances:
            inst.stop()
        self.redis.stop()


def run_sessions(url, sessions, on_running=None):
    """Streams every session concurrently at real-time pace (starts 0.3 s apart, so that
    leastconn spreads them); on_running(sessions) is a coroutine run alongside."""
    async def main():
        t0 = time.monotonic() + 0.5
        tasks = [asyncio.create_task(run_session(url, s, t0 + 0.3 * k)) for k, s in enumerate(sessions)]
        if on_running:
            await on_running(sessions)
        await asyncio.gather(*tasks)
    asyncio.run(main())


def make_sessions(clips, audios, prefix):
    return [Session(f"{prefix}{k}:{c['id']}", audios[c["id"]], {}) for k, c in enumerate(clips)]


def compare(ck, what, sessions, baseline):
    for s in sessions:
        base = baseline.get(s.audio_key)
        e, n = word_errors(base, s.transcript())
        ck.ok(f"{what}: {s.label} (instances {'>'.join(str(i) for i in s.instances)}): transcript within "
              f"{STREAM_TOL} words of its uninterrupted run",
              not s.problems and s.done and e <= STREAM_TOL,
              f"{e}/{n} words differ; problems {s.problems}; done {s.done}\n      got  {s.transcript()!r}"
              f"\n      base {base!r}")


def section_kill(fl, ck, clips, audios, baseline):
    victim = {}

    async def killer(sessions):
        await asyncio.sleep(1.5 + min(a.seconds for a in (s.audio for s in sessions)) * 0.45)
        counts = {}
        for s in sessions:
            if s.instances:
                counts[s.instances[0]] = counts.get(s.instances[0], 0) + 1
        name = max(counts, key=counts.get)
        victim["name"], victim["n"], victim["counts"] = name, counts[name], counts
        victim["t"] = time.monotonic()
        fl.by_name(name).kill()

    sessions = make_sessions(clips, audios, "k")
    for s, c in zip(sessions, clips):
        s.audio_key = c["id"]
    run_sessions(fl.hap.ws_url, sessions, killer)
    counts = victim.get("counts", {})
    ck.ok("kill: the sessions were spread over the 3 instances by HAProxy",
          len(counts) == 3 and max(counts.values()) <= 3, f"{counts}")
    moved = [s for s in sessions if s.instances and s.instances[0] == victim.get("name")]
    need = max(1, len(sessions) // 3)  # leastconn: as many as any other instance
    ck.ok(f"kill: SIGKILL of {victim.get('name')} took {len(moved)} sessions down with it (>= {need})",
          len(moved) >= need, f"{counts}")
    ck.ok("kill: each of them resumed on another instance",
          all(len(s.instances) >= 2 and s.instances[-1] not in (victim.get("name"), "same") and
              all(ev.get("restored") for ev, _ in s.resumes) for s in moved),
          "; ".join(f"{s.label}: {s.instances}" for s in moved))
    ck.ok("kill: at least one of them was mid-utterance when its instance died",
          any(s.open_utterance_at_loss() for s in moved))
    ck.ok("kill: the others never lost their connection",
          all(len(s.instances) == 1 for s in sessions if s not in moved),
          "; ".join(f"{s.label}: {s.instances}" for s in sessions if s not in moved))
    for s in moved:
        ev, held = s.resumes[0] if s.resumes else ({}, 0)
        ck.ok(f"kill: {s.label} resumed at offset {ev.get('offset')} >= the durable offset it held ({held}), "
              f"and utterances from {ev.get('restart_utterance')} restart",
              bool(s.resumes) and int(ev.get("offset", -1)) >= held and int(ev.get("restart_utterance", 0)) >= 1)
        if s.t_lost and s.t_lost[0][1]:
            print(f"    {s.label}: lost to resumed on {s.instances[-1]} in {s.t_lost[0][1] - s.t_lost[0][0]:.2f} s")
    compare(ck, "kill", sessions, baseline)
    # committed text never changes, even when the utterance goes on on another instance
    for s in moved:
        fins = {e["utterance"]: e.get("text", "") for e in s.events if e.get("type") == "final"}
        bad = [(e["utterance"], e.get("committed"), fins.get(e["utterance"]))
               for e in s.events if e.get("type") == "commit"
               and not fins.get(e["utterance"], "").startswith(e.get("committed", ""))]
        n_commits = sum(1 for e in s.events if e.get("type") == "commit")
        ck.ok(f"kill: {s.label}: each of its {n_commits} commits is the start of its utterance's final, across "
              f"the instances", not bad, f"{bad[:3]}")
    # utterance numbers: each final utterance once in the transcript, numbers increasing
    for s in moved:
        seqs = [e.get("seq") for e in s.events if "seq" in e]
        ck.ok(f"kill: {s.label}: seq keeps increasing across the instances (no reuse)",
              all(b > a for a, b in zip(seqs, seqs[1:])), f"{seqs[:40]}")
    fl.restart(fl.by_name(victim["name"]))


def section_sigterm(fl, ck, clips, audios, baseline):
    out = {}

    async def term(sessions):
        await asyncio.sleep(1.5 + min(s.audio.seconds for s in sessions) * 0.4)
        counts = {}
        for s in sessions:
            if s.instances:
                counts[s.instances[0]] = counts.get(s.instances[0], 0) + 1
        name = max(counts, key=counts.get)
        out["name"], out["t"] = name, time.monotonic()
        inst = fl.by_name(name)
        inst.signal(signal.SIGTERM)
        rc_ = await asyncio.get_running_loop().run_in_executor(None, inst.wait, 30)
        out["rc"], out["exit_s"] = rc_, time.monotonic() - out["t"]

    sessions = make_sessions(clips, audios, "t")
    for s, c in zip(sessions, clips):
        s.audio_key = c["id"]
    run_sessions(fl.hap.ws_url, sessions, term)
    inst = fl.by_name(out["name"])
    moved = [s for s in sessions if s.instances and s.instances[0] == out["name"]]
    ck.ok(f"sigterm: {out['name']} exited 0 within the drain bound (20 s)",
          out.get("rc") == 0 and out.get("exit_s", 99) < 20, f"rc {out.get('rc')} after {out.get('exit_s', 0):.1f} s")
    ck.ok("sigterm: its sessions were told to reconnect and resumed on another instance",
          moved and all(any(e.get("type") == "reconnect" for e in s.events) and len(s.instances) >= 2
                        and s.instances[-1] != out["name"] for s in moved),
          "; ".join(f"{s.label}: {s.instances}" for s in moved))
    # (>=: a session restored elsewhere earlier in this test may still sit detached here, within
    # --resume-grace-s, and is moved too)
    ck.ok("sigterm: the server logged each move", len(inst.log_lines("draining: moved")) >= len(moved),
          f"{len(inst.log_lines('draining: moved'))} lines for {len(moved)} sessions")
    compare(ck, "sigterm", sessions, baseline)
    fl.restart(inst)


def section_redis(fl, ck, clips, audios, baseline):
    state = {}

    async def outage(sessions):
        await asyncio.sleep(1.5 + min(s.audio.seconds for s in sessions) * 0.3)
        fl.redis.stop()
        state["down_at"] = time.monotonic()
        await asyncio.sleep(2.5)  # the writers' PINGs (1 s) notice
        state["readyz_down"] = [sc.http_get(i.http_url + "/readyz", timeout=2)[0:2] for i in fl.instances]
        state["metrics_down"] = [i.metrics() for i in fl.instances]
        # a resume that needs Redis now (a session this instance does not hold)
        ws = await sc.open_ws(fl.instances[0].ws_url)
        res = sc.StreamResult()
        rx = asyncio.create_task(sc._receiver(ws, res))
        await ws.send(json.dumps({"type": "resume", "session": "s99-deadbeef", "token": "x" * 32, "last_seq": 0}))
        state["resume_down"] = await sc.wait_for(res, lambda e: e.get("type") in ("resumed", "error"), 10)
        with contextlib.suppress(Exception):
            await ws.close()
            await asyncio.wait_for(rx, 5)
        await asyncio.sleep(1.0)
        fl.redis.start()
        state["up_at"] = time.monotonic()
        await asyncio.sleep(2.5)  # the writers reconnect (PING each second) and write again
        state["keys_after"] = {s.label: fl.redis.get(f"sotto:session:{s.session}") is not None
                               for s in sessions if s.session and not s.done}

    m0 = [i.metrics() for i in fl.instances]
    sessions = make_sessions(clips, audios, "r")
    for s, c in zip(sessions, clips):
        s.audio_key = c["id"]
    run_sessions(fl.hap.ws_url, sessions, outage)
    time.sleep(2.0)
    m1 = [i.metrics() for i in fl.instances]
    ck.ok("redis: /readyz answered 503 'redis unreachable' on every instance while Redis was away",
          all(st == 503 and "redis" in body for st, body in state["readyz_down"]), f"{state['readyz_down']}")
    ck.ok("redis: /readyz is 200 again once it is back",
          all(sc.http_get(i.http_url + "/readyz")[0] == 200 for i in fl.instances))
    ck.ok("redis: sotto_redis_connected was 0 while away, 1 after",
          all(m.get("sotto_redis_connected") == 0 for m in state["metrics_down"]) and
          all(m.get("sotto_redis_connected") == 1 for m in m1))
    errs = sum(b.get("sotto_checkpoint_errors_total", 0) - a.get("sotto_checkpoint_errors_total", 0)
               for a, b in zip(m0, m1))
    logged = [len(i.log_lines("redis: unreachable")) for i in fl.instances]
    ck.ok("redis: every server logged once that Redis was unreachable and checkpoints wait",
          logged == [1, 1, 1], f"{logged} log lines; {errs} failed writes counted")
    ck.ok("redis: every server logged that Redis is reachable again",
          [len(i.log_lines("redis: reachable again")) for i in fl.instances] == [1, 1, 1])
    ka = state.get("keys_after", {})
    ck.ok("redis: the running sessions' checkpoints were written again into the restarted (empty) Redis",
          ka and all(ka.values()), f"{ka}")
    ck.ok("redis: no session lost its connection", all(len(s.instances) == 1 for s in sessions),
          "; ".join(f"{s.label}: {s.instances}" for s in sessions))
    d = state.get("resume_down") or {}
    ck.ok("redis: a resume needing Redis while it was away got store_unavailable",
          d.get("type") == "error" and d.get("code") == "store_unavailable", f"{d}")
    ck.ok("redis: every instance is still running", all(i.alive() for i in fl.instances))
    compare(ck, "redis", sessions, baseline)
    # the sessions' last checkpoints: written after Redis came back? A finished session's
    # checkpoint is deleted, so look at what the writers did after the outage.
    written_after = sum(b.get("sotto_checkpoints_written_total", 0) - a.get("sotto_checkpoints_written_total", 0)
                        for a, b in zip(state["metrics_down"], m1))
    ck.ok("redis: checkpoints were written again after the restart", written_after > 0, f"{written_after}")


def section_resume(fl, ck, audios, clips):
    """Cross-instance rules, without HAProxy (direct to instances)."""
    a = audios[clips[0]["id"]]
    i1, i2 = fl.instances[0], fl.instances[1]

    async def main():
        sid, tok, _ = await broken_session(i1.ws_url, a, 3.0, pause=0.5)
        out = {"stored": fl.redis.get(f"sotto:session:{sid}")}
        for label, msg in (("wrong token", {"session": sid, "token": "0" * 32}),
                           ("unknown session", {"session": "s1-00000000", "token": tok})):
            ws2, r2, rx2 = await sc.connect(i2.ws_url)
            await ws2.send(json.dumps({"type": "resume", "last_seq": 0, **msg}))
            out[label] = await sc.wait_for(r2, lambda e: e.get("type") in ("resumed", "error"), 10)
            with contextlib.suppress(Exception):
                await ws2.close()
                await asyncio.wait_for(rx2, 5)
        # checkpoints that are not what a server wrote: refused as unknown, never a crash
        for label, doc in (("not JSON", "{\"v\":1,"), ("empty object", "{}"),
                           ("wrong types", json.dumps({"v": 1, "epoch": "x", "token": tok, "owner": -1,
                                                       "start": [], "finals": {}, "context": 3})),
                           ("offsets past the end", json.dumps({"v": 1, "epoch": 0, "id": "s9-bad", "token": tok,
                                                                "owner": -1, "start": {"type": "start"},
                                                                "next_seq": 1, "units": 5, "units_sample": 9e15,
                                                                "durable": 1, "next_utterance": 1,
                                                                "context": [], "finals": []}))):
            fl.redis.command("SET", "sotto:session:s9-bad", doc)
            ws4, r4, rx4 = await sc.connect(i2.ws_url)
            await ws4.send(json.dumps({"type": "resume", "session": "s9-bad", "token": tok, "last_seq": 0}))
            out["garbage " + label] = await sc.wait_for(r4, lambda e: e.get("type") in ("resumed", "error"), 10)
            with contextlib.suppress(Exception):
                await ws4.close()
                await asyncio.wait_for(rx4, 5)
        # until then i1 keeps the detached session (it checks once a second whether another
        # instance restored it, and none has)
        out["let_go_before"] = i1.log_lines(sid, "letting go")
        # the right token on the other instance: restored there; then finished
        ws3, r3, rx3 = await sc.connect(i2.ws_url)
        await ws3.send(json.dumps({"type": "resume", "session": sid, "token": tok, "last_seq": 0}))
        out["restore"] = await sc.wait_for(r3, lambda e: e.get("type") in ("resumed", "error"), 30)
        off = int((out["restore"] or {}).get("offset", 0))
        await sc.send_audio(ws3, r3, a.from_unit(off))
        await sc.finish(ws3, rx3)
        out["r3"] = r3
        out["sid"] = sid
        out["token"] = tok
        return out

    out = asyncio.run(main())
    for label in ("wrong token", "unknown session"):
        e = out[label] or {}
        ck.ok(f"resume: {label} on another instance: unknown_session", e.get("code") == "unknown_session", f"{e}")
    for label in ("not JSON", "empty object", "wrong types", "offsets past the end"):
        e = out["garbage " + label] or {}
        ck.ok(f"resume: a checkpoint in Redis that is {label}: unknown_session, the server goes on",
              e.get("code") == "unknown_session" and i2.alive(), f"{e}")
    r = out["restore"] or {}
    ck.ok("resume: the right token on another instance restores the session (replayed finals counted, "
          "events_lost said)", r.get("type") == "resumed" and r.get("restored") is True and
          r.get("instance") == i2.name and "events_lost" in r, f"{r}")
    ck.ok("resume: the restored session sends no second `ready` (it would tell the client to start over)",
          not out["r3"].of_type("ready"), f"{out['r3'].summary()}")
    fins = out["r3"].of_type("final")
    ck.ok("resume: the restored session finished with done and a transcript",
          out["r3"].done is not None and fins, f"{out['r3'].summary()}")
    stored = json.loads(out["stored"]) if out["stored"] else {}
    ck.ok("resume: the session's checkpoint was in Redis after its connection broke (token, start, offsets)",
          (stored.get("id") == out["sid"] and "start" in stored and "durable" in stored),
          f"{str(out['stored'])[:300]}")
    time.sleep(1.0)
    # restored (epoch 1) and finished on i2: a tombstone with that epoch, so that i1 lets go
    # of its copy even if the session ended before i1 looked (server/persist.h)
    left = fl.redis.get(f"sotto:session:{out['sid']}")
    tomb = json.loads(left) if left else {}
    ck.ok("resume: a finished session's checkpoint is replaced by a tombstone with its epoch",
          tomb.get("finished") is True and tomb.get("epoch") == 1 and "token" not in tomb, f"{left}")

    async def resume_finished():
        ws, r, rx = await sc.connect(fl.instances[2].ws_url)
        await ws.send(json.dumps({"type": "resume", "session": out["sid"], "token": out["token"], "last_seq": 0}))
        e = await sc.wait_for(r, lambda e: e.get("type") in ("resumed", "error"), 10)
        with contextlib.suppress(Exception):
            await ws.close()
            await asyncio.wait_for(rx, 5)
        return e or {}

    e = asyncio.run(resume_finished())
    ck.ok("resume: the finished session cannot be resumed from its tombstone (unknown_session, "
          "not a malformed checkpoint)", e.get("code") == "unknown_session" and
          not fl.instances[2].log_lines(out["sid"], "malformed"), f"{e}")
    # the instance that held it lets go of it once another has restored it, not at the end of
    # --resume-grace-s (30 s here)
    t0 = time.monotonic()
    while not i1.log_lines(out["sid"], "letting go") and time.monotonic() - t0 < 5:
        time.sleep(0.2)
    lines = i1.log_lines(out["sid"], "letting go")
    ck.ok("resume: the instance that held the session kept it while nobody had restored it",
          not out["let_go_before"], f"{out['let_go_before']}")
    ck.ok("resume: ... and let go of it once another instance restored it (log, sotto_sessions_let_go_total)",
          len(lines) == 1 and i1.metrics().get("sotto_sessions_let_go_total", 0) >= 1,
          f"{lines}; {[l for l in i1.log().splitlines() if out['sid'] in l][-5:]}")


def section_feeds(fl, ck, clip, audio, n_viewers=100):
    """A feed published on i1, followed by viewers on i2 and i3 (through Redis)."""
    i1, i2, i3 = fl.instances
    name = "fleet-feed"
    state = {}

    async def viewer(inst, k, delay):
        await asyncio.sleep(delay)
        url = f"ws://127.0.0.1:{inst.port}/v1/feeds/{name}"
        res = sc.StreamResult()
        try:
            ws = await sc.open_ws(url, timeout=20)
        except Exception as e:
            res.exception = e
            return res
        rx = asyncio.create_task(sc._receiver(ws, res))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rx, 120)
        with contextlib.suppress(Exception):
            await ws.close()
        return res

    async def main():
        ws, res, rx = await sc.connect(i1.ws_url)
        await ws.send(json.dumps({"type": "start", **audio.start_fields(), "feed": name}))
        ev = await sc.wait_for(res, lambda e: e.get("type") in ("ready", "error"), 60)
        if not ev or ev.get("type") != "ready":
            raise RuntimeError(f"publisher: no ready: {ev}")
        # the name is the fleet's: another instance refuses it while this session is live
        ws2, r2, rx2 = await sc.connect(i2.ws_url)
        await ws2.send(json.dumps({"type": "start", **audio.start_fields(), "feed": name}))
        state["taken"] = await sc.wait_for(r2, lambda e: e.get("type") in ("ready", "error"), 30)
        await sc.finish(ws2, rx2)
        # early viewers, then late ones during the speech (history), on i2 and i3
        vs = [asyncio.create_task(viewer(i2 if k % 2 == 0 else i3, k, 0.0 if k < n_viewers // 2 else
                                         1.0 + (k % 10) * audio.seconds / 12.0)) for k in range(n_viewers)]
        await asyncio.sleep(1.0)
        await sc.send_audio(ws, res, audio, realtime=True)
        await sc.finish(ws, rx)
        state["viewers"] = await asyncio.gather(*vs)
        # after the end: the whole text as history, then done... on instances that
        # never held the session
        state["after"] = await asyncio.gather(*(viewer(i2 if k % 2 else i3, k, 0.0) for k in range(10)))
        state["publisher"] = res

    asyncio.run(main())
    t = state["taken"] or {}
    ck.ok("feeds: another instance refuses the name while it is live (feed_taken)",
          t.get("type") == "error" and t.get("code") == "feed_taken", f"{t}")
    pub = state["publisher"]
    pub_finals = [(e["utterance"], e["text"].strip()) for e in pub.of_type("final") if e.get("text", "").strip()]
    ck.ok("feeds: the publisher's session finished with finals", pub.done is not None and pub_finals,
          f"{pub.summary()}")
    bad = []
    for k, r in enumerate(state["viewers"]):
        evs = [e for _, e in r.events]
        hist = [e for e in evs if e.get("type") == "feed"]
        if r.exception or not hist:
            bad.append(f"viewer {k}: {r.exception or 'no feed history event'} {[e.get('type') for e in evs[:3]]}")
            continue
        seqs = [e.get("seq") for e in evs if "seq" in e]
        if any(b <= a for a, b in zip(seqs, seqs[1:])):
            bad.append(f"viewer {k}: seq not increasing")
        got = [(f["utterance"], f["text"].strip()) for f in hist[0].get("finals", [])]
        got += [(e["utterance"], e["text"].strip()) for e in evs if e.get("type") == "final" and e.get("text", "").strip()]
        if got != pub_finals:
            bad.append(f"viewer {k}: finals (history + live) {got} != the publisher's {pub_finals}")
        if not any(e.get("type") == "done" for e in evs):
            bad.append(f"viewer {k}: no done")
    after = []
    for r in state["after"]:
        evs = [e for _, e in r.events]
        h = [e for e in evs if e.get("type") == "feed"]
        after.append([(f["utterance"], f["text"].strip()) for f in h[0].get("finals", [])] if h else None)
    ck.ok("feeds: 10 viewers after the end (i2, i3) got every final as history", all(a == pub_finals for a in after),
          f"{after[:2]} vs {pub_finals}")
    late = sum(1 for r in state["viewers"] + state["after"]
               if any(e.get("type") == "feed" and e.get("finals") for _, e in r.events))
    ck.ok(f"feeds: {n_viewers} viewers on i2 and i3 got the finals in order (history + live), once each, and done",
          not bad, "; ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""))
    ck.ok("feeds: some viewers came late and got the earlier finals as history", late > 0, f"{late}")
    partials = sum(1 for r in state["viewers"] for _, e in r.events if e.get("type") == "partial")
    ck.ok("feeds: viewers elsewhere get partials as they are generated", partials > 0, f"{partials}")
    time.sleep(0.5)
    vtts = [sc.http_get(f"{i.http_url}/v1/feeds/{name}.vtt") for i in (i1, i2, i3)]
    ck.ok("feeds: /v1/feeds/NAME.vtt is the same from every instance",
          all(st == 200 for st, _ in vtts) and len({b for _, b in vtts}) == 1 and "WEBVTT" in vtts[0][1],
          f"{[(st, b[:80]) for st, b in vtts]}")
    m = i1.metrics()
    ck.ok("feeds: the publisher wrote the feed to Redis", m.get("sotto_feed_redis_writes_total", 0) > 0
          and m.get("sotto_feed_redis_dropped_total", 1) == 0, f"{m.get('sotto_feed_redis_writes_total')}")


def section_keys(args, tmp, ck, audio):
    """API keys across the fleet: tokens minted on one instance work on the others, a
    session cannot be resumed with another key on another instance, feed names belong to
    their first key fleet-wide."""
    import urllib.request
    k1, k2 = "sk-fleet-key-one-0001", "sk-fleet-key-two-0002"
    redis = Redis(tmp).start()
    insts = [Instance(args.server, args.model, f"k{i + 1}", sc.free_port(), redis.url, 1,
                      extra=["--api-key", k1, "--api-key", k2]) for i in range(2)]
    try:
        for i in insts:
            i.start()
        a, b = insts
        req = urllib.request.Request(a.http_url + "/v1/realtime/client_secrets", data=b"", method="POST",
                                     headers={"Authorization": f"Bearer {k1}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            token = json.loads(r.read())["value"]

        async def first_event(url, msg):
            res = sc.StreamResult()
            try:
                ws = await sc.open_ws(url)
            except Exception as e:
                return {"type": "<no connection>", "why": str(e)}
            rx = asyncio.create_task(sc._receiver(ws, res))
            if msg:  # a refused connection may be closed (1008) before this is sent
                with contextlib.suppress(websockets.ConnectionClosed):
                    await ws.send(json.dumps(msg))
            ev = await sc.wait_for(res, lambda e: e.get("type") in ("ready", "resumed", "error"), 30)
            with contextlib.suppress(Exception):
                await ws.close()
                await asyncio.wait_for(rx, 5)
            return ev or {}

        async def main():
            out = {}
            start = {"type": "start", **audio.start_fields()}
            out["token elsewhere"] = await first_event(b.ws_url + f"?token={token}", start)
            out["bogus token"] = await first_event(b.ws_url + "?token=ek_" + "0" * 32, start)
            # a session of key 1 on a, its connection broken
            sid, tok, last_seq = await broken_session(a.ws_url + f"?api_key={k1}", audio, 2.0)
            resume = {"type": "resume", "session": sid, "token": tok, "last_seq": last_seq}
            out["resume, other key"] = await first_event(b.ws_url + f"?api_key={k2}", resume)
            out["resume, same key's token"] = await first_event(b.ws_url + f"?token={token}", resume)
            # a feed name published with key 1 on a is key 1's on b too
            ws, res, rx = await sc.connect(a.ws_url + f"?api_key={k1}")
            await ws.send(json.dumps({**start, "feed": "keyed-feed"}))
            await sc.wait_for(res, lambda e: e.get("type") in ("ready", "error"), 60)
            await sc.send_audio(ws, res, audio.head(1.0))
            await sc.finish(ws, rx)
            out["feed, other key"] = await first_event(b.ws_url + f"?api_key={k2}", {**start, "feed": "keyed-feed"})
            out["feed, same key"] = await first_event(b.ws_url + f"?api_key={k1}", {**start, "feed": "keyed-feed"})
            return out

        out = asyncio.run(main())
    finally:
        for i in insts:
            i.stop()
        redis.stop()
    e = out["token elsewhere"]
    ck.ok("keys: a client token minted on one instance starts a session on another", e.get("type") == "ready", f"{e}")
    e = out["bogus token"]
    ck.ok("keys: an unknown token is refused there (unauthorized)", e.get("code") == "unauthorized", f"{e}")
    e = out["resume, other key"]
    ck.ok("keys: another key cannot resume the session on another instance (unknown_session)",
          e.get("code") == "unknown_session", f"{e}")
    e = out["resume, same key's token"]
    ck.ok("keys: the session's own key (as a token) restores it on another instance",
          e.get("type") == "resumed" and e.get("restored") is True, f"{e}")
    e = out["feed, other key"]
    ck.ok("keys: a feed name is its first key's on every instance (feed_owned)", e.get("code") == "feed_owned", f"{e}")
    e = out["feed, same key"]
    ck.ok("keys: ... and its key publishes it again on another instance", e.get("type") == "ready", f"{e}")


def section_page(fl, ck, clip, base_text, chromium):
    """The dictation page through HAProxy (headless Chromium, fake microphone); the instance
    holding its session is killed mid-utterance; the page resumes on another one."""
    from playwright.sync_api import sync_playwright
    wav = os.path.join(fl.tmp, "page-mic.wav")
    subprocess.run(["sox", clip["file"], "-r", "48000", "-c", "1", wav, "pad", "0", "2"], check=True)
    url = f"http://127.0.0.1:{fl.hap.port}/"
    holder, text, resumes, status, logs = None, "", 0, "", []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=[
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}%noloop", "--autoplay-policy=no-user-gesture-required"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: logs.append(f"{m.type}: {m.text}"))
            page.goto(url)
            t0 = time.monotonic()
            page.click("#start")
            page.wait_for_function("document.querySelector('#status').dataset.kind === 'live'", timeout=30000)
            time.sleep(max(0.0, 1.0 + clip["seconds"] * 0.45 - (time.monotonic() - t0)))
            for inst in fl.instances:
                with contextlib.suppress(Exception):
                    if inst.metrics().get("sotto_sessions_active", 0) >= 1:
                        holder = inst
            if holder:
                holder.kill()
            time.sleep(max(0.0, clip["seconds"] + 3.0 - (time.monotonic() - t0)))
            page.click("#start")  # Stop
            page.wait_for_function("document.querySelector('#status').textContent === 'stopped'", timeout=60000)
            text = page.evaluate("window.sotto.transcript.text()")
            resumes = page.evaluate("window.sotto.state.resumes")
            status = page.inner_text("#status")
        finally:
            browser.close()
    ck.ok("page: the instance holding its session was killed", holder is not None)
    e, n = word_errors(base_text, text)
    ck.ok(f"page: it resumed through HAProxy and its transcript is within {PAGE_TOL} words of an "
          f"uninterrupted run", resumes >= 1 and e <= PAGE_TOL and status == "stopped",
          f"resumes {resumes}, {e}/{n}: {text!r} vs {base_text!r}; console {logs[-5:]}")
    if holder:
        fl.restart(holder)


def section_full(args, tmp, ck, audio):
    """Every instance full: what deploy/README.md says a client sees."""
    redis = Redis(tmp).start()
    insts = [Instance(args.server, args.model, f"f{i + 1}", sc.free_port(), redis.url, 1,
                      extra=["--max-sessions", "1"]) for i in range(2)]
    hap = None
    try:
        for i in insts:
            i.start()
        hap = HAProxy(tmp, [(i.name, i.fixed_port) for i in insts]).start()
        wait_ready_in_haproxy(hap, insts)

        async def main():
            held, evs = [], []
            for k in range(3):  # one slot per instance: the third finds both full
                ws, res, rx = await sc.connect(hap.ws_url)
                # a full instance may refuse (overloaded, then close) before the start is sent
                with contextlib.suppress(websockets.ConnectionClosed):
                    await ws.send(json.dumps({"type": "start", **audio.start_fields()}))
                evs.append(await sc.wait_for(res, lambda e: e.get("type") in ("ready", "error"), 60))
                held.append((ws, rx))
                await asyncio.sleep(0.3)
            for ws, rx in held:
                await sc.finish(ws, rx, stop=True, timeout=20)
            for i in insts:
                i.stop()
            await asyncio.sleep(1.5)  # HAProxy's checks see them gone
            try:
                ws = await sc.open_ws(hap.ws_url, timeout=10)
                await ws.close()
                down = "connected"
            except Exception as e:
                down = str(e)
            return evs, down

        evs, down = asyncio.run(main())
    finally:
        if hap:
            hap.stop()
        for i in insts:
            i.stop()
        redis.stop()
    ready = [e for e in evs if e and e.get("type") == "ready"]
    ck.ok("full: with one session slot per instance, the first two sessions start, one on each instance",
          len(ready) == 2 and len({e.get("instance") for e in ready}) == 2, f"{evs}")
    last = evs[2] or {}
    ck.ok("full: the third gets overloaded (fatal) from the instance it reached",
          last.get("code") == "overloaded" and last.get("fatal") is True, f"{last}")
    ck.ok("full: with no instance up, the WebSocket upgrade through HAProxy fails with HTTP 503",
          "503" in down, down)


def section_mic(fl, ck, clip):
    """sotto-mic through HAProxy; its instance is killed mid-utterance; it resumes elsewhere."""
    out0, out1 = os.path.join(fl.tmp, "mic0.txt"), os.path.join(fl.tmp, "mic1.txt")

    def mic(out):
        return subprocess.Popen([fl.args.mic, "--server", fl.hap.ws_url, "--file", clip["file"], "--output", out,
                                 "--quiet", "--log-level", "info"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    p = mic(out0)
    _, err0 = p.communicate(timeout=120)
    ck.ok("mic: an uninterrupted run through HAProxy exits 0", p.returncode == 0, err0[-1500:])
    p = mic(out1)
    time.sleep(1.0 + clip["seconds"] * 0.45)
    holder = None
    for inst in fl.instances:
        with contextlib.suppress(Exception):
            if inst.metrics().get("sotto_sessions_active", 0) >= 1:
                holder = inst
    if holder:
        holder.kill()
    try:
        _, err1 = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err1 = p.communicate()
    ck.ok("mic: its instance was found and killed", holder is not None)
    ck.ok("mic: sotto-mic resumed on another instance and exited 0",
          p.returncode == 0 and "on another instance" in err1, err1[-2000:])
    t0 = open(out0).read() if os.path.exists(out0) else ""
    t1 = open(out1).read() if os.path.exists(out1) else ""
    e, n = word_errors(t0, t1)
    ck.ok(f"mic: its --output is within {STREAM_TOL} words of the uninterrupted run", e <= STREAM_TOL and n > 0,
          f"{e}/{n}: {t1!r} vs {t0!r}")
    lines = [line for line in t1.splitlines() if line.strip()]
    ck.ok("mic: no final line written twice (replayed finals are skipped)", len(lines) == len(set(lines)), f"{lines}")
    if holder:
        fl.restart(holder)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per instance (3 share this machine)")
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--mic", help="sotto-mic binary (the mic section)")
    ap.add_argument("--viewers", type=int, default=100)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--only", default="resume,feeds,kill,sigterm,redis,page,keys,full,mic")
    args = ap.parse_args()
    for tool in ("haproxy", "redis-server"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install haproxy redis-server)")
    only = set(args.only.split(","))
    rows = [r for r in rc.load_manifest(args.manifest, languages={"en"}) if 9.0 <= r["seconds"] <= 16.0]
    rows.sort(key=lambda r: r["id"])
    clips = rows[:args.sessions]
    tmp = tempfile.mkdtemp(prefix="sotto-fleet-")
    audios = {}
    for k, c in enumerate(clips):  # PCM 16 kHz, PCM 48 kHz and Opus: offsets in frames and packets
        variant = ("s16_16k", "opus", "s16_48k")[k % 3]
        audios[c["id"]] = sc.load_clip(c["file"], variant, tmp)
    print(f"fleet: 3 instances x {args.threads} thread(s), {args.model}, {len(clips)} clips "
          f"({', '.join(c['id'] + ' %.1fs' % c['seconds'] for c in clips)}); on {os.cpu_count()} cores")
    ck = Checker()
    fl = Fleet(args, tmp)
    try:
        if "resume" in only:
            section_resume(fl, ck, audios, clips)
        if only & {"kill", "sigterm", "redis", "page"}:
            # the uninterrupted runs: the same clips at the same pace through HAProxy
            base = make_sessions(clips, audios, "b")
            run_sessions(fl.hap.ws_url, base)
            baseline = {}
            for s, c in zip(base, clips):
                baseline[c["id"]] = s.transcript()
                e, n = word_errors(c["text"], s.transcript())
                ck.ok(f"baseline {s.label} on {s.instances}: clean run", s.done and not s.problems
                      and len(s.instances) == 1, f"{s.problems}")
                print(f"    baseline {c['id']}: {e}/{n} word errors vs the reference")
        if "kill" in only:
            section_kill(fl, ck, clips, audios, baseline)
        if "sigterm" in only:
            section_sigterm(fl, ck, clips[:3], audios, baseline)
        if "redis" in only:
            section_redis(fl, ck, clips[:3], audios, baseline)
        if "feeds" in only:
            feed_clip = rows[3]  # 15 s: viewers join during it
            section_feeds(fl, ck, feed_clip, sc.load_clip(feed_clip["file"], "s16_16k", tmp), args.viewers)
        if "page" in only and os.path.exists(args.chromium):
            section_page(fl, ck, clips[2], baseline[clips[2]["id"]], args.chromium)
        if "full" in only:
            section_full(args, tmp, ck, audios[clips[0]["id"]])
        if "keys" in only:
            section_keys(args, tmp, ck, audios[clips[0]["id"]])
        if "mic" in only and args.mic:
            section_mic(fl, ck, clips[2])
    finally:
        fl.close()
    ck.ok("no sanitizer report in the servers' logs", not sc.SANITIZER_REPORTS,
          "\n".join(sc.SANITIZER_REPORTS)[:3000])
    print(f"\n{ck.count - len(ck.failed)}/{ck.count} checks passed")
    if ck.failed:
        print("FAILED: " + "; ".join(ck.failed))
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
