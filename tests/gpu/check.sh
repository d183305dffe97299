#!/usr/bin/env bash
# tests/gpu/check.sh - the device check (run on a machine with an NVIDIA GPU).
#
# Builds the CUDA kernels and their tests with nvcc alone (the GPU machine has
# no Debian packages: only the plain-C parts the tests need are compiled, no
# BLAS, Opus or libwebsockets), runs every kernel test against its plain-C
# twin, then prints the decode-step GEMV timing table. Results go to $OUT
# when it is set (the device tool brings them back), else to build-gpu/.
#
#   tests/gpu/check.sh [ARCH]     ARCH: sm_90 (default; H100/H200), sm_80, ...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
arch=${1:-sm_90}
out=${OUT:-$root/build-gpu}
bin=$root/build-gpu
mkdir -p "$bin" "$out"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

echo "== conditions"
date -u +"%Y-%m-%dT%H:%M:%SZ"
"$NVCC" --version | tail -1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified)')"

echo "== build ($arch)"
common=(kernels/cuda/linear.cu kernels/cuda/ops.cu kernels/cuda/upload.c kernels/wfmt.c kernels/quant.c kernels/linear_ref.c common/err.c)
flags=(-O3 -arch="$arch" -lineinfo -Ikernels -Ikernels/cuda -Icommon -Itests -Xcompiler -O2 -lm)
t0=$SECONDS
for prog in test_cuda_linear test_cuda_ops bench_cuda_linear; do
  "$NVCC" "${flags[@]}" "${common[@]}" "tests/gpu/$prog.c" -o "$bin/$prog"
done
echo "built in $((SECONDS - t0)) s"

fail=0
echo "== kernel tests (CUDA vs plain C)"
"$bin/test_cuda_linear" 2>&1 | tee "$out/test_cuda_linear.txt" || fail=1
"$bin/test_cuda_ops" 2>&1 | tee "$out/test_cuda_ops.txt" || fail=1

echo "== timings"
"$bin/bench_cuda_linear" 2>&1 | tee "$out/bench_cuda_linear.md" || fail=1

if [ "$fail" -ne 0 ]; then
  echo "device check: FAILED"
  exit 1
fi
echo "device check: passed"
