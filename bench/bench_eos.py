"""The last final after `stop`, when the speaker pauses before stopping.

Streams the first N short English dev clips (under 16 s), each with PAUSE s of
digital silence appended, one session at a time at SPEED x real time, through
each given sotto-server binary in turn, and prints for each: the time from
`stop` to the last final (median, max, every clip; negative: the final came
before stop) and whether the finals' text is the same for every binary.

  python3 bench/bench_eos.py build/sotto-server /tmp/old/sotto-server
"""
import argparse
import os
import statistics
import sys
import tempfile
import wave

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "ref"))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("servers", nargs="+", help="sotto-server binaries to compare")
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--clips", type=int, default=12)
    ap.add_argument("--pause", type=float, default=0.7, help="silence appended to each clip, s")
    ap.add_argument("--speed", type=float, default=1.5)
    args = ap.parse_args()
    rows = [r for r in rc.load_manifest(args.manifest) if r["language"] == "en" and r["seconds"] < 16]
    rows = rows[:args.clips]
    print(f"{len(rows)} clips + {args.pause} s of silence each, one session at a time at "
          f"{args.speed}x real time, model {args.model}, {os.cpu_count()} cores")
    texts = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for r in rows:
            with wave.open(r["file"]) as w:
                p, d = w.getparams(), w.readframes(w.getnframes())
            out = os.path.join(tmp, os.path.basename(r["file"]))
            with wave.open(out, "wb") as o:
                o.setparams(p)
                o.writeframes(d + b"\0\0" * int(args.pause * p.framerate) * p.nchannels)
            files.append(out)
        for b in args.servers:
            srv = sc.Server(b, model=args.model)
            srv.start()
            lat, out = [], []
            for f in files:
                r = sc.stream(srv.ws_url, sc.load_clip(f), realtime=True, speed=args.speed)
                tf = [t for t, e in r.events if e.get("type") == "final"]
                lat.append(tf[-1] - r.t_stop if tf and r.t_stop else float("nan"))
                out.append(" ".join(e["text"] for e in r.of_type("final")))
            srv.stop()
            texts[b] = out
            s = sorted(lat)
            print(f"{b}: last final after stop: median {statistics.median(s):.2f} s, max {s[-1]:.2f} s; "
                  f"every clip {[round(x, 2) for x in s]}")
    first = texts[args.servers[0]]
    for b in args.servers[1:]:
        diff = [i for i, (x, y) in enumerate(zip(first, texts[b])) if x != y]
        print(f"{b} vs {args.servers[0]}: finals' text differs on {len(diff)} of {len(first)} clips")
        for i in diff:
            print(f"  {os.path.basename(rows[i]['file'])}:\n    {first[i]}\n    {texts[b][i]}")


if __name__ == "__main__":
    main()
