"""The speaker-level gate of the VAD (include/vad.h: start_gate_db, end_gate_db), measured
offline on bench_rooms' streams. Reports; asserts nothing.

For each condition (bench_rooms' 15-clip stream, seed 5, clean or with noise), the Silero
network (models/silero_vad/silero_vad.onnx with onnxruntime, as bench_rooms' Silero column)
gives per-chunk probabilities, and this script

  1. prints where the chunks that the network calls speech (probability >= 0.5) lie
     against the speaker's level (the 90th percentile of the power of the speech chunks of
     the last 20 s, as vad.c): the share more than X dB under it, inside the clips (the
     speaker) and in the pauses between them (background talkers, noise);
  2. runs an emulation of sotto's endpointer (hysteresis 0.5 / 0.35, 3 chunks to start,
     1000 ms of non-speech to end, 300 ms pre-roll and tail) with each --gates pair
     START/END (dB, "off" for none) and prints missed clips / false segments / bridged
     gaps as bench_rooms does, and "splits": extra segments inside a clip (pauses of the
     speaker that ended an utterance).

The emulation is not sotto's C code (tests/test_vad.c tests that); it is how the gate's
defaults were chosen before the streamed runs of bench_rooms.py.

  python3 bench/vad_gate.py --conditions clean,babble:20,babble:10 --gates off/off,15/off,15/20
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "ref"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import refcommon as rc  # noqa: E402
import rooms  # noqa: E402
from bench_rooms import SileroOnnx, vad_scores  # noqa: E402

CHUNK_S = 512 / 16000
WINDOW_S, PCT, MIN_CHUNKS = 20.0, 90, 16  # vad.c: LVL_WINDOW_MS, LVL_PCT, LVL_MIN_MS (0.5 s)


def chunk_levels(x, n):
    return np.array([10 * np.log10(np.mean(x[i * 512:(i + 1) * 512] ** 2) + 1e-12)
                     for i in range(n)])


def endpoint(p, lv, start_db, end_db):
    """Segments (s) of the emulated endpointer with the gate (None: off)."""
    segs, ins, prev, hist, sil, run, start, last = [], False, False, [], 0, 0, 0.0, 0.0
    for i in range(len(p)):
        d = p[i] >= (0.35 if (prev or ins) else 0.5)
        prev = d
        t = i * CHUNK_S
        hist = [h for h in hist if h[0] > t - WINDOW_S]
        lim = end_db if ins else start_db
        if d and lim is not None and len(hist) >= MIN_CHUNKS:
            if lv[i] < np.percentile([h[1] for h in hist], PCT) - lim:
                d = False
        if d:
            hist.append((t, lv[i]))
        run = run + 1 if d else 0
        if not ins:
            if run >= 3:
                ins, start, last, sil = True, max(0.0, (i - 2) * CHUNK_S - 0.3), (i + 1) * CHUNK_S, 0
        elif d:
            last, sil = (i + 1) * CHUNK_S, 0
        else:
            sil += 1
            if sil >= 32:
                segs.append((start, last + 0.3))
                ins = False
    if ins:
        segs.append((start, len(p) * CHUNK_S))
    return segs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--clips", type=int, default=15)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--conditions", default="clean,white:10,pink:0,babble:20,babble:10,babble:5")
    ap.add_argument("--gates", default="off/off,15/off,15/20,20/20",
                    help="comma-separated START/END gate pairs in dB, 'off' for none")
    args = ap.parse_args()
    path, note = SileroOnnx.find()
    if not path:
        sys.exit(f"Silero (onnx) not available: {note}")
    vad = SileroOnnx(path)
    rows = rc.load_manifest(args.manifest)
    en = [r for r in rows if r["language"] == "en"]
    base = rooms.join_clips(rooms.pick_clips(en, args.clips, seed=args.seed, min_s=2.0, max_s=16.0),
                            gap_s=(1.0, 4.0), seed=args.seed)
    gates = [tuple(None if x == "off" else float(x) for x in g.split("/"))
             for g in args.gates.split(",")]
    print(f"VAD speaker-level gate, emulated (bench/vad_gate.py): {args.clips} clips (seed "
          f"{args.seed}), {base.seconds:.1f} s; Silero {path}")
    for cond in args.conditions.split(","):
        if cond == "clean":
            st = base
        else:
            kind, _, snr = cond.partition(":")
            st = rooms.add_noise(base, kind, float(snr), seed=args.seed + 1, rows=rows)
        x = st.audio
        p = vad.probs(x)
        n = len(p)
        lv = chunk_levels(x, n)
        t = (np.arange(n) + 0.5) * CHUNK_S
        inclip = np.zeros(n, bool)
        for a, b in st.segments:
            inclip |= (t >= a) & (t <= b)
        ref = np.full(n, np.nan)
        hist = []
        for i in range(n):
            if p[i] >= 0.5:
                hist.append((t[i], lv[i]))
            hist = [h for h in hist if h[0] > t[i] - WINDOW_S]
            if len(hist) >= MIN_CHUNKS:
                ref[i] = np.percentile([h[1] for h in hist], PCT)
        rel = lv - ref
        sp = (p >= 0.5) & ~np.isnan(rel)
        print(f"\n{cond}: chunks called speech: {(sp & inclip).sum()} in the clips, "
              f"{(sp & ~inclip).sum()} in the pauses")
        for X in (10, 15, 20):
            a = ((rel < -X) & sp & inclip).sum() / max(1, (sp & inclip).sum())
            b = ((rel < -X) & sp & ~inclip).sum() / max(1, (sp & ~inclip).sum())
            print(f"  more than {X:2d} dB under the speaker's level: clips {100 * a:5.1f} %, "
                  f"pauses {100 * b:5.1f} %")
        for g in gates:
            segs = endpoint(p, lv, g[0], g[1])
            m, f, b, gg = vad_scores(segs, st.segments, 1.0)
            splits = sum(max(0, sum(1 for s, e in segs if e > a and s < bb) - 1)
                         for a, bb in st.segments)
            name = "/".join("off" if v is None else f"{v:g}" for v in g)
            print(f"  gate {name:>7s}: {len(segs):3d} segments, missed {m}, false {f}, "
                  f"bridged {b}/{gg}, splits {splits}")


if __name__ == "__main__":
    main()
