"""Streamed WER of sotto-server on the dev clips for one set of session options.

Streams every English dev clip as fast as the server takes them (2 sessions
at a time) with the given `start` options and audio variant, and prints the
corpus WER of the finals, with and without the 324 s chapter, and the clips
whose final text holds a loop (a phrase 3+ times in a row, 4+ words). With
--offline-opus it instead prints the offline CLI's WER on the Opus-decoded
audio (the same packets the streaming test sends). docs/PERF.md's table
"Accuracy: streamed finals vs the offline CLI" was made with this command.

  python3 bench/bench_stream_wer.py --start '{"vad": {"silence_ms": 800}}' --variant opus
  python3 bench/bench_stream_wer.py --server-args "--audio-ctx all"
  python3 bench/bench_stream_wer.py --multilingual models/base --server-args "--audio-ctx all"

With --multilingual MODEL the server also loads that (multilingual) model, and
the non-English dev clips are streamed to it with language auto after the
English ones: their CER beside the offline CLI's on the same clips (greedy,
temperature 0, language auto) and the language each session detected.
Every run ends with the server's counter of final text dropped as invented
(sotto_final_tails_dropped_total).
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
import wave

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "ref"))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402


def offline_opus(args, rows, tmp):
    lib = sc._opus()
    files = []
    for r in rows:
        a = sc.load_clip(r["file"], "opus", tmp)
        err = ctypes.c_int(0)
        dec = lib.opus_decoder_create(48000, 1, ctypes.byref(err))
        pcm = (ctypes.c_int16 * 5760)()
        out = bytearray()
        for p in a.messages:
            n = lib.opus_decode(dec, p, len(p), pcm, 5760, 0)
            out += bytes(pcm)[:max(n, 0) * 2]
        lib.opus_decoder_destroy(dec)
        dst = os.path.join(tmp, f"{r['id']}.opus.wav")
        with wave.open(dst, "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(48000), w.writeframes(bytes(out))
        files.append(dst)
    res = rc.run_sotto(args.sotto, args.model, files, ["--beam", "1", "--temperature", "0"])
    return {r["id"]: res[f]["text"] for r, f in zip(rows, files)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--start", default="{}", help="JSON fields added to every start message")
    ap.add_argument("--server-args", default="", help="extra sotto-server options, e.g. '--audio-ctx all'")
    ap.add_argument("--variant", default="s16_16k", help="s16_16k | s16_48k | opus | f32_16k")
    ap.add_argument("--offline-opus", action="store_true")
    ap.add_argument("--realtime", action="store_true",
                    help="send the audio at real-time pace (partial passes every step, as live clients)")
    ap.add_argument("--concurrency", type=int, default=2, help="sessions at a time (default 2)")
    ap.add_argument("--dump", help="write {clip id: hypothesis} as JSON to this file, to compare runs")
    ap.add_argument("--paired-with", metavar="DUMP",
                    help="a --dump of another run: print WER(this) - WER(that) with a paired bootstrap "
                         "95%% interval over the clips, and the clips that moved most")
    ap.add_argument("--multilingual", metavar="MODEL",
                    help="also stream the non-English clips to this multilingual model (language auto)")
    ap.add_argument("--compare-only", action="store_true",
                    help="with --paired-with and --dump: compare the two dumps, stream nothing")
    args = ap.parse_args()
    rows = rc.load_manifest(args.manifest, {"en"})
    tmp = tempfile.mkdtemp(prefix="sotto-wer-")
    t0 = time.monotonic()
    if args.compare_only:
        with open(args.dump) as f:
            hyps = json.load(f)
        label = f"dump {args.dump}"
    elif args.offline_opus:
        hyps = offline_opus(args, rows, tmp)
        label = "offline CLI on the Opus-decoded audio"
    else:
        start = json.loads(args.start)
        extra = ["--model", args.multilingual] if args.multilingual else []
        srv = sc.Server(args.server, args.model,
                        ["--max-buffer-s", "600"] + extra + args.server_args.split()).start()
        try:
            audios = {r["id"]: sc.load_clip(r["file"], args.variant, tmp) for r in rows}
            res = sc.run(sc.stream_many(srv.ws_url, audios, concurrency=args.concurrency, wait_ready=False,
                                        start=start, realtime=args.realtime))
            multi = multilingual(args, srv, start, tmp) if args.multilingual else None
            dropped = srv.metrics().get("sotto_final_tails_dropped_total", 0)
        finally:
            srv.stop()
        hyps = {k: v.transcript for k, v in res.items()}
        label = (f"streamed {args.variant}{' at real-time pace' if args.realtime else ''}, "
                 f"{args.concurrency} at a time, start {start}") + (f", server {args.server_args}" if args.server_args else "")
    if args.dump and not args.compare_only:
        with open(args.dump, "w") as f:
            json.dump(hyps, f, indent=1, sort_keys=True)
    short = [r for r in rows if not r["id"].startswith("long_")]
    w = rc.corpus_wer([r["text"] for r in rows], [hyps[r["id"]] for r in rows])
    w_short = rc.corpus_wer([r["text"] for r in short], [hyps[r["id"]] for r in short])
    print(f"{label}: corpus WER {w:.2f}% over {len(rows)} clips ({w_short:.2f}% without the "
          f"long chapter), {time.monotonic() - t0:.0f} s")
    loops = looping_clips(hyps)
    print(f"clips with a loop (a phrase 3+ times in a row, 4+ words in all): {len(loops)}"
          + "".join(f"\n  {k}: {phrase!r}" for k, phrase in loops))
    if args.paired_with:
        paired(rows, hyps, args.paired_with)
    if not args.compare_only and not args.offline_opus:
        print(f"final text dropped as invented (sotto_final_tails_dropped_total): {dropped:.0f}")
        if multi:
            print_multilingual(args, multi, tmp)


def multilingual(args, srv, start, tmp):
    """{clip id: (row, stream result)} for the non-English clips on the multilingual model."""
    rows = [r for r in rc.load_manifest(args.manifest) if r["language"] != "en"]
    name = os.path.basename(os.path.normpath(args.multilingual))
    st = dict(start, model=name, language="auto")
    audios = {r["id"]: sc.load_clip(r["file"], args.variant, tmp) for r in rows}
    res = sc.run(sc.stream_many(srv.ws_url, audios, concurrency=args.concurrency, wait_ready=False,
                                start=st, realtime=args.realtime))
    return {r["id"]: (r, res[r["id"]]) for r in rows}


def print_multilingual(args, multi, tmp):
    import test_multilingual as tm
    rows = [r for r, _ in multi.values()]
    off = rc.run_sotto(args.sotto, args.multilingual, [r["file"] for r in rows],
                       ["--language", "auto", "--beam", "1", "--temperature", "0"])
    name = os.path.basename(os.path.normpath(args.multilingual))
    print(f"non-English clips on {name}, language auto: CER streamed / offline CLI (greedy, t 0)")
    cs, co = [], []
    for k, (r, res) in multi.items():
        lang = [e.get("language") for e in res.of_type("language")]
        c_s, c_o = tm.cer(r["text"], res.transcript, r["language"]), tm.cer(r["text"], off[r["file"]]["text"],
                                                                            r["language"])
        cs.append(c_s)
        co.append(c_o)
        print(f"  {k} [{r['language']}, detected {lang[0] if lang else None}]: {c_s:.1f}% / {c_o:.1f}%  "
              f"{res.transcript.strip()[:70]!r}")
    print(f"  mean CER over {len(cs)} clips: streamed {sum(cs) / len(cs):.1f}%, offline {sum(co) / len(co):.1f}%")


def looping_clips(hyps):
    """(clip id, the repeated phrase) for every hypothesis in which a phrase (of up
    to 16 normalized words) is said 3 or more times in a row, 4 or more words in all."""
    out = []
    for k in sorted(hyps):
        words = rc.normalize(hyps[k]).split()
        run = rc.repeated_run(words, min_copies=3, min_words=4)
        if run:
            out.append((k, " ".join(words[run[2]:run[2] + run[0]])))
    return out


def paired(rows, hyps, other_path):
    """Paired bootstrap of this run's WER minus another dump's (bench_quant.py's statistics)."""
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_quant as bq
    with open(other_path) as f:
        other = json.load(f)
    rows = [r for r in rows if r["id"] in other]
    refs = [rc.normalize(r["text"]) for r in rows]
    e_a, n = bq.clip_errors(refs, [rc.normalize(hyps[r["id"]]) for r in rows])
    e_b, _ = bq.clip_errors(refs, [rc.normalize(other[r["id"]]) for r in rows])
    lo, hi = bq.bootstrap_diff(e_a, e_b, n, 10000, 1)
    d = 100.0 * (e_a.sum() - e_b.sum()) / max(1, n.sum())
    print(f"vs {other_path}: {d:+.2f} pp [{lo:+.2f}, {hi:+.2f}] (paired bootstrap 95%, {len(rows)} clips, "
          f"{int(n.sum())} words); clips better {int((e_a < e_b).sum())}, worse {int((e_a > e_b).sum())}, "
          f"same {int((e_a == e_b).sum())}")
    for i in np.argsort(-np.abs(e_a - e_b))[:5]:
        if e_a[i] != e_b[i]:
            print(f"  {rows[i]['id']}: {int(e_b[i])} -> {int(e_a[i])} errors of {int(n[i])} words")


if __name__ == "__main__":
    main()
