#!/usr/bin/env bash
# tests/gpu/check.sh - the device check (run on a machine with an NVIDIA GPU).
#
# 1. Kernels: builds the CUDA kernels and their tests with nvcc alone (the GPU
#    machine has no Debian packages: only the plain-C parts the tests need are
#    compiled) and runs every kernel test against its plain-C/double twin, then
#    the decode-step GEMM timing table.
# 2. Engine, when tests/gpu/pack.sh's .gpu/ was carried (see its header for the
#    three calls): test_device (GPU vs CPU engine on real speech, all formats),
#    dev clips transcribed on the GPU and the CPU in bf16, NF4 and NVFP4, and
#    one timing table per model and precision: tiny.en (real weights) and
#    large-v3-turbo's shapes (synthetic random weights, fixed decode steps).
#
# Results go to $OUT when it is set (the device tool brings them back), else to
# build-gpu/. Exit status: non-zero if any check failed.
#
#   tests/gpu/check.sh [ARCH]     ARCH: sm_90 (default; H100/H200), sm_80, ...
# CHECK_REPS, CHECK_STEPS, CHECK_STREAMS (default 5, 32, 16) size the timing runs;
# a dry run of the script's logic over the CPU emulation uses small ones.
set -uo pipefail
REPS=${CHECK_REPS:-5} STEPS=${CHECK_STEPS:-32} STREAMS=${CHECK_STREAMS:-16}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
arch=${1:-sm_90}
out=${OUT:-$root/build-gpu}
bin=$root/build-gpu
mkdir -p "$bin" "$out"
export PATH="$PATH:/usr/local/cuda/bin"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
fail=0
t_start=$SECONDS

echo "== conditions"
date -u +"%Y-%m-%dT%H:%M:%SZ"
"$NVCC" --version | tail -1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
echo "CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

pk=$root/.gpu
# a pack whose c1 travelled compressed (pack.sh --xz) is unpacked first
if [ -f "$pk/c1.tar.xz" ] && [ ! -x "$pk/c1/bin/test_device" ]; then
  tar -xJf "$pk/c1.tar.xz" -C "$pk" || { echo "unpacking $pk/c1.tar.xz FAILED"; exit 1; }
fi
# (the device machine's copy of the tree may carry a stale .git: the pack's
# own record is the commit its binaries were built from)
echo "git: pack built at $(cat "$pk/c1/commit.txt" 2>/dev/null || echo '? (no pack)'); tree here: $(git rev-parse --short HEAD 2>/dev/null || echo 'no .git')"
# Time guard: each later section runs only while the run is under budget, so
# one slow step costs the tables at the end, not the correctness checks.
BUDGET=${CHECK_BUDGET_S:-480}
# CHECK_SKIP: a comma-separated list of sections not to run this time (words
# of their names: variants, kernel, clips, server, bench_engine, turbo, sanitizer)
in_budget() { # section name
  local w
  for w in ${CHECK_SKIP//,/ }; do
    case "$1" in *"$w"*) echo "== $1: SKIPPED (CHECK_SKIP)"; return 1 ;; esac
  done
  if [ $((SECONDS - t_start)) -ge "$BUDGET" ]; then
    echo "== $1: SKIPPED (the run is past its ${BUDGET} s budget)"
    skipped=$((skipped + 1))
    return 1
  fi
}
skipped=0
T() { timeout -k 5 "$@"; } # T SECONDS command...: no step can hang the run

if [ -x "$pk/c1/bin/test_cuda_linear" ] && [ -x "$pk/c1/bin/test_cuda_ops" ] && [ -x "$pk/c1/bin/bench_cuda_linear" ]; then
  echo "== kernels: built by pack.sh (CMake, nvcc, $arch)"
  for prog in test_cuda_linear test_cuda_ops bench_cuda_linear; do cp "$pk/c1/bin/$prog" "$bin/"; done
else
  echo "== build kernels ($arch)"
  common=(kernels/cuda/linear.cu kernels/cuda/ops.cu kernels/cuda/upload.c kernels/wfmt.c kernels/quant.c kernels/linear_ref.c common/err.c)
  flags=(-O3 -arch="$arch" -lineinfo -Ikernels -Ikernels/cuda -Icommon -Itests -Xcompiler -O2 -lm)
  t0=$SECONDS
  for prog in test_cuda_linear test_cuda_ops bench_cuda_linear; do
    "$NVCC" "${flags[@]}" "${common[@]}" "tests/gpu/$prog.c" -o "$bin/$prog" || { echo "build of $prog FAILED"; exit 1; }
  done
  echo "built in $((SECONDS - t0)) s"
fi

echo "== kernel tests (CUDA vs plain C)"
T 120 "$bin/test_cuda_linear" >"$out/test_cuda_linear.txt" 2>&1 || { fail=1; echo "test_cuda_linear FAILED"; grep -i "fail" "$out/test_cuda_linear.txt" | head -20; }
tail -3 "$out/test_cuda_linear.txt"
T 120 "$bin/test_cuda_ops" >"$out/test_cuda_ops.txt" 2>&1 || { fail=1; echo "test_cuda_ops FAILED"; }
tail -25 "$out/test_cuda_ops.txt"

if [ ! -x "$pk/c1/bin/test_device" ]; then
  echo "== engine: skipped (no .gpu/ pack: run tests/gpu/pack.sh here and carry .gpu/c1, c2, c3)"
  echo "device check: $([ "$fail" -eq 0 ] && echo "kernels passed" || echo FAILED)"
  exit "$fail"
fi

echo "== engine set-up"
sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
# shellcheck disable=SC2086
cudalibs=$(find /usr/local /usr/lib /opt $sp \( -name 'libcublas.so.1[0-9]*' -o -name 'libcublasLt.so.1[0-9]*' \) \
  -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$pk/c1/lib:${cudalibs}${LD_LIBRARY_PATH:-}"
src=/tmp/sotto-src
rm -rf "$src" && mkdir -p "$src/models"
cp -r "$pk/c1/model/tiny.en" "$src/models/"
cat "$pk/c2/model.bin.00" "$pk/c3/model.bin.01" >"$src/models/tiny.en/model.bin"
if [ "$(sha256sum "$src/models/tiny.en/model.bin" | cut -d' ' -f1)" != "$(cat "$pk/c1/model/tiny.en/model.bin.sha256")" ]; then
  echo "tiny.en's model.bin does not match its checksum: were .gpu/c2 and .gpu/c3 both carried?"
  exit 1
fi
export SOTTO_SOURCE_DIR=$src SOTTO_AUDIO_DIR=$pk/c1/audio
B=$pk/c1/bin
ldd "$B/test_device" | grep -q "not found" && { ldd "$B/test_device"; echo "libraries missing"; exit 1; }

echo "== test_device: the engine on the GPU vs the CPU (tiny.en, every format)"
T 240 "$B/test_device" 2>&1 | grep -v ' info ' | tee "$out/test_device.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { fail=1; echo "test_device FAILED"; }
# without a usable GPU test_device checks only the refusal and passes: here that is a failure
grep -q "no usable GPU" "$out/test_device.txt" && { fail=1; echo "test_device: the GPU was not usable"; }
if in_budget "test_device variants"; then
echo "== test_device: bf16 GEMMs (f32, nf4), and the step without graphs (f32, nvfp4)"
T 180 env SOTTO_CUDA_GEMM=bf16 "$B/test_device" f32 nf4 >"$out/test_device_bf16gemm.txt" 2>&1 || { fail=1; grep -v ' info ' "$out/test_device_bf16gemm.txt" | grep -i fail | head; }
tail -1 "$out/test_device_bf16gemm.txt"
T 180 env SOTTO_CUDA_GRAPHS=0 "$B/test_device" f32 nvfp4 >"$out/test_device_nographs.txt" 2>&1 || { fail=1; grep -v ' info ' "$out/test_device_nographs.txt" | grep -i fail | head; }
tail -1 "$out/test_device_nographs.txt"
fi

if in_budget "kernel timings"; then
echo "== kernel timings"
T 120 "$bin/bench_cuda_linear" 2>&1 | tee "$out/bench_cuda_linear.md"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
T 120 "$B/bench_cuda_attention" 2>&1 | tee "$out/bench_cuda_attention.md"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
fi

in_budget "dev clips" && {
echo "== dev clips: GPU vs CPU transcripts (beam 5)"
{
  echo "| clip | weights | CPU: wall s (CLI, incl. load) | GPU: wall s (CLI, incl. load) | words | words that differ |"
  echo "|---|---|---|---|---|---|"
  tail -n +2 "$pk/c1/audio/manifest.tsv" | while IFS=$'\t' read -r id file _rest; do
    for w in f32 bf16 nf4 nvfp4; do
      t0=$(date +%s.%N)
      T 60 "$B/sotto" transcribe --model "$src/models/tiny.en" --weights "$w" --device cpu "$pk/c1/audio/$file" 2>/dev/null | sed 's/^\[[^]]*\] *//' >/tmp/cpu.txt
      t1=$(date +%s.%N)
      T 60 "$B/sotto" transcribe --model "$src/models/tiny.en" --weights "$w" --device cuda "$pk/c1/audio/$file" 2>/tmp/gpu.err | sed 's/^\[[^]]*\] *//' >/tmp/gpu.txt
      t2=$(date +%s.%N)
      nw=$(wc -w </tmp/cpu.txt)
      nd=$(diff <(tr -s ' \n' '\n\n' </tmp/cpu.txt) <(tr -s ' \n' '\n\n' </tmp/gpu.txt) | grep -c '^[<>]')
      [ -s /tmp/gpu.txt ] || { nd=ALL; tail -2 /tmp/gpu.err; }
      printf '| %s | %s | %.2f | %.2f | %s | %s |\n' "$id" "$w" "$(awk "BEGIN{print $t1 - $t0}")" "$(awk "BEGIN{print $t2 - $t1}")" "$nw" "$nd"
    done
  done
} 2>&1 | tee "$out/clips.md"
grep -q '| ALL |' "$out/clips.md" && fail=1
}

bench() { # env... -- bench_engine args...
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  in_budget "bench_engine $*" || return 0
  env "${envs[@]}" timeout -k 5 120 "$B/bench_engine" --streams "$STREAMS" --steps "$STEPS" --reps "$REPS" "$@" 2>/dev/null
}
if in_budget "server"; then
  cp -r "$pk/c1/model/silero_vad" "$src/models/"
  T "${SERVER_CHECK_S:-150}" env SOTTO_PYPATH="$pk/c1/py" python3 -u tests/gpu/server_check.py --server "$B/sotto-server" \
    --model "$src/models/tiny.en" --vad-model "$src/models/silero_vad/silero_vad.safetensors" \
    --audio "$pk/c1/audio" --levels "${SERVER_LEVELS:-16,64}" 2>&1 | tee "$out/server.md"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { fail=1; echo "server check FAILED"; }
fi

echo "== timings: tiny.en (real weights)"
: >"$out/engine_tiny.md"
bench -- --model "$src/models/tiny.en" --device cpu --weights f32 | tee -a "$out/engine_tiny.md" || fail=1
for w in f32 bf16 nf4 nvfp4; do
  bench -- --model "$src/models/tiny.en" --device cuda --weights "$w" | tee -a "$out/engine_tiny.md" || fail=1
done
bench SOTTO_CUDA_GRAPHS=0 -- --model "$src/models/tiny.en" --device cuda --weights nf4 | tee -a "$out/engine_tiny.md" || fail=1
bench SOTTO_CUDA_GEMM=bf16 -- --model "$src/models/tiny.en" --device cuda --weights nf4 | tee -a "$out/engine_tiny.md" || fail=1

echo "== timings: large-v3-turbo shapes (synthetic random weights)"
if ! in_budget "large-v3-turbo (turbo)"; then
  :
elif T 120 python3 tests/gpu/make_synthetic.py /tmp/turbo --tokenizer-from "$src/models/tiny.en"; then
  : >"$out/engine_turbo.md"
  for w in bf16 nf4 nvfp4; do
    bench SOTTO_CUDA_GEMM=bf16 -- --model /tmp/turbo --synthetic --device cuda --weights "$w" | tee -a "$out/engine_turbo.md" || fail=1
  done
  bench -- --model /tmp/turbo --synthetic --device cuda --weights bf16 | tee -a "$out/engine_turbo.md" || fail=1
  bench SOTTO_CUDA_GEMM=bf16 SOTTO_CUDA_GRAPHS=0 -- --model /tmp/turbo --synthetic --device cuda --weights nf4 | tee -a "$out/engine_turbo.md" || fail=1
else
  echo "make_synthetic.py failed"; fail=1
fi

# The kernel tests again under compute-sanitizer (memcheck: out-of-bounds and
# misaligned accesses; racecheck: shared-memory races), where the machine has
# it and time is left; a sanitizer that does not finish in time is reported,
# not counted as a pass or a failure.
if command -v compute-sanitizer >/dev/null 2>&1 && in_budget "compute-sanitizer (sanitizer)"; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool: test_cuda_ops"
    timeout -k 5 "${SANITIZER_S:-80}" compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/test_cuda_ops" \
      >"$out/sanitizer_$tool.txt" 2>&1
    st=$?
    case $st in
      0) echo "$tool: no errors ($(grep -c 'max abs err' "$out/sanitizer_$tool.txt") cases)" ;;
      124|137) if grep -q -E "Invalid |Race reported|hazard|Misaligned" "$out/sanitizer_$tool.txt"; then
                 echo "$tool: FAILED before its time ran out"; grep -m 20 -E "=====|Error" "$out/sanitizer_$tool.txt"; fail=1
               else echo "$tool: did not finish in ${SANITIZER_S:-80} s ($(grep -c 'max abs err' "$out/sanitizer_$tool.txt") cases done, no error before)"; fi ;;
      *) echo "$tool: FAILED (exit $st)"; grep -m 20 -E "=====|Error" "$out/sanitizer_$tool.txt"; fail=1 ;;
    esac
  done
fi

echo "== done in $((SECONDS - t_start)) s; sections skipped for time: $skipped"
if [ "$fail" -ne 0 ]; then
  echo "device check: FAILED"
  exit 1
fi
echo "device check: passed"
