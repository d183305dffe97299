#!/usr/bin/env bash
# Synthesizes the 4-bit calibration audio with espeak-ng: bench/calib/sentences.txt
# (text written for this, in no evaluation set) spoken by six voices, five
# sentences per clip, one WAV per clip in OUTDIR. Synthetic speech keeps the
# calibration set disjoint from every recording that sotto is evaluated on.
#
#   scripts/calib_audio.sh OUTDIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: calib_audio.sh OUTDIR}
command -v espeak-ng >/dev/null || { echo "calib_audio: espeak-ng is not installed" >&2; exit 1; }
mkdir -p "$out"
voices=(en-us en-gb en-us+f3 en-gb-scotland en-us+m3 en-029)
speeds=(165 150 175 155 170 160)
mapfile -t lines < "$root/bench/calib/sentences.txt"
for i in "${!voices[@]}"; do
  text=""
  for j in 0 1 2 3 4; do text+="${lines[$(( (i * 5 + j) % ${#lines[@]} ))]} "; done
  espeak-ng -v "${voices[$i]}" -s "${speeds[$i]}" -w "$out/calib_$i.wav" "$text"
done
ls "$out"/calib_*.wav
