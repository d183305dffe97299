"""Latency and capacity of sotto-server at real-time pace. Reports; asserts nothing.

Part 1, latency: each clip of the set is streamed alone at real-time pace
(100 ms PCM messages, s16 16 kHz) with the server's default session options.

  word latency (partial): for word k of an utterance's final text, the arrival
    of the first event of that utterance (partial, commit or final) whose text
    (committed + tentative) starts with the final's first k+1 words, minus the
    time the word's audio had been sent (first audio message sent + the word's
    end time in the audio). Word end times are approximated by character
    position: the final's words are spread linearly over the utterance's speech
    span [final.start + pre-roll, final.end - tail] (the VAD's span less the
    pre-roll and tail it adds). Words are compared lower-cased without
    punctuation. Negative values: the word was guessed before its estimated end.
  word latency (commit): the same with commit/final events only (stable text).
  final latency: the final event's arrival minus the send time of the audio at
    the utterance's end (final.end, the speech_end sample). It includes the VAD's
    trailing silence (silence_ms) that ends an utterance. Also reported: final
    minus the speech_end event's arrival (decoding after the endpoint).
  Utterances that end at the end of the stream (closed by `stop`, not by the VAD)
  are left out of the final latency.

Part 2, capacity: 1, 2, 3, ... concurrent sessions, each streaming about
--session-s seconds of speech (clips joined with 0.5 s of silence) at real-time
pace. A level is sustained if no session gets a `backlog` warning or drops
audio, every session ends, the p95 of final-after-speech_end stays under
--max-final-s and does not grow over the run (mean over the last third of
utterances minus the first third under --max-growth-s). The ramp stops at the
first level that is not sustained.

  python3 bench/bench_server.py --server build/sotto-server
"""
import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "ref"))

import refcommon as rc  # noqa: E402
from bench_cpu import cpu_model, percentile  # noqa: E402
import server_client as sc  # noqa: E402

DEFAULT_CLIPS = [
    "librispeech_train-clean-100_1867-154075-0031",
    "librispeech_train-clean-100_19-198-0026",
    "librispeech_train-clean-100_1088-134315-0006",
    "librispeech_train-clean-100_1898-145715-0024",
    "librispeech_train-clean-100_163-122947-0032",
    "librispeech_train-clean-100_118-47824-0009",
    "jfk",
    "librispeech_train-clean-100_1737-146161-0005",
]


def words(text):
    return re.sub(r"[^\w' ]+", " ", text.lower()).split()


def pct(xs, p):
    return percentile(xs, p / 100.0)


def fmt(xs):
    if not xs:
        return "n/a"
    return (f"p50 {pct(xs, 50):6.2f} s  p95 {pct(xs, 95):6.2f} s  mean {statistics.mean(xs):6.2f} s"
            f"  max {max(xs):6.2f} s  (n={len(xs)})")


def utterance_latencies(res, vad, speed=1.0):
    """(word partial latencies, word commit latencies, final latencies, final-after-endpoint)."""
    pre = vad.get("preroll_ms", 300) / 1000.0
    tail = 0.3  # the VAD's tail_ms default (not reported in `ready`)
    w_part, w_commit, fin, fin_ep = [], [], [], []
    evs = res.events
    total_s = res.sends[-1][2] if res.sends else 0
    ends = {e.get("utterance"): t for t, e in evs if e.get("type") == "speech_end"}
    for u, f in sorted(res.finals().items()):
        fw = words(f.get("text", ""))
        t_final = next(t for t, e in evs if e.get("type") == "final" and e.get("utterance") == u)
        s0 = f["start"] + pre
        s1 = max(s0 + 0.05, f["end"] - tail)
        # character-proportional word end times over the speech span
        lens = [len(w) + 1 for w in fw]
        tot = sum(lens) or 1
        acc, w_end = 0, []
        for ln in lens:
            acc += ln
            w_end.append(s0 + (s1 - s0) * acc / tot)
        uevs = [(t, e) for t, e in evs if e.get("utterance") == u and
                e.get("type") in ("partial", "commit", "final")]
        for k in range(len(fw)):
            t_sent = res.t_audio0 + w_end[k] / speed
            tp = tc = None
            for t, e in uevs:
                typ = e["type"]
                if typ == "partial":
                    txt = e.get("committed", "") + e.get("tentative", "")
                elif typ == "commit":
                    txt = e.get("committed", "")
                else:
                    txt = e.get("text", "")
                ew = words(txt)
                if len(ew) > k and ew[:k + 1] == fw[:k + 1]:
                    if tp is None:
                        tp = t
                    if tc is None and typ != "partial":
                        tc = t
                if tp is not None and tc is not None:
                    break
            if tp is not None:
                w_part.append(tp - t_sent)
            if tc is not None:
                w_commit.append(tc - t_sent)
        closed_by_vad = u in ends and f["end"] < total_s - 0.05
        if closed_by_vad:
            t_end_sent = res.sent_time_of_audio(f["end"])
            if t_end_sent is not None:
                fin.append(t_final - t_end_sent)
            fin_ep.append(t_final - ends[u])
    return w_part, w_commit, fin, fin_ep


def loadavg():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def joined_pcm(rows, seconds, offset=0):
    """(s16 16 kHz PCM, reference text) of clips (starting at rows[offset]) joined with
    0.5 s of silence, about `seconds` long."""
    pcm, texts = b"", []
    i = offset
    while len(pcm) < seconds * 32000:
        data, rate, ch = sc.read_wav(rows[i % len(rows)]["file"])
        pcm += data + b"\0\0" * 8000
        texts.append(rows[i % len(rows)]["text"])
        i += 1
    return pcm, " ".join(texts)


def whisperlive_levels(args, rows):
    """Part 3: the same streams to WhisperLive (bench/whisperlive_peer.py)."""
    import whisperlive_peer as wl
    print(f"\nPart 3: WhisperLive {wl_version(args.whisperlive_python)} (faster_whisper backend, "
          f"int8 on the CPU, its VAD on), the same streams, {args.threads or os.cpu_count()} threads")
    for n in range(max(1, args.min_streams), args.max_streams + 1):
        pcms = [joined_pcm(rows, args.session_s, offset=i) for i in range(n)]
        srv = wl.Server(args.whisperlive_python, args.model, sc.free_port(), n,
                        args.threads or os.cpu_count(), "/tmp/sotto-bench-whisperlive.log").start()
        try:
            t0 = time.monotonic()
            res = asyncio.run(wl.stream_many(srv.port, [p for p, _ in pcms]))
            wall = time.monotonic() - t0
        finally:
            srv.stop()
        lat = [x for r in res for x in r.latencies()]
        settle = [r.settle() for r in res]
        errs = [r.error for r in res if r.error]
        wer = rc.corpus_wer([t for _, t in pcms], [r.transcript() for r in res])
        print(f"  {n} stream(s): completed segment after its end {fmt(lat)}; settled after the "
              f"last audio max {max(settle):.2f} s (per stream {', '.join(f'{x:.1f}' for x in settle)}); "
              f"WER {wer:.2f}%; errors {errs[:2]}; wall {wall:.0f} s, load {loadavg()}", flush=True)


def wl_version(python):
    try:
        return subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('whisper-live'))"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--weights", default=None,
                    help="weights the sessions ask for (default: none, the server's default variant)")
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=None, help="server threads (default: all)")
    ap.add_argument("--clips", default=",".join(DEFAULT_CLIPS), help="comma-separated clip ids")
    ap.add_argument("--step-ms", type=int, default=None, help="session step_ms (default: server's)")
    ap.add_argument("--session-s", type=float, default=40.0, help="audio per session, part 2")
    ap.add_argument("--max-streams", type=int, default=6)
    ap.add_argument("--min-streams", type=int, default=1,
                    help="first level of part 2 (the levels below it are not run)")
    ap.add_argument("--max-final-s", type=float, default=3.0)
    ap.add_argument("--max-growth-s", type=float, default=1.0)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-capacity", action="store_true")
    ap.add_argument("--whisperlive-python", metavar="PY",
                    help="part 3: the same levels of streams to WhisperLive's server run by this Python "
                         "(bench/whisperlive_peer.py)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra server option (repeat), e.g. --server-arg=--max-batch=4")
    args = ap.parse_args()

    rows_all = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    rows = [rows_all[c] for c in args.clips.split(",") if c in rows_all]
    if not rows:
        sys.exit("no clips")
    extra = []
    for a in args.server_arg:
        extra += a.split("=", 1) if a.startswith("--") and "=" in a else [a]
    start = {"weights": args.weights} if args.weights else {}
    if args.step_ms:
        start["step_ms"] = args.step_ms
    try:
        # the checkout the server binary was built in (another worktree, for a side-by-side run)
        commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(args.server)),
                                 "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    srv = sc.Server(args.server, args.model, extra, threads=args.threads)
    print("sotto-server benchmark (real-time pace)")
    print(f"  CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average {loadavg()}")
    print(f"  server: {args.server} (commit {commit}, working tree may differ)")
    print(f"  model {args.model}, weights {args.weights or 'the server default'}, threads {args.threads or 'all'}, "
          f"session options {start}")
    print(f"  clips: {len(rows)} ({sum(r['seconds'] for r in rows):.1f} s): "
          + ", ".join(r["id"] for r in rows))
    srv.start()
    print(f"  server options: {' '.join(srv.command()[1:])}")
    try:
        r0 = sc.stream(srv.ws_url, sc.load_clip(rows[0]["file"], "s16_16k"), start=start)
        ready = r0.ready or {}
        vad = ready.get("vad", {})
        print(f"  session defaults from ready: weights {ready.get('weights')}, step_ms {ready.get('step_ms')}, max_window_s "
              f"{ready.get('max_window_s')}, vad {vad}, policy {ready.get('policy')}")
        if not args.skip_latency:
            print("\nPart 1: latency, one session at a time")
            t0 = time.monotonic()
            allp, allc, allf, allep = [], [], [], []
            for r in rows:
                a = sc.load_clip(r["file"], "s16_16k")
                res = sc.stream(srv.ws_url, a, realtime=True, start=start)
                p, c, f, ep = utterance_latencies(res, vad)
                allp += p
                allc += c
                allf += f
                allep += ep
                lat_done = res.t_end - res.t_stop if res.t_end and res.t_stop else float("nan")
                err = [e.get("code") for e in res.errors]
                print(f"  {r['id'][:48]:48s} {a.seconds:5.1f} s  {len(res.finals())} utt  "
                      f"partial p50 {pct(p, 50):5.2f}  commit p50 {pct(c, 50):5.2f}  "
                      f"final p50 {pct(f, 50):5.2f}  done {lat_done:5.2f} s after stop"
                      + (f"  errors {err}" if err else ""))
            print(f"\n  word latency (partial): {fmt(allp)}")
            print(f"  word latency (commit):  {fmt(allc)}")
            print(f"  final latency (from the utterance's end in the audio): {fmt(allf)}")
            print(f"  final after the speech_end event:                     {fmt(allep)}")
            m = srv.metrics()
            for h in ("sotto_encode_seconds", "sotto_decode_seconds", "sotto_pass_seconds",
                      "sotto_pass_queue_seconds", "sotto_first_token_seconds"):
                n = m.get(f"{h}_count", 0)
                if n:
                    print(f"  server {h}: mean {m[f'{h}_sum'] / n * 1000:.0f} ms over {n:.0f}")
            print(f"  part 1: {time.monotonic() - t0:.0f} s, load average {loadavg()}")
        if not args.skip_capacity:
            print(f"\nPart 2: concurrent real-time sessions ({args.session_s:.0f} s of speech "
                  f"each)")
            sustained = 0
            for n in range(max(1, args.min_streams), args.max_streams + 1):
                refs = {f"s{i}": joined_pcm(rows, args.session_s, offset=i) for i in range(n)}
                audios = {k: sc.Audio.pcm(p, 16000, 1, "pcm_s16le", 100) for k, (p, _) in refs.items()}
                m0 = srv.metrics()
                t0 = time.monotonic()
                scales, polling = [], threading.Event()

                def poll():  # the overload policy's step scale, twice a second
                    while not polling.wait(0.5):
                        v = srv.metrics().get("sotto_step_scale")
                        if v is not None:
                            scales.append(v)
                poller = threading.Thread(target=poll, daemon=True)
                poller.start()
                res = sc.run(sc.stream_many(srv.ws_url, audios, concurrency=n, realtime=True,
                                            start=start, timeout=args.session_s * 4 + 60))
                polling.set()
                poller.join()
                wall = time.monotonic() - t0
                m1 = srv.metrics()
                fin_ep, backlog, dropped, failed, tail = [], 0, 0.0, 0, []
                w_part, w_commit = [], []
                series = []  # (utterance end time in audio, latency) for the growth check
                for k, r in res.items():
                    wp, wc, f, ep = utterance_latencies(r, vad)
                    fin_ep += ep
                    w_part += wp
                    w_commit += wc
                    ends = {e.get("utterance"): t for t, e in r.events
                            if e.get("type") == "speech_end"}
                    for u, fe in sorted(r.finals().items()):
                        if u in ends:
                            t_final = next(t for t, e in r.events if e.get("type") == "final"
                                           and e.get("utterance") == u)
                            series.append((fe["end"], t_final - ends[u]))
                    backlog += sum(1 for w in r.warnings if w.get("code") == "backlog")
                    if r.done:
                        dropped += r.done.get("dropped_seconds", 0)
                    else:
                        failed += 1
                    if r.t_end and r.t_stop:
                        tail.append(r.t_end - r.t_stop)
                series.sort()
                third = max(1, len(series) // 3)
                growth = (statistics.mean(x for _, x in series[-third:]) -
                          statistics.mean(x for _, x in series[:third])) if series else float("nan")
                ok = (backlog == 0 and dropped == 0 and failed == 0 and fin_ep and
                      pct(fin_ep, 95) <= args.max_final_s and growth <= args.max_growth_s)
                def delta(name):
                    return m1.get(name, 0) - m0.get(name, 0)
                passes = delta("sotto_passes_total")
                spec = (m1.get("sotto_speculative_passes_total", 0) -
                        m0.get("sotto_speculative_passes_total", 0))
                spec_used = (m1.get("sotto_speculative_finals_total", 0) -
                             m0.get("sotto_speculative_finals_total", 0))
                q = ((m1.get("sotto_pass_queue_seconds_sum", 0) - m0.get("sotto_pass_queue_seconds_sum", 0))
                     / max(1, m1.get("sotto_pass_queue_seconds_count", 0) -
                           m0.get("sotto_pass_queue_seconds_count", 0)))
                print(f"  {n} stream(s): {'sustained' if ok else 'NOT sustained'}; final after "
                      f"speech_end {fmt(fin_ep)}; growth {growth:+.2f} s; done after stop "
                      f"max {max(tail) if tail else float('nan'):.2f} s; backlog warnings "
                      f"{backlog}, dropped {dropped:.1f} s, unfinished {failed}; {passes:.0f} "
                      f"passes ({spec:.0f} speculative, {spec_used:.0f} of them finals), mean pass "
                      f"queue wait {q:.2f} s; wall {wall:.0f} s, load "
                      f"{loadavg()}")
                print(f"      word latency (partial) p50 {pct(w_part, 50):.2f} p95 {pct(w_part, 95):.2f} s;"
                      f" (commit) p50 {pct(w_commit, 50):.2f} p95 {pct(w_commit, 95):.2f} s; "
                      f"overload step scale mean {statistics.mean(scales) if scales else float('nan'):.2f}"
                      f" max {max(scales) if scales else float('nan'):.2f} (sampled every 0.5 s); "
                      f"finals between partial windows {delta('sotto_finals_between_windows_total'):.0f}, "
                      f"partials superseded {delta('sotto_partials_superseded_total'):.0f}; WER "
                      f"{rc.corpus_wer([t for _, t in refs.values()], [res[k].transcript for k in refs]):.2f}%")
                if ok:
                    sustained = n
                else:
                    break
            print(f"\n  sustained concurrent real-time streams: {sustained}"
                  + (f" (levels from {args.min_streams} run)" if args.min_streams > 1 else ""))
    finally:
        srv.stop()
    if args.whisperlive_python:
        whisperlive_levels(args, rows)


if __name__ == "__main__":
    main()
