"""What one session's event costs the service thread while other connections
sit idle: the price of a wake-up.

Every event a session emits wakes sotto-server's service thread. This bench
holds N idle WebSocket connections open (connected, hello received, no start:
each is a session in the server's table) and has one more client send
sequential `ping` messages, each answered by a `pong` event. For each N and
each server binary it prints the ping round trip (p50, p95) and the server's
CPU time per ping (utime + stime from /proc over the pinging phase), side by
side, so a wake-up that walks every session shows as cost growing with N.

usage: bench_wakeup.py --server NEW_BINARY [--server OLD_BINARY ...]
       --model models/tiny.en [--idle 0,1000,4000] [--pings 2000] [--repeats 3]

Timings are medians of --repeats runs (a fresh server per run). Not a test:
nothing is asserted.
"""
import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
import server_client as sc  # noqa: E402

from websockets.asyncio.client import connect as ws_connect  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


async def one_run(binary, model, n_idle, pings):
    srv = sc.Server(binary, model, args=["--max-connections", str(n_idle + 16),
                                         "--max-connections-per-ip", str(n_idle + 16),
                                         "--start-timeout-s", "3600", "--threads", "1"])
    srv.start()
    idle = []
    try:
        for i in range(0, n_idle, 200):  # connect in groups: the handshakes overlap
            batch = await asyncio.gather(*[ws_connect(srv.ws_url, max_size=None, open_timeout=60)
                                           for _ in range(min(200, n_idle - i))])
            for ws in batch:
                hello = json.loads(await ws.recv())
                assert hello.get("type") == "hello", hello
            idle += batch
        async with ws_connect(srv.ws_url, max_size=None) as ws:
            assert json.loads(await ws.recv()).get("type") == "hello"
            for _ in range(50):  # warm-up
                await ws.send('{"type":"ping"}')
                while json.loads(await ws.recv()).get("type") != "pong":
                    pass
            rtts = []
            cpu0, t0 = cpu_seconds(srv.proc.pid), time.monotonic()
            for _ in range(pings):
                t = time.perf_counter()
                await ws.send('{"type":"ping"}')
                while json.loads(await ws.recv()).get("type") != "pong":
                    pass
                rtts.append(time.perf_counter() - t)
            cpu = cpu_seconds(srv.proc.pid) - cpu0
            wall = time.monotonic() - t0
        rtts.sort()
        return {"p50_us": rtts[len(rtts) // 2] * 1e6, "p95_us": rtts[int(len(rtts) * 0.95)] * 1e6,
                "cpu_us_per_ping": cpu / pings * 1e6, "pings_per_s": pings / wall}
    finally:
        for ws in idle:
            try:
                await ws.close()
            except Exception:
                pass
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", action="append", required=True, help="sotto-server binary (repeat to compare)")
    ap.add_argument("--model", default="models/tiny.en")
    ap.add_argument("--idle", default="0,1000,4000", help="idle connections, comma-separated")
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    limit = raise_nofile()
    idle_list = [int(x) for x in args.idle.split(",")]
    if max(idle_list) + 64 > limit:
        sys.exit(f"bench_wakeup: {max(idle_list)} idle connections need more file descriptors than {limit}")
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                         capture_output=True, text=True).stdout.strip()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {cpu}")
    print(f"servers: {', '.join(args.server)}; model {args.model}, --threads 1")
    print(f"{args.pings} sequential pings per run, medians of {args.repeats} runs, a fresh server per run\n")
    rows = {}
    for n in idle_list:
        for b in args.server:
            runs = [asyncio.run(one_run(b, args.model, n, args.pings)) for _ in range(args.repeats)]
            rows[(n, b)] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    base = args.server[-1]
    print("| idle connections | server | ping p50 µs | ping p95 µs | server CPU µs per ping | CPU vs last server |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in idle_list:
        for b in args.server:
            r = rows[(n, b)]
            ratio = r["cpu_us_per_ping"] / rows[(n, base)]["cpu_us_per_ping"]
            print(f"| {n} | {b} | {r['p50_us']:.0f} | {r['p95_us']:.0f} | {r['cpu_us_per_ping']:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
