"""Where the server's decoding passes spend their time, from a sotto-server log
at --log-level debug (server/worker.c logs one line per pass). Reports; asserts
nothing. For each kind of pass (final, partial): p50 and p95 of its audio, its
wait between becoming due and its batch starting, the batch's size, the batch's
encode and decode, its own temperature fallback, and the time from due to done.

  python3 bench/bench_server.py --skip-latency --min-streams 8 --max-streams 8 \\
      --server-arg=--log-level=debug          # prints nothing of the log
  python3 bench/pass_times.py /tmp/sotto-server-XXXX.log   # the newest server log
"""
import re
import sys

LINE = re.compile(r"(final|partial) pass \d+: ([\d.]+) s audio, waited ([\d.]+) s, batch of (\d+) "
                  r"\((\d+) final\), encode ([\d.]+) s, decode ([\d.]+) s, fallback ([\d.]+) s, "
                  r"(\d+) tokens; ([\d.]+) s since due")
COLUMNS = ("audio", "waited", "batch", "finals", "encode", "decode", "fallback", "tokens", "total")
SHOWN = ("audio", "waited", "batch", "encode", "decode", "fallback", "total")


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    passes = {"final": [], "partial": []}
    with open(sys.argv[1]) as f:
        for line in f:
            m = LINE.search(line)
            if m:
                passes[m.group(1)].append(dict(zip(COLUMNS, map(float, m.groups()[1:]))))
    if not any(passes.values()):
        sys.exit(f"no pass lines in {sys.argv[1]} (was the server at --log-level debug?)")
    for kind, rows in passes.items():
        if rows:
            print(f"{kind} passes: {len(rows)}; " + "; ".join(
                f"{c} p50 {quantile([r[c] for r in rows], .5):.2f} p95 {quantile([r[c] for r in rows], .95):.2f}"
                for c in SHOWN))


if __name__ == "__main__":
    main()
