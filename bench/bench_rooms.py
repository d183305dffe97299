"""sotto-server in noise and on non-speech, next to faster-whisper. Reports; asserts
nothing (the CI checks are tests/ref/test_rooms.py). Prints the tables of docs/PERF.md
"Noise, non-speech and the VAD".

Streams (tests/ref/rooms.py, fixed seeds): --clips (15) English dev clips of 2-16 s
joined with 1-4 s of silence; that stream clean and with white, pink and babble noise
at 20, 10, 5 and 0 dB SNR (speech-active power over noise power); and the non-speech
pieces (digital silence, low noise, hum, clicks, music, room tone). Each is streamed
through one sotto-server at --speed times real time (100 ms PCM messages), --parallel
sessions at a time (default 1), once per
--vad-kinds entry (the session start field `vad.kind`, left out for the server's
default kind), and transcribed by faster-whisper (WhisperModel(--model, device cpu,
compute_type float32, cpu_threads --fw-threads), transcribe(language="en") with its
default options, vad_filter=True and False) on the same WAVs in the same run, after
the streaming (the server is idle then).

Tables:
  WER       corpus WER (Whisper's English normalizer) of each stream: sotto's streamed
            finals joined, per VAD kind, and faster-whisper's segments joined.
  loops     finals (sotto) / segments (faster-whisper) with a repetition loop (a
            normalized 4-gram 3+ times, rooms.has_loop).
  non-speech  words emitted on each piece (tokens with a letter or digit).
  VAD       against the clips' known speech spans (first to last active 20 ms frame):
            missed = clips no VAD segment overlaps; false = segments that overlap no
            clip; bridged = gaps of >= --bridge-gap-s between two clips that a single
            segment covers (note: a VAD that ends an utterance after silence_ms of
            silence, 1000 ms by default, plus its pre-roll bridges shorter gaps by design).
            sotto's segments: speech_start.start .. speech_end.end of the streamed events
            (an utterance closed by the window limit or by `stop` ends at its final's
            end; segments that touch are merged). Silero (onnx): silero_vad.onnx
            (models/silero_vad/, else the silero-vad package's) run here with onnxruntime, 512-sample windows with
            64 samples of context, speech from probability >= 0.5 until it stays under
            0.35 for 1000 ms (min silence), segments under 250 ms dropped, 200 ms of pad
            each side (overlaps merged). Left out, with a note, if onnxruntime or the
            package is not installed.

  python3 bench/bench_rooms.py --server build/sotto-server --model models/tiny.en
  python3 bench/bench_rooms.py --quick          # 2 conditions, 4 clips: a smoke run
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "ref"))

import numpy as np  # noqa: E402

import refcommon as rc  # noqa: E402
import rooms  # noqa: E402
import server_client as sc  # noqa: E402

CONDITIONS = ["clean"] + [f"{k}:{s}" for k in ("white", "pink", "babble") for s in (20, 10, 5, 0)]
QUICK_CONDITIONS = ["clean", "babble:5"]
QUICK_NONSPEECH = {"music": 20.0, "hum": 10.0}


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def nwords(text):
    return sum(1 for t in text.split() if any(c.isalnum() for c in t))


# ---------------------------------------------------------------------------
# VAD segments and scores


def sotto_segments(res, total_s):
    """Speech segments from a streamed session's events: speech_start.start ..
    speech_end.end; an utterance with no speech_end (cut by the window limit, or closed
    by `stop`) ends at its final's end, and a cut one continues from there until the
    next final (dropped if none comes)."""
    evs = [e for _, e in res.events]
    ended = {e.get("utterance") for e in evs if e.get("type") == "speech_end"}
    segs, open_at, cont = [], None, False
    for e in evs:
        t = e.get("type")
        if t == "speech_start":
            if open_at is None:
                open_at, cont = float(e.get("start", 0)), False
        elif t == "speech_end":
            if open_at is not None:
                segs.append((open_at, float(e.get("end", open_at))))
                open_at = None
        elif t == "final" and e.get("utterance") not in ended:
            s0 = open_at if open_at is not None else float(e.get("start", 0))
            segs.append((s0, float(e.get("end", s0))))
            open_at, cont = float(e.get("end", s0)), True
    if open_at is not None and not cont:
        segs.append((open_at, total_s))
    return merge(segs)


def merge(segs, touch=0.05):
    out = []
    for s, e in sorted(segs):
        if out and s <= out[-1][1] + touch:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def vad_scores(segs, clips, bridge_gap_s):
    """(missed clips, false segments, bridged gaps, gaps >= bridge_gap_s)."""
    def overlaps(a, b):
        return a[0] < b[1] and b[0] < a[1]
    missed = sum(1 for c in clips if not any(overlaps(c, s) for s in segs))
    false = sum(1 for s in segs if not any(overlaps(c, s) for c in clips))
    gaps = [(a[1], b[0]) for a, b in zip(clips, clips[1:]) if b[0] - a[1] >= bridge_gap_s]
    bridged = sum(1 for g in gaps if any(s[0] <= g[0] and s[1] >= g[1] for s in segs))
    return missed, false, bridged, len(gaps)


class SileroOnnx:
    """silero_vad.onnx (the silero-vad package) with onnxruntime, chunk-wise."""
    WIN, CTX = 512, 64

    def __init__(self, path):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(path, sess_options=so,
                                         providers=["CPUExecutionProvider"])
        self.path = path

    @staticmethod
    def find():
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return None, "onnxruntime is not installed"
        # the ONNX file scripts/fetch_silero.sh converted sotto's weights from
        local = os.path.join(rc.REPO, "models", "silero_vad", "silero_vad.onnx")
        if os.path.exists(local):
            return local, ""
        try:
            import importlib.util
            spec = importlib.util.find_spec("silero_vad")
        except Exception:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None, "the silero-vad package is not installed"
        for d in spec.submodule_search_locations:
            p = os.path.join(d, "data", "silero_vad.onnx")
            if os.path.exists(p):
                return p, ""
        return None, "silero_vad/data/silero_vad.onnx not found"

    def probs(self, x):
        state = np.zeros((2, 1, 128), np.float32)
        ctx = np.zeros((1, self.CTX), np.float32)
        sr = np.array(16000, np.int64)
        n = len(x) // self.WIN
        out = np.zeros(n, np.float32)
        for i in range(n):
            chunk = x[i * self.WIN:(i + 1) * self.WIN].astype(np.float32)[None, :]
            inp = np.concatenate([ctx, chunk], axis=1)
            p, state = self.sess.run(None, {"input": inp, "state": state, "sr": sr})
            ctx = inp[:, -self.CTX:]
            out[i] = p[0, 0]
        return out

    def segments(self, x, threshold=0.5, neg_threshold=0.35, min_silence_ms=1000,
                 min_speech_ms=250, pad_ms=200):
        p = self.probs(x)
        w = self.WIN / 16000.0
        segs, start, temp_end = [], None, None
        for i, v in enumerate(p):
            t = i * w
            if v >= threshold:
                temp_end = None
                if start is None:
                    start = t
            elif start is not None and v < neg_threshold:
                if temp_end is None:
                    temp_end = t
                if t + w - temp_end >= min_silence_ms / 1000.0:
                    segs.append((start, temp_end))
                    start, temp_end = None, None
        if start is not None:
            segs.append((start, len(x) / 16000.0))
        total = len(x) / 16000.0
        segs = [(max(0.0, s - pad_ms / 1000.0), min(total, e + pad_ms / 1000.0))
                for s, e in segs if e - s >= min_speech_ms / 1000.0]
        return merge(segs, 0.0)


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--threads", type=int, default=None, help="server threads (default: all)")
    ap.add_argument("--fw-threads", type=int, default=2, help="faster-whisper cpu_threads")
    ap.add_argument("--vad-kinds", default="energy,silero",
                    help="session vad.kind values to stream with (comma-separated)")
    ap.add_argument("--server-args", default="", help="extra sotto-server options (one string)")
    ap.add_argument("--start-json", default="{}",
                    help='extra session start fields, a JSON object (e.g. \'{"step_ms": 2000}\')')
    ap.add_argument("--clips", type=int, default=None, help="clips per stream (default 15; quick 4)")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--conditions", default=None,
                    help="comma-separated: clean, white:SNR, pink:SNR, babble:SNR "
                         f"(default {','.join(CONDITIONS)})")
    ap.add_argument("--nonspeech", default=None,
                    help="comma-separated NAME[:SECONDS] of " + ",".join(rooms.NONSPEECH))
    ap.add_argument("--speed", type=float, default=1.0, help="streaming pace, x real time")
    ap.add_argument("--parallel", type=int, default=1,
                    help="streams at once (each still at --speed; the server must sustain them)")
    ap.add_argument("--bridge-gap-s", type=float, default=1.0)
    ap.add_argument("--no-fw", action="store_true", help="leave out faster-whisper")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run: {QUICK_CONDITIONS}, 4 clips, non-speech "
                         f"{QUICK_NONSPEECH}")
    ap.add_argument("--keep", default="", help="write the WAVs here (default: a temp dir)")
    ap.add_argument("--verbose", action="store_true", help="print every final")
    ap.add_argument("--server-log", default=None, help="keep the server's log here")
    args = ap.parse_args()

    if not os.access(args.server, os.X_OK):
        sys.exit(f"not executable: {args.server}")
    nclips = args.clips or (4 if args.quick else 15)
    conds = (args.conditions.split(",") if args.conditions
             else QUICK_CONDITIONS if args.quick else CONDITIONS)
    if args.nonspeech is not None:
        ns = {}
        for x in filter(None, args.nonspeech.split(",")):
            name, _, secs = x.partition(":")
            if name not in rooms.NONSPEECH:
                sys.exit(f"unknown non-speech piece {name}")
            ns[name] = float(secs) if secs else rooms.NONSPEECH[name][1]
    else:
        ns = dict(QUICK_NONSPEECH) if args.quick else {n: v[1] for n, v in rooms.NONSPEECH.items()}
    kinds = [k for k in args.vad_kinds.split(",") if k]

    all_rows = rc.load_manifest(args.manifest)
    rows = [r for r in all_rows if r["language"] == "en"]
    base = rooms.join_clips(rooms.pick_clips(rows, nclips, seed=args.seed, min_s=2.0, max_s=16.0),
                            gap_s=(1.0, 4.0), seed=args.seed)
    streams = {}
    for c in conds:
        if c == "clean":
            streams[c] = base
        else:
            kind, _, snr = c.partition(":")
            streams[c] = rooms.add_noise(base, kind, float(snr), seed=args.seed + 1, rows=all_rows)
    pieces = {n: rooms.nonspeech(n, s, seed=args.seed) for n, s in ns.items()}
    tmp = args.keep or tempfile.mkdtemp(prefix="sotto-bench-rooms-")
    os.makedirs(tmp, exist_ok=True)
    paths = {}
    for name, st in list(streams.items()) + [(f"ns:{n}", p) for n, p in pieces.items()]:
        paths[name] = st.write_wav(os.path.join(tmp, name.replace(":", "_") + ".wav"))

    try:
        # the checkout the server binary was built in (another worktree, for a side-by-side run)
        commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(args.server)),
                                 "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    silero_path, silero_note = SileroOnnx.find()
    print("sotto-server in noise and on non-speech (bench/bench_rooms.py)")
    print(f"  machine: {cpu_model()}, {os.cpu_count()} logical CPUs; server threads "
          f"{args.threads or 'all'}, faster-whisper cpu_threads {args.fw_threads}")
    print(f"  server: {args.server} (commit {commit}, working tree may differ), model "
          f"{args.model}, extra options {args.server_args or 'none'}, extra start fields "
          f"{args.start_json}")
    print(f"  speech stream: {nclips} clips (seed {args.seed}), {base.seconds:.1f} s with 1-4 s "
          f"gaps ({sum(e - s for s, e in base.segments):.1f} s of clip speech spans); "
          f"conditions {conds}")
    print(f"  non-speech: " + ", ".join(f"{n} {p.seconds:.0f} s" for n, p in pieces.items()))
    print(f"  streamed at {args.speed:g}x real time, {args.parallel} at a time; sotto VAD kinds {kinds}; WAVs in {tmp}")
    print(f"  Silero (onnx): {silero_path or 'left out: ' + silero_note}")
    total_audio = sum(s.seconds for s in streams.values()) + sum(p.seconds for p in pieces.values())
    print(f"  audio per pass: {total_audio:.0f} s", flush=True)

    # --- sotto-server
    res = {}  # (kind, name) -> StreamResult
    srv = sc.Server(args.server, args.model, ["--max-buffer-s", "600"] + args.server_args.split(),
                    threads=args.threads, log_path=args.server_log)
    srv.start()
    t0 = time.monotonic()
    try:
        probe = sc.stream(srv.ws_url, sc.Audio.pcm(rooms.to_pcm16(rooms.digital_silence(0.5))))
        if not probe.ready:
            sys.exit(f"the server refused a plain session: {probe.errors or probe.exception}")
        default_kind = ((probe.ready or {}).get("vad") or {}).get("kind", "energy")
        print(f"  server's default VAD kind: {default_kind}; ready.vad "
              f"{(probe.ready or {}).get('vad')}", flush=True)
        items = list(streams.items()) + [(f"ns:{n}", p) for n, p in pieces.items()]
        for kind in kinds:
            start = dict(json.loads(args.start_json))
            if kind != default_kind:
                start["vad"] = {**start.get("vad", {}), "kind": kind}
            t1 = time.monotonic()
            out = sc.run(sc.stream_many(
                srv.ws_url, {name: sc.Audio.pcm(st.pcm16()) for name, st in items},
                concurrency=args.parallel, realtime=True, speed=args.speed, start=start,
                timeout=max(st.seconds for _, st in items) / args.speed + 600))
            for name, st in items:
                r = out[name]
                got = ((r.ready or {}).get("vad") or {}).get("kind", default_kind)
                res[(kind, name)] = r
                errs = [f"{e.get('code')}: {e.get('message')}" for e in r.errors]
                print(f"  sotto {kind:7s} {name:12s} {st.seconds:6.1f} s, "
                      f"{len(r.finals())} finals"
                      + (f" (ready says vad kind {got}!)" if got != kind else "")
                      + (f", errors {errs}" if errs else "")
                      + (f", dropped {r.done.get('dropped_seconds')} s"
                         if r.done and r.done.get("dropped_seconds") else ""), flush=True)
                if args.verbose:
                    for u, f in sorted(r.finals().items()):
                        print(f"      [{f.get('start', 0):7.2f}-{f.get('end', 0):7.2f}] "
                              f"{f.get('text', '').strip()!r}")
            print(f"  sotto {kind}: {len(items)} streams, {args.parallel} at a time, in "
                  f"{time.monotonic() - t1:.0f} s", flush=True)
    finally:
        srv.stop()
    print(f"  streaming: {time.monotonic() - t0:.0f} s", flush=True)

    # --- faster-whisper
    fw = {}  # (vad_filter, name) -> list of segment texts
    if not args.no_fw:
        try:
            from faster_whisper import WhisperModel
            t0 = time.monotonic()
            model = WhisperModel(args.model, device="cpu", compute_type="float32",
                                 cpu_threads=args.fw_threads)
            import faster_whisper
            print(f"  faster-whisper {faster_whisper.__version__}: model loaded in "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
            for vf in (True, False):
                t1 = time.monotonic()
                for name in paths:
                    segs, _ = model.transcribe(paths[name], language="en", vad_filter=vf)
                    fw[(vf, name)] = [s.text for s in segs]
                print(f"  faster-whisper vad_filter={vf}: {time.monotonic() - t1:.0f} s", flush=True)
        except ImportError as e:
            print(f"  faster-whisper left out: {e}")

    # --- Silero (onnx)
    sil = {}
    if silero_path:
        t0 = time.monotonic()
        vad = SileroOnnx(silero_path)
        for name, st in streams.items():
            sil[name] = vad.segments(st.audio)
        print(f"  Silero (onnx) segments: {time.monotonic() - t0:.1f} s")

    # --- tables
    cols = [f"sotto {k}" for k in kinds] + (["fw vad", "fw no-vad"] if fw else [])

    def texts(col, name):
        if col.startswith("sotto "):
            r = res.get((col[6:], name))
            return [f.get("text", "") for _, f in sorted(r.finals().items())] if r else None
        vf = col == "fw vad"
        return fw.get((vf, name))

    print("\nWER (%) of each stream, and finals/segments with a repetition loop")
    print(f"  {'condition':12s} " + " ".join(f"{c:>16s}" for c in cols))
    tot = {c: [0, 0] for c in cols}
    for name, st in streams.items():
        cells = []
        for c in cols:
            t = texts(c, name)
            if t is None:
                cells.append(f"{'-':>16s}")
                continue
            e, n = rooms.errors(st.reference, " ".join(t))
            loops = sum(1 for x in t if rooms.has_loop(x))
            tot[c][0] += e
            tot[c][1] += n
            cells.append(f"{100.0 * e / max(1, n):8.1f} ({loops:2d} lp)")
        print(f"  {name:12s} " + " ".join(cells))
    print(f"  {'all':12s} " + " ".join(f"{100.0 * tot[c][0] / max(1, tot[c][1]):8.1f}        "
                                       for c in cols))
    for name in streams:  # every looping final in full, with the n-gram that repeats
        for c in cols:
            for x in texts(c, name) or []:
                g = rooms.loop_ngram(x, 4, 3)
                if g is not None:
                    print(f"  loop in {c}, {name} ('{g[0]}' {g[1]} times): {x!r}")

    print("\nwords emitted on non-speech")
    print(f"  {'piece':12s} {'s':>5s} " + " ".join(f"{c:>12s}" for c in cols))
    for n, p in pieces.items():
        cells = []
        for c in cols:
            t = texts(c, f"ns:{n}")
            cells.append(f"{'-':>12s}" if t is None else f"{nwords(' '.join(t)):12d}")
        print(f"  {n:12s} {p.seconds:5.0f} " + " ".join(cells))
    for n in pieces:
        for c in cols:
            t = texts(c, f"ns:{n}")
            if t and " ".join(t).strip():
                print(f"    {n} / {c}: {' '.join(' '.join(t).split())[:120]!r}")

    vcols = [f"sotto {k}" for k in kinds] + (["silero onnx"] if silero_path else [])
    print(f"\nVAD against the clip boundaries: missed clips / false segments / bridged gaps "
          f"(of gaps >= {args.bridge_gap_s:g} s); {nclips} clips per stream")
    print(f"  {'condition':12s} " + " ".join(f"{c:>16s}" for c in vcols))
    for name, st in streams.items():
        cells = []
        for c in vcols:
            if c == "silero onnx":
                segs = sil[name]
            else:
                segs = sotto_segments(res[(c[6:], name)], st.seconds)
            m, f, b, g = vad_scores(segs, st.segments, args.bridge_gap_s)
            cells.append(f"{m:3d} / {f:3d} / {b:2d} ({g})")
        print(f"  {name:12s} " + " ".join(f"{x:>16s}" for x in cells))
    if not silero_path:
        print(f"  (Silero onnx column left out: {silero_note})")


if __name__ == "__main__":
    main()
