#!/usr/bin/env bash
# tests/gpu/pack.sh - prepares, on this machine, what the device check carries
# to the GPU machine, in .gpu/ (ignored by git):
#
#   .gpu/c1/bin    test_device, bench_engine, the sotto CLI and the kernel
#                  tests and timings (test_cuda_linear, test_cuda_ops,
#                  bench_cuda_linear, bench_cuda_attention), built here with
#                  CUDA for sm_90 and without -march=native (the GPU machine's
#                  CPU may differ)
#   .gpu/c1/lib    the shared libraries they need that the GPU image lacks
#                  (OpenBLAS, libgfortran, speexdsp, cJSON, ...); glibc and
#                  cuBLAS come from the image
#   .gpu/c1/model  tiny.en's small files; .gpu/c2 and .gpu/c3 hold the two
#                  halves of its model.bin (one device call carries <= 64 MiB)
#   .gpu/c1/audio  a few dev clips and their manifest lines
#   .gpu/c1/py     websockets (for tests/gpu/server_check.py), and sotto-server
#                  with the Silero VAD in .gpu/c1/model/silero_vad
#
#   .gpu/c1.tar.xz c1 compressed (xz), which is what travels
#
# Then, in ONE warm lease (the machine keeps carried paths between calls; one
# call carries at most 64 MiB with the working tree):
#   run(carry=[".gpu/c2"], command="true")
#   run(carry=[".gpu/c1.tar.xz", ".gpu/c3"], command="tests/gpu/device_run.sh", timeout_s=...)
# check.sh unpacks c1.tar.xz, finds .gpu/ and adds the engine checks and
# tables to the kernel ones.
#
#   tests/gpu/pack.sh [MANIFEST]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
manifest=${1:-$(dirname "$root")/shared/audio/manifest.tsv}
die() { echo "pack: $*" >&2; exit 1; }
[ -f models/tiny.en/model.bin ] || die "models/tiny.en is missing (scripts/setup.sh fetches it)"
[ -f "$manifest" ] || die "no manifest at $manifest"

build=$root/build-gpu-pack
conf=$(cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSOTTO_NATIVE=OFF -DSOTTO_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90) || die "cmake failed"
grep -q "CUDA backend: .*nvcc" <<<"$conf" || die "nvcc was not found"
cmake --build "$build" -j "$(nproc)" --target test_device bench_engine sotto_cli sotto_server test_cuda_linear test_cuda_ops bench_cuda_linear bench_cuda_attention >/dev/null \
  || die "build failed"

rm -rf .gpu
mkdir -p .gpu/c1/bin .gpu/c1/lib .gpu/c1/model/tiny.en .gpu/c1/audio .gpu/c2 .gpu/c3
cp "$build/test_device" "$build/bench_engine" "$build/sotto" "$build/sotto-server" "$build/test_cuda_linear" "$build/test_cuda_ops" "$build/bench_cuda_linear" "$build/bench_cuda_attention" .gpu/c1/bin/
# every shared library but glibc's own and CUDA's (the image has a matching toolkit)
for b in .gpu/c1/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcublas*|libcudart*) ;;
    *) cp -L "$lib" .gpu/c1/lib/ ;;
  esac
done
cp models/tiny.en/config.json models/tiny.en/tokenizer.json models/tiny.en/vocabulary.txt .gpu/c1/model/tiny.en/
[ -f models/silero_vad/silero_vad.safetensors ] || die "models/silero_vad is missing (scripts/fetch_models.sh fetches it)"
mkdir -p .gpu/c1/model/silero_vad .gpu/c1/py
cp models/silero_vad/silero_vad.safetensors .gpu/c1/model/silero_vad/
# the server check's WebSocket client for the device machine's Python 3.12 (which lacks it)
whl=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 -d "$whl" websockets==15.0.1 || die "pip download websockets failed"
python3 -m zipfile -e "$whl"/websockets-*.whl .gpu/c1/py/
rm -rf "$whl"
split -n 2 -d models/tiny.en/model.bin .gpu/model.bin.
mv .gpu/model.bin.00 .gpu/c2/model.bin.00
mv .gpu/model.bin.01 .gpu/c3/model.bin.01
sha256sum models/tiny.en/model.bin | awk '{print $1}' >.gpu/c1/model/tiny.en/model.bin.sha256

# clips: jfk and three LibriSpeech utterances, with their manifest lines
adir=$(dirname "$manifest")
head -1 "$manifest" >.gpu/c1/audio/manifest.tsv
for id in jfk librispeech_test-clean_1089-134686-0000 librispeech_test-clean_1089-134686-0001 \
          librispeech_test-clean_1089-134686-0002; do
  line=$(awk -F'\t' -v id="$id" '$1 == id' "$manifest")
  [ -n "$line" ] || die "clip $id is not in $manifest"
  printf '%s\n' "$line" >>.gpu/c1/audio/manifest.tsv
  cp "$adir/$(printf '%s' "$line" | cut -f2)" .gpu/c1/audio/
done
# the commit the binaries were built from (the device machine gets no .git)
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!.gpu' || echo ' (modified)')" >.gpu/c1/commit.txt
tar -cJf .gpu/c1.tar.xz -C .gpu c1
du -sh .gpu/c1 .gpu/c1.tar.xz .gpu/c2 .gpu/c3
echo "pack: ready; see the header of this script for the two calls"
