#!/usr/bin/env bash
# tests/gpu/device_run.sh - the command of the device call (see pack.sh's
# header): runs check.sh under an overall time limit and brings back its whole
# log and every result file in two files under $OUT (the device tool returns
# at most 8): $OUT/check.log and $OUT/results.tgz.
#
#   tests/gpu/device_run.sh [LIMIT_S]     LIMIT_S: default 500
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
limit=${1:-500}
: "${OUT:=$root/build-gpu/out-dev}"
mkdir -p "$OUT"
res=$root/build-gpu/results
rm -rf "$res" && mkdir -p "$res"
export CHECK_BUDGET_S=${CHECK_BUDGET_S:-$((limit - 90))}
OUT=$res timeout -k 10 "$limit" tests/gpu/check.sh 2>&1 | tee "$OUT/check.log"
rc=${PIPESTATUS[0]}
echo "check.sh exit status: $rc" | tee -a "$OUT/check.log"
tar -czf "$OUT/results.tgz" -C "$res" . 2>/dev/null
exit "$rc"
