"""sotto-server in hard rooms: noise, continuous speech without a pause, non-speech
audio, and more real-time sessions than the machine sustains. The streams are built
from the dev clips by tests/ref/rooms.py (fixed seeds) and streamed at real-time pace
(tests/ref/server_client.py). Sections (--only / --skip take their names):

  noisy       7 short clips with 1-4 s gaps in pink noise at 0 dB SNR, and 6 other clips
              in babble (8 other talkers) at 5 dB SNR, about 45 s each: no final has a
              repetition loop (a normalized 4-gram 3+ times, rooms.has_loop), none has
              more words than 6/s of its span + 3 (rooms.words_per_second_ok), the whole
              transcript is loop-free. Every final and the WER are printed (no WER
              bound: 0 dB is hard).
  continuous  5 clips of one reader joined with no gap (64.6 s, no quiet stretch of 1 s,
              so the VAD never ends the utterance and the server must cut its windows
              itself; checked: at least one utterance ends at the window limit): finals
              loop-free and within the word bound; streamed word errors
              <= the offline CLI's on the same WAV (`sotto transcribe --beam 1
              --temperature 0`) + 5 (the streaming tolerance of test_web.py and
              test_compat.py); no run of 8 or more consecutive reference words missing
              from the transcript (an alignment; what a window cut would lose).
  nonspeech   digital silence (60 s), white noise at -60 dBFS, 50 Hz hum, keyboard
              clicks, synthesized music (60 s), room tone with door thumps: through the
              live endpoint (at --nonspeech-speed times real time), the batch endpoint
              /v1/audio/transcriptions and `sotto transcribe` (defaults): zero words in
              every final, commit and transcript.
  overload    a server of its own (one thread, f32 sessions, whole final windows: the
              defaults are not overloaded by 16 sessions, the session limit, on 2 cores)
              capacity: the largest N (up to --max-capacity) of concurrent real-time
              sessions of 10-16 s clips with no backlog warning, no dropped audio and
              `done` within --max-lag-s of the end of the audio (or --capacity N),
              found by bisection (a level that holds also holds with fewer); then
              capacity+1 and capacity+2 sessions: every session ends, its finals are
              loop-free and within the word bound, its word errors <= the offline CLI's
              on the clip + 5. Latency (last final after the last audio) is printed.

Run:
  python3 tests/ref/test_rooms.py --server build/sotto-server --sotto build/sotto \\
      --model models/tiny.en --manifest ../shared/audio/manifest.tsv [--only noisy,...]
Exits non-zero if any check fails or a prerequisite is missing. Needs numpy,
websockets, whisper-normalizer.
"""
import argparse
import asyncio
import concurrent.futures
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import rooms  # noqa: E402
import server_client as sc  # noqa: E402
from test_server import Checks  # noqa: E402

SECTIONS = ["noisy", "continuous", "nonspeech", "overload"]
# Streamed transcripts may have this many more word errors than the offline CLI on the
# same audio (test_web.py, test_compat.py STREAM_TOL).
STREAM_TOL = 5
LOST_RUN = 8         # this many consecutive reference words missing is a loss
MAX_PAUSE_S = 1.0    # the continuous stream has no quiet stretch this long
CLI_ARGS = ["--beam", "1", "--temperature", "0"]  # the offline reference (test_server.py)


def pcm_audio(st):
    return sc.Audio.pcm(st.pcm16(), rooms.SR, 1, "pcm_s16le", 100)


def short(text, n=110):
    t = " ".join(text.split())
    return t if len(t) <= n else t[:n - 3] + "..."


def final_rows(res):
    """[(utterance, start, end, text)] of a session's finals."""
    return [(u, float(f.get("start", 0)), float(f.get("end", 0)), f.get("text", ""))
            for u, f in sorted(res.finals().items())]


def check_finals(ck, label, res, verbose=True):
    """Prints every final; checks each is loop-free and within the word bound.
    Returns the number of finals with a loop."""
    bad_loop, bad_rate = [], []
    for u, s, e, text in final_rows(res):
        w = len(rooms.words(text))
        lp = rooms.loop_ngram(text)
        rate_ok = rooms.words_per_second_ok(text, e - s)
        mark = ("LOOP " if lp else "") + ("RATE " if not rate_ok else "")
        if verbose or mark:
            print(f"    final {u:3d} [{s:7.2f} - {e:7.2f}] {w:4d} words {mark:10s} {short(text)!r}")
        if lp:
            bad_loop.append(f"utterance {u} [{s:.1f}-{e:.1f}]: {lp[0]!r} x{lp[1]}")
        if not rate_ok:
            bad_rate.append(f"utterance {u}: {w} words in {e - s:.2f} s "
                            f"(bound {rooms.max_words(e - s)})")
    n = len(res.finals())
    ck.problems(f"{label}: no final has a repetition loop (a 4-gram 3+ times; {n} finals)",
                bad_loop)
    ck.problems(f"{label}: no final has more than {rooms.MAX_WPS:g} words/s of its span "
                f"+ {rooms.MAX_WPS_SLACK}", bad_rate)
    return len(bad_loop)


def session_ok(ck, label, res, audio):
    """The session ended cleanly (no error event, done, nothing dropped)."""
    probs = []
    if res.exception:
        probs.append(f"client exception {type(res.exception).__name__}: {res.exception}")
    probs += [f"error event {e}" for e in res.errors]
    if not res.done:
        probs.append("no done event")
    elif res.done.get("dropped_seconds", 0):
        probs.append(f"dropped {res.done.get('dropped_seconds')} s")
    ack = [e.get("offset") for e in res.of_type("ack")]
    if ack and ack[-1] != audio.total_units:
        probs.append(f"last ack {ack[-1]} != {audio.total_units} sent")
    return ck.problems(f"{label}: session clean (no error, done, nothing dropped)", probs)


def stream_rt(ctx, st, speed=1.0, timeout=None):
    a = pcm_audio(st)
    t0 = time.monotonic()
    res = sc.stream(ctx.srv.ws_url, a, realtime=True, speed=speed,
                    timeout=timeout or (st.seconds / speed + 300))
    return res, a, time.monotonic() - t0


def latency(res):
    """(done after stop, last final after stop) in seconds."""
    fin = [t for t, e in res.events if e.get("type") == "final"]
    d = (res.t_end - res.t_stop) if res.t_end and res.t_stop else float("nan")
    f = (fin[-1] - res.t_stop) if fin and res.t_stop else float("nan")
    return d, f


# ---------------------------------------------------------------------------
# noisy


def noisy_streams(ctx):
    rows = ctx.rows
    a = rooms.join_clips(rooms.pick_clips(rows, 7, seed=11, min_s=2.0, max_s=7.5),
                         gap_s=(1.0, 4.0), seed=11)
    b = rooms.join_clips(rooms.pick_clips(rows, 6, seed=21, min_s=2.0, max_s=7.5),
                         gap_s=(1.0, 4.0), seed=21)
    return [rooms.add_noise(a, "pink", 0, seed=12),
            rooms.add_noise(b, "babble", 5, seed=22, rows=ctx.all_rows)]


def section_noisy(ctx, ck):
    # the streams go to the server side by side (two real-time sessions, within
    # what this machine sustains), and are checked one after the other
    streams = noisy_streams(ctx)
    with concurrent.futures.ThreadPoolExecutor(len(streams)) as pool:
        runs = [pool.submit(stream_rt, ctx, st) for st in streams]
        results = [r.result() for r in runs]
    for st, (res, audio, wall) in zip(streams, results):
        label = f"noisy {st.meta['noise']} {st.meta['snr_db']:g} dB"
        path = st.write_wav(os.path.join(ctx.tmp, label.replace(" ", "_") + ".wav"))
        print(f"  {label}: {st.seconds:.1f} s, {len(st.ids)} clips ({', '.join(st.ids)})"
              + (f"; talkers {', '.join(st.meta['talkers'])}" if "talkers" in st.meta else "")
              + f"; {path}; streamed beside {len(streams) - 1} other")
        session_ok(ck, label, res, audio)
        for (s, e), cid, text in zip(st.segments, st.ids, st.texts):
            print(f"    clip  [{s:7.2f} - {e:7.2f}] {cid}: {short(text, 80)!r}")
        nloop = check_finals(ck, label, res)
        hyp = res.transcript
        ref_loop = rooms.loop_ngram(st.reference)
        lp = rooms.loop_ngram(hyp)
        if ref_loop is None:
            ck.ok(f"{label}: the whole transcript has no repetition loop", lp is None,
                  f"{lp[0]!r} x{lp[1]}" if lp else "")
        outside = [t for _, s0, s1, t in final_rows(res) if t.strip() and not any(
            s0 < b and a < s1 for a, b in st.segments)]
        missed = [cid for (a, b), cid in zip(st.segments, st.ids) if not any(
            s0 < b and a < s1 and t.strip() for _, s0, s1, t in final_rows(res))]
        print(f"    finals with text outside every clip: {len(outside)} {outside[:3]}; clips "
              f"no final with text overlaps: {len(missed)} {missed}")
        e, n = rooms.errors(st.reference, hyp)
        d, f = latency(res)
        print(f"    {len(res.finals())} finals, {len(rooms.words(hyp))} words (reference {n}); "
              f"WER {100.0 * e / max(1, n):.1f}% ({e}/{n}); finals with a loop: {nloop}; "
              f"done {d:.2f} s after stop; wall {wall:.1f} s")
        ctx.summary.append(f"{label}: WER {100.0 * e / max(1, n):.1f}%, {len(res.finals())} "
                           f"finals, {nloop} with a loop, {len(rooms.words(hyp))} words "
                           f"(reference {n})")


# ---------------------------------------------------------------------------
# continuous


def section_continuous(ctx, ck):
    clips = rooms.continuous_clips(ctx.rows)
    st = rooms.join_clips(clips, 0, lead_s=1.0, tail_s=1.5)
    path = st.write_wav(os.path.join(ctx.tmp, "continuous.wav"))
    q, q_at = rooms.longest_quiet(st.audio, 1.0, st.seconds - 1.5)
    print(f"  {st.seconds:.1f} s, {len(clips)} clips ({', '.join(st.ids)}); {path}")
    ck.ok(f"continuous: the stream has no pause of {MAX_PAUSE_S:g} s (longest quiet stretch "
          f"{q:.2f} s at {q_at:.1f} s)", q < MAX_PAUSE_S)
    t0 = time.monotonic()
    off = rc.run_sotto(ctx.args.sotto, ctx.args.model, [path], CLI_ARGS,
                       threads=ctx.args.threads)[path]["text"]
    e_off, n = rooms.errors(st.reference, off)
    print(f"  offline CLI ({' '.join(CLI_ARGS)}): {e_off}/{n} word errors "
          f"({time.monotonic() - t0:.1f} s): {short(off, 200)!r}")
    res, audio, wall = stream_rt(ctx, st)
    session_ok(ck, "continuous", res, audio)
    for (s, e), cid in zip(st.segments, st.ids):
        print(f"    clip  [{s:7.2f} - {e:7.2f}] {cid}")
    nloop = check_finals(ck, "continuous", res)
    # what the section is for: an utterance ended by the window limit, not by a pause
    # (no speech_end of its own; the next utterance starts where it ends)
    ended = {e.get("utterance") for e in res.of_type("speech_end")}
    fr = final_rows(res)
    cuts = [f"{a[0]} at {a[2]:.2f} s ({a[2] - a[1]:.1f} s long)" for a, b in zip(fr, fr[1:])
            if a[0] not in ended and abs(b[1] - a[2]) < 0.05]
    ck.ok("continuous: the server cut at least one utterance at the window limit",
          bool(cuts), ", ".join(cuts) or f"utterances ended by the VAD: {sorted(ended)}")
    hyp = res.transcript
    e, _ = rooms.errors(st.reference, hyp)
    ck.ok(f"continuous: streamed word errors {e}/{n} <= offline CLI's {e_off} + {STREAM_TOL}",
          e <= e_off + STREAM_TOL, f"WER {100.0 * e / n:.1f}% vs offline {100.0 * e_off / n:.1f}%")
    runs = rooms.lost_runs(st.reference, hyp)
    longest = runs[0] if runs else (0, 0, "")
    ck.ok(f"continuous: no run of {LOST_RUN}+ consecutive reference words missing "
          f"(longest {longest[0]})", longest[0] < LOST_RUN,
          f"at reference word {longest[1]}: {short(longest[2], 200)!r}" if longest[0] else "")
    for ln, at, ws in runs[:5]:
        if ln >= 3:
            print(f"    missing run of {ln} words at reference word {at}: {short(ws, 100)!r}")
    d, f = latency(res)
    print(f"    {len(res.finals())} finals, WER {100.0 * e / n:.1f}% (offline {100.0 * e_off / n:.1f}%), "
          f"done {d:.2f} s after stop, wall {wall:.1f} s")
    ctx.summary.append(f"continuous ({st.seconds:.0f} s): streamed WER {100.0 * e / n:.1f}% "
                       f"({e}/{n}), offline {100.0 * e_off / n:.1f}% ({e_off}); {len(res.finals())} "
                       f"finals, {nloop} with a loop; longest missing run {longest[0]} words")


# ---------------------------------------------------------------------------
# nonspeech


def post_transcription(base_url, path, model="whisper-1", timeout=600):
    """POST /v1/audio/transcriptions (multipart, response_format json): (status, body)."""
    boundary = "sotto" + uuid.uuid4().hex
    with open(path, "rb") as f:
        data = f.read()
    parts = []
    for k, v in (("model", model), ("response_format", "json")):
        parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n"
                     f"{v}\r\n".encode())
    parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\""
                 f"{os.path.basename(path)}\"\r\nContent-Type: audio/wav\r\n\r\n".encode() + data
                 + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    req = urllib.request.Request(base_url + "/v1/audio/transcriptions", data=b"".join(parts),
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def raw_words(text):
    """Whitespace-separated tokens with a letter or digit (stricter than the normalizer,
    which drops "[Music]" and "(applause)": any word shown is a failure on non-speech;
    bare punctuation is printed but not counted)."""
    return sum(1 for t in text.split() if re.search(r"\w", t))


def section_nonspeech(ctx, ck):
    pieces = [rooms.nonspeech(name, seed=7) for name in rooms.NONSPEECH]
    paths = {}
    for st in pieces:
        paths[st.name] = st.write_wav(os.path.join(ctx.tmp, f"nonspeech_{st.name}.wav"))
    table = {}
    speed = ctx.args.nonspeech_speed
    t0 = time.monotonic()
    for st in pieces:
        res, audio, wall = stream_rt(ctx, st, speed=speed)
        session_ok(ck, f"nonspeech {st.name} (live)", res, audio)
        fin = " ".join(t for _, _, _, t in final_rows(res))
        com = " ".join(e.get("text", "") for e in res.of_type("commit"))
        table[st.name] = {"seconds": st.seconds, "live": raw_words(fin), "finals": len(res.finals()),
                          "commits": raw_words(com), "live_text": fin,
                          "speech": len(res.of_type("speech_start"))}
    print(f"  live: {sum(p.seconds for p in pieces):.0f} s streamed at {speed:g}x real time in "
          f"{time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    for st in pieces:
        status, body = post_transcription(ctx.srv.http_url, paths[st.name])
        text = ""
        if status == 200:
            try:
                text = json.loads(body).get("text", "")
            except ValueError:
                status = -1
        ck.ok(f"nonspeech {st.name}: batch endpoint answers 200 with JSON", status == 200,
              f"{status}: {body[:200]}")
        table[st.name]["batch"] = raw_words(text)
        table[st.name]["batch_text"] = text
    print(f"  batch endpoint: {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    out = rc.run_sotto(ctx.args.sotto, ctx.args.model, list(paths.values()), threads=ctx.args.threads)
    for st in pieces:
        text = out[paths[st.name]]["text"]
        table[st.name]["cli"] = raw_words(text)
        table[st.name]["cli_text"] = text
    print(f"  CLI (`sotto transcribe`, default options): {time.monotonic() - t0:.1f} s")
    print(f"\n  {'piece':10s} {'s':>5s} {'utt':>4s} {'live words':>10s} {'commit words':>12s} "
          f"{'batch words':>11s} {'CLI words':>9s}")
    for name, r in table.items():
        print(f"  {name:10s} {r['seconds']:5.0f} {r['finals']:4d} {r['live']:10d} {r['commits']:12d} "
              f"{r['batch']:11d} {r['cli']:9d}")
    for name, r in table.items():
        for k in ("live_text", "batch_text", "cli_text"):
            if r[k].strip():
                print(f"    {name} {k.split('_')[0]}: {short(r[k], 150)!r}")
    for name, r in table.items():
        desc = rooms.NONSPEECH[name][2]
        ck.ok(f"nonspeech {name} ({desc}, {r['seconds']:.0f} s): no words live (finals and "
              f"commits), from the batch endpoint, from the CLI",
              r["live"] == 0 and r["commits"] == 0 and r["batch"] == 0 and r["cli"] == 0,
              f"live {r['live']}, commits {r['commits']}, batch {r['batch']}, CLI {r['cli']}")
    ctx.summary.append("nonspeech words (live/commit/batch/CLI): " + ", ".join(
        f"{n} {r['live']}/{r['commits']}/{r['batch']}/{r['cli']}" for n, r in table.items()))


# ---------------------------------------------------------------------------
# overload


def overload_clips(ctx, n):
    pool = [r for r in rooms.material(ctx.rows, 10.0, 16.0)]
    rng = __import__("numpy").random.default_rng(31)
    idx = rng.permutation(len(pool))[:n]
    return [pool[i] for i in idx]


# The overload section's own server: one thread, f32 sessions, whole final windows. With
# q8 sessions and final windows cut to their audio (--audio-ctx all) 2 cores sustained 16
# sessions of these clips, the server's session limit (done 0.17 s after the audio; f32
# sessions with cut windows: 0.60 s), and q8 with whole windows, the live default where the
# CPU has the int8 dot product, sustains 16 in bench_server: the shared server cannot be
# overloaded by sessions; this one shows what overload does.
OVERLOAD_ARGS = ["--stream-weights", "f32", "--audio-ctx", "partials", "--max-buffer-s", "600"]


def run_concurrent(ctx, clips):
    """Streams each clip in its own session, all at once, at real-time pace."""
    keys = [f"s{i}-{r['id']}" for i, r in enumerate(clips)]
    audios = {k: sc.load_clip(r["file"], "s16_16k", ctx.tmp) for k, r in zip(keys, clips)}
    t0 = time.monotonic()
    res = sc.run(sc.stream_many(ctx.overload_srv.ws_url, audios, concurrency=len(audios), realtime=True,
                                timeout=600))
    # stream_many fills its dict as sessions end: back in clip order
    return audios, {k: res[k] for k in keys}, time.monotonic() - t0


def level_stats(audios, res):
    backlog = sum(1 for r in res.values() for w in r.warnings if w.get("code") == "backlog")
    dropped = sum((r.done or {}).get("dropped_seconds", 0) for r in res.values())
    unfinished = sum(1 for r in res.values() if not r.done)
    lags = [latency(r)[0] for r in res.values()]
    return backlog, dropped, unfinished, lags


def section_overload(ctx, ck):
    a = ctx.args
    ctx.overload_srv = sc.Server(a.server, a.model, OVERLOAD_ARGS + [
        "--max-sessions", str(max(a.max_capacity, a.capacity) + 2)], threads=1).start()
    try:
        overload_levels(ctx, ck)
    finally:
        code = ctx.overload_srv.stop()
    ck.ok("overload: its server exits 0 on SIGTERM", code == 0, str(code))


def overload_levels(ctx, ck):
    a = ctx.args
    clips = overload_clips(ctx, max(a.max_capacity, a.capacity) + 2)
    off = rc.run_sotto(a.sotto, a.model, [r["file"] for r in clips], CLI_ARGS, threads=a.threads)
    e_off = {r["id"]: rooms.errors(r["text"], off[r["file"]]["text"]) for r in clips}
    cap = a.capacity
    if cap <= 0:
        # bisection between 0 (sustained) and --max-capacity + 1 (assumed not): a level
        # that holds also holds with fewer sessions. This server sustained 7-8 sessions on
        # the 2-core dev VM (one thread, f32): 3-4 probes instead of one per level
        lo, hi = 0, a.max_capacity + 1
        while hi - lo > 1:
            n = (lo + hi) // 2
            audios, res, wall = run_concurrent(ctx, clips[:n])
            backlog, dropped, unfinished, lags = level_stats(audios, res)
            ok = backlog == 0 and dropped == 0 and unfinished == 0 and max(lags) <= a.max_lag_s
            print(f"  capacity probe, {n} session(s): {'sustained' if ok else 'NOT sustained'}; "
                  f"done after the audio max {max(lags):.2f} s (limit {a.max_lag_s:g}); backlog "
                  f"warnings {backlog}, dropped {dropped:.1f} s, unfinished {unfinished}; "
                  f"wall {wall:.1f} s", flush=True)
            lo, hi = (n, hi) if ok else (lo, n)
        cap = lo
        if cap == a.max_capacity:
            print(f"  every level up to --max-capacity {cap} was sustained: the levels above may not "
                  f"overload this machine")
        print(f"  measured capacity: {cap} concurrent real-time session(s) of 10-16 s clips")
    else:
        print(f"  capacity given: {cap}")
    ctx.summary.append(f"overload: capacity {cap}")
    for n in (cap + 1, cap + 2):
        audios, res, wall = run_concurrent(ctx, clips[:n])
        backlog, dropped, unfinished, lags = level_stats(audios, res)
        print(f"  {n} sessions (capacity + {n - cap}): wall {wall:.1f} s, backlog warnings "
              f"{backlog}, dropped {dropped:.1f} s, unfinished {unfinished}")
        worst = 0
        for (k, r), clip in zip(res.items(), clips[:n]):
            label = f"overload {n}: {k}"
            d, f = latency(r)
            e, m = rooms.errors(clip["text"], r.transcript)
            eo = e_off[clip["id"]][0]
            print(f"    {k}: {audios[k].seconds:.1f} s, {len(r.finals())} finals, last final "
                  f"{f:.2f} s and done {d:.2f} s after the audio; {e}/{m} word errors "
                  f"(offline {eo}); {short(r.transcript, 90)!r}")
            ck.ok(f"{label}: the session ends (done)", r.done is not None and not r.exception,
                  f"exception {r.exception}, errors {r.errors}")
            check_finals(ck, label, r, verbose=False)
            ck.problems(f"{label}: gapless seq, commits never revised, acks monotonic",
                        sc.check_session(r, audios[k].total_units))
            ck.ok(f"{label}: word errors {e}/{m} <= offline CLI's {eo} + {STREAM_TOL}",
                  e <= eo + STREAM_TOL, short(r.transcript, 200))
            worst = max(worst, d if d == d else 0)
        ctx.summary.append(f"overload {n} sessions: done after the audio max {worst:.1f} s, "
                           f"dropped {dropped:.1f} s")


# ---------------------------------------------------------------------------


class Ctx:
    pass


def check_helpers(ck):
    """The checks themselves catch what they are for (the user's reports of the issue)."""
    loop = "I am not sure if I can. " * 30  # 195 words in a 1.3 s utterance, reported
    ck.ok("helpers: has_loop flags a repeated phrase, words_per_second_ok its length",
          rooms.has_loop(loop) and not rooms.words_per_second_ok(loop, 1.3)
          and not rooms.has_loop("Thank you.") and rooms.words_per_second_ok("Thank you.", 1.0))
    ref = "he hoped there would be stew for dinner turnips and carrots and bruised potatoes"
    ck.ok("helpers: lost_runs finds 8 reference words missing after a cut",
          rooms.lost_runs(ref, "he hoped there would be stew")[0][0] == 8
          and not rooms.lost_runs(ref, ref))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=None, help="server/CLI threads (default: all)")
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--skip", default="", help="comma-separated sections to skip")
    ap.add_argument("--nonspeech-speed", type=float, default=10.0,
                    help="pace of the non-speech pieces on the live endpoint (x real time; passes "
                         "follow the audio, not the clock, and a session that drops audio fails)")
    ap.add_argument("--capacity", type=int, default=0,
                    help="concurrent real-time sessions the machine sustains (0: measure)")
    ap.add_argument("--max-capacity", type=int, default=8,
                    help="largest level probed (the overload server allows 2 more sessions)")
    ap.add_argument("--max-lag-s", type=float, default=4.0,
                    help="a sustained level ends every session this soon after its audio")
    ap.add_argument("--server-args", default="", help="extra sotto-server options (one string)")
    ap.add_argument("--keep", default="", help="keep the generated WAVs and the server log here")
    args = ap.parse_args()
    missing = [p for p in (args.server, args.sotto) if not os.access(p, os.X_OK)]
    if missing:
        sys.exit(f"test_rooms: not executable: {missing} (build first)")
    if not os.path.isdir(args.model):
        sys.exit(f"test_rooms: no model directory {args.model}")
    if not os.path.exists(args.manifest):
        sys.exit(f"test_rooms: manifest not found: {args.manifest}")
    only = [s for s in args.only.split(",") if s] or SECTIONS
    skip = [s for s in args.skip.split(",") if s]
    unknown = [s for s in only + skip if s not in SECTIONS]
    if unknown:
        sys.exit(f"test_rooms: unknown sections {unknown}; known: {SECTIONS}")
    run_sections = [s for s in SECTIONS if s in only and s not in skip]
    if not run_sections:
        sys.exit("test_rooms: no section to run")

    ck = Checks()
    ctx = Ctx()
    ctx.args = args
    ctx.all_rows = rc.load_manifest(args.manifest)
    ctx.rows = [r for r in ctx.all_rows if r["language"] == "en"]
    missing = [r["file"] for r in ctx.all_rows if not os.path.exists(r["file"])]
    if missing or not ctx.rows:
        sys.exit(f"test_rooms: {len(missing)} manifest files missing ({missing[:3]}), "
                 f"{len(ctx.rows)} English rows")
    ctx.summary = []
    times = {}
    t_all = time.monotonic()
    print(f"sotto-server in hard rooms: {args.server}, model {args.model}, sections "
          f"{run_sections}, {os.cpu_count()} CPUs, threads {args.threads or 'all'}", flush=True)
    check_helpers(ck)
    tmp = tempfile.mkdtemp(prefix="sotto-rooms-")
    ctx.tmp = tmp
    extra = ["--max-buffer-s", "600"] + args.server_args.split()
    ctx.srv = sc.Server(args.server, args.model, extra, threads=args.threads)
    try:
        ctx.srv.start()
        print(f"server on port {ctx.srv.port} (log {ctx.srv.log_path}): "
              f"{' '.join(ctx.srv.command()[1:])}")
        for s in run_sections:
            print(f"\n== {s}", flush=True)
            t0 = time.monotonic()
            try:
                globals()[f"section_{s}"](ctx, ck)
            except Exception as ex:  # a crash of one section is a failure, not the end
                import traceback
                traceback.print_exc()
                ck.ok(f"{s}: ran without an exception", False, f"{type(ex).__name__}: {ex}")
            times[s] = time.monotonic() - t0
            print(f"== {s}: {times[s]:.1f} s", flush=True)
            if not ctx.srv.alive():
                ck.ok("server still running", False,
                      f"exit {ctx.srv.proc.returncode}; log tail:\n{ctx.srv.log()[-2000:]}")
                break
    finally:
        rcode = ctx.srv.stop()
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for f in os.listdir(tmp):
                if f.endswith(".wav"):
                    shutil.copy(os.path.join(tmp, f), args.keep)
            if ctx.srv.log_path:
                shutil.copy(ctx.srv.log_path, os.path.join(args.keep, "server.log"))
        shutil.rmtree(tmp, ignore_errors=True)
    ck.ok("server exits 0 on SIGTERM", rcode == 0, str(rcode))
    ck.ok("no sanitizer report in the server's log", not sc.SANITIZER_REPORTS,
          "\n".join(sc.SANITIZER_REPORTS)[:3000])
    not_run = [s for s in run_sections if s not in times]
    ck.ok("every requested section ran", not not_run, f"not run: {not_run}")
    print("\nsummary:")
    for line in ctx.summary:
        print(f"  {line}")
    print("  section times: " + ", ".join(f"{s} {t:.0f} s" for s, t in times.items()))
    print(f"\n{ck.n} checks, {len(ck.failed)} failed, {time.monotonic() - t_all:.0f} s")
    for f in ck.failed:
        print(f"  FAILED: {f[:400]}")
    sys.exit(1 if ck.failed else 0)


if __name__ == "__main__":
    main()
