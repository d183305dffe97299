#!/usr/bin/env bash
# Fetches the Silero VAD model (the ONNX file of the `silero-vad` wheel on
# PyPI) and converts it once to models/silero_vad/silero_vad.safetensors for
# vad/silero.c (scripts/convert_silero.py, run in .venv with onnx + numpy).
#   scripts/fetch_silero.sh
# Output, in models/silero_vad/ (ignored by git):
#   silero_vad.safetensors   the 16 kHz weights (read by sotto at run time)
#   silero_vad.onnx          the original model (for tests/ref/test_silero_ref.py)
#   SHA256SUMS               of both; "complete" means it checks out
# Idempotent: a complete model is not fetched again. Only the .onnx data file
# is taken from the wheel; no code of it runs. Exit status non-zero on failure.
set -euo pipefail

SILERO_VERSION=6.2.3
ONNX_SHA256=1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
PY_ONNX=1.23.2
PY_NUMPY=2.4.6

root=$(cd "$(dirname "$0")/.." && pwd)
dst="$root/models/silero_vad"

die() { echo "fetch_silero: $*" >&2; exit 1; }

complete() { # dir
  [ -s "$1/silero_vad.safetensors" ] && [ -s "$1/silero_vad.onnx" ] && [ -s "$1/SHA256SUMS" ] \
    && (cd "$1" && sha256sum --quiet --status -c SHA256SUMS) 2>/dev/null
}

if complete "$dst"; then echo "models/silero_vad: present"; exit 0; fi

command -v python3 >/dev/null || die "python3 is required (apt-get install python3 python3-venv)"
command -v unzip >/dev/null || die "unzip is required (apt-get install unzip)"
command -v sha256sum >/dev/null || die "sha256sum is required (coreutils)"

venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || die "python3 -m venv $venv failed (apt-get install python3-venv)"
fi
py="$venv/bin/python"
if ! "$py" -c "import numpy, onnx, sys; sys.exit(onnx.__version__ != '$PY_ONNX')" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check "onnx==$PY_ONNX" "numpy==$PY_NUMPY" \
    || die "pip install of onnx==$PY_ONNX numpy==$PY_NUMPY into $venv failed"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --no-deps --disable-pip-version-check -q -d "$tmp" \
  "silero-vad==$SILERO_VERSION" || die "could not download silero-vad==$SILERO_VERSION from PyPI"
whl=$(ls "$tmp"/silero_vad-"$SILERO_VERSION"-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || die "pip did not leave a silero_vad-$SILERO_VERSION wheel in $tmp"
unzip -q -o "$whl" 'silero_vad/data/silero_vad.onnx' -d "$tmp/x" \
  || die "$(basename "$whl") has no silero_vad/data/silero_vad.onnx"
onnx="$tmp/x/silero_vad/data/silero_vad.onnx"
sha=$(sha256sum "$onnx" | cut -d' ' -f1)
[ "$sha" = "$ONNX_SHA256" ] \
  || die "silero_vad.onnx of silero-vad $SILERO_VERSION has sha256 $sha, expected $ONNX_SHA256"

rm -rf "$dst.partial"; mkdir -p "$dst.partial"
cp "$onnx" "$dst.partial/silero_vad.onnx"
"$py" "$root/scripts/convert_silero.py" "$dst.partial/silero_vad.onnx" \
  "$dst.partial/silero_vad.safetensors" --source-name "silero-vad==$SILERO_VERSION:silero_vad/data/silero_vad.onnx" \
  || die "conversion failed (scripts/convert_silero.py)"
(cd "$dst.partial" && sha256sum silero_vad.safetensors silero_vad.onnx > SHA256SUMS) \
  || die "could not write SHA256SUMS"
rm -rf "$dst"; mv "$dst.partial" "$dst"
complete "$dst" || die "models/silero_vad is incomplete after conversion"
echo "models/silero_vad: fetched silero-vad $SILERO_VERSION and converted ($(du -sh "$dst" | cut -f1))"
