#!/usr/bin/env python3
"""Several sotto-server instances sharing Redis (issue 16): what a resume costs, what a
checkpoint costs, and what 1, 2 or 3 instances on this machine serve.

  .venv/bin/python bench/bench_fleet.py --server build/sotto-server --model models/tiny.en \\
      --manifest ../shared/audio/manifest.tsv [--trials 10] [--loads 3,6]

1. Resume latency: a session on instance A loses its connection (reset, no close);
   the client reconnects and sends `resume` to A again (served from memory) or to B
   (restored from Redis). Measured: from the reset to the `resumed` event, and to the
   first event after it; the peer is the same-instance resume, in the same run.
2. Checkpoint cost: from the servers' /metrics after real-time sessions: the time a
   session's thread spends building and queueing a checkpoint, the writer's Redis round
   trip, bytes per checkpoint, checkpoints per final.
3. Fleet throughput: L concurrent real-time sessions through HAProxy (leastconn) on
   fleets of 1, 2 and 3 instances. All instances share this machine's cores, so more
   instances add no compute: this measures the fleet's overhead, not scale-out.
   Reported: the final latency (speech_end -> final), sessions refused, audio dropped,
   word errors against the references.

Timing goals live here, not in the tests.
"""
import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "ref"))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402
import test_fleet as tf  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


async def one_resume(a_url, b_url, audio):
    """(ms to resumed, ms to the first event after it, restored?) for one trial."""
    ws, res, rx = await sc.connect(a_url)
    await ws.send(json.dumps({"type": "start", **audio.start_fields()}))
    ev = await sc.wait_for(res, lambda e: e.get("type") in ("ready", "error"), 60)
    if not ev or ev.get("type") != "ready":
        raise RuntimeError(f"no ready: {ev}")
    sid, tok = ev["session"], ev["token"]
    await sc.send_audio(ws, res, audio.head(3.0))
    await sc.wait_for(res, lambda e: e.get("type") == "ack" and e.get("offset", 0) >= audio.head(3.0).total_units, 10)
    await asyncio.sleep(0.3)
    last_seq = res.last_seq
    t0 = time.monotonic()
    sc.abort_connection(ws)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(rx, 5)
    t_resumed = t_next = None
    restored = None
    for _ in range(100):
        ws2, r2, rx2 = await sc.connect(b_url)
        await ws2.send(json.dumps({"type": "resume", "session": sid, "token": tok, "last_seq": last_seq}))
        e = await sc.wait_for(r2, lambda e: e.get("type") in ("resumed", "error"), 10)
        if e and e.get("type") == "resumed":
            t_resumed = time.monotonic()
            restored = bool(e.get("restored"))
            off = int(e.get("offset", 0))
            rest = audio.from_unit(off)
            await ws2.send(rest.messages[0])
            nxt = await sc.wait_for(r2, lambda x: x.get("seq", 0) > e.get("seq", 0), 10)
            if nxt:
                t_next = time.monotonic()
            await sc.send_audio(ws2, r2, rest.from_unit(rest.units[0]))
            await sc.finish(ws2, rx2)
            break
        await ws2.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rx2, 5)
        await asyncio.sleep(0.01)
    if t_resumed is None:
        raise RuntimeError("resume never succeeded")
    return ((t_resumed - t0) * 1e3, ((t_next or t_resumed) - t0) * 1e3, restored)


def resume_latency(fl, audio, trials):
    i1, i2 = fl.instances[0], fl.instances[1]
    out = {}
    for label, b in (("same instance (memory)", i1), ("other instance (Redis)", i2)):
        rows = [asyncio.run(one_resume(i1.ws_url, b.ws_url, audio)) for _ in range(trials)]
        out[label] = rows
    return out


def checkpoint_cost(fl, clips, audios):
    m0 = [i.metrics() for i in fl.instances]
    sessions = tf.make_sessions(clips, audios, "c")
    tf.run_sessions(fl.hap.ws_url, sessions)
    time.sleep(1.0)
    m1 = [i.metrics() for i in fl.instances]

    def d(key):
        return sum(b.get(key, 0) - a.get(key, 0) for a, b in zip(m0, m1))
    finals = sum(len([e for e in s.events if e.get("type") == "final"]) for s in sessions)
    n = d("sotto_checkpoint_seconds_count")
    writes = d("sotto_checkpoints_written_total")
    return {"checkpoints": n, "finals": finals, "build_us": 1e6 * d("sotto_checkpoint_seconds_sum") / max(n, 1),
            "bytes": d("sotto_checkpoint_bytes_total") / max(n, 1), "writes": writes,
            "write_us": 1e6 * d("sotto_checkpoint_write_seconds_total") / max(writes, 1)}


def fleet_run(args, tmp, n_inst, clips, audios, load):
    """L sessions through HAProxy on a fleet of n_inst instances."""
    redis = tf.Redis(tmp).start()
    threads = max(1, (os.cpu_count() or 2) // n_inst)
    insts = [tf.Instance(args.server, args.model, f"i{k + 1}", sc.free_port(), redis.url, threads)
             for k in range(n_inst)]
    try:
        for i in insts:
            i.start()
        hap = tf.HAProxy(tmp, [(i.name, i.fixed_port) for i in insts]).start()
        tf.wait_ready_in_haproxy(hap, insts)
        picks = [clips[k % len(clips)] for k in range(load)]
        sessions = [tf.Session(f"f{k}:{c['id']}", audios[c["id"]], {}) for k, c in enumerate(picks)]
        m0 = [i.metrics() for i in insts]
        t0 = time.monotonic()
        tf.run_sessions(hap.ws_url, sessions)
        wall = time.monotonic() - t0
        m1 = [i.metrics() for i in insts]
        hap.stop()
    finally:
        for i in insts:
            i.stop()
        redis.stop()
    lat, errs, words, refused = [], 0, 0, 0
    for s, c in zip(sessions, picks):
        e, n = tf.word_errors(c["text"], s.transcript())
        errs += e
        words += n
        refused += any(x.get("type") == "error" and x.get("code") == "overloaded" for x in s.events)
        lat += s.final_latencies()
    dropped = sum(b.get("sotto_audio_dropped_seconds_total", 0) - a.get("sotto_audio_dropped_seconds_total", 0)
                  for a, b in zip(m0, m1))
    return {"threads": threads, "lat": lat, "wer": 100.0 * errs / max(words, 1), "refused": refused,
            "dropped": dropped, "wall": wall, "done": sum(s.done for s in sessions)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--loads", default="3,6")
    args = ap.parse_args()
    args.threads = 1
    args.mic = None
    rows = [r for r in rc.load_manifest(args.manifest, languages={"en"}) if 9.0 <= r["seconds"] <= 16.0]
    rows.sort(key=lambda r: r["id"])
    clips = rows[:6]
    tmp = tempfile.mkdtemp(prefix="sotto-bench-fleet-")
    audios = {c["id"]: sc.load_clip(c["file"], "s16_16k", tmp) for c in clips}
    print(f"bench_fleet: {platform.node()}, {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
          f"model {args.model}, clips {', '.join(c['id'] for c in clips)} (PCM 16 kHz, 100 ms messages, real time)")
    print("All instances, HAProxy and Redis share this machine.\n")

    fl = tf.Fleet(args, tmp)
    try:
        lat = resume_latency(fl, audios[clips[0]["id"]], args.trials)
        ck = checkpoint_cost(fl, clips[:3], audios)
    finally:
        fl.close()
    print(f"1. Resume latency, {args.trials} trials each (reset -> `resumed`; -> first event after it), ms")
    print("| resume on | median | p90 | first event, median | restored |")
    print("|---|---:|---:|---:|---|")
    med = {}
    for label, rows_ in lat.items():
        r = [x[0] for x in rows_]
        nxt = [x[1] for x in rows_]
        med[label] = statistics.median(r)
        print(f"| {label} | {statistics.median(r):.1f} | {pct(r, 90):.1f} | {statistics.median(nxt):.1f} | "
              f"{sum(x[2] for x in rows_)}/{len(rows_)} |")
    labels = list(med)
    print(f"ratio other/same (median): {med[labels[1]] / med[labels[0]]:.2f}x\n")
    print("2. Checkpoint cost (3 real-time sessions through HAProxy, 3 instances x 1 thread)")
    print(f"   {ck['checkpoints']:.0f} checkpoints for {ck['finals']} finals; build+queue on the session's thread "
          f"{ck['build_us']:.0f} us each; {ck['bytes']:.0f} bytes each; {ck['writes']:.0f} written, Redis round trip "
          f"{ck['write_us']:.0f} us each (writer thread)\n")

    print("3. Fleet throughput (L real-time sessions through HAProxy)")
    print("| instances x threads | L | sessions done | refused | audio dropped s | final latency median s | p90 s | WER % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for load in [int(x) for x in args.loads.split(",")]:
        base = None
        for n in (1, 2, 3):
            r = fleet_run(args, tmp, n, clips, audios, load)
            m = statistics.median(r["lat"]) if r["lat"] else float("nan")
            base = base or m
            print(f"| {n} x {r['threads']} | {load} | {r['done']}/{load} | {r['refused']} | {r['dropped']:.1f} | "
                  f"{m:.2f} ({m / base:.2f}x of 1) | {pct(r['lat'], 90):.2f} | {r['wer']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
