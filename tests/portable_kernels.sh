#!/usr/bin/env bash
# The CPU kernels compile for x86-64 machines of every level, not only for the
# build machine: each file is compiled (-O2, warnings on) for baseline
# x86-64-v2 (SSE4.2), x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512).
# The AVX-512 kernels carry their instruction sets in target attributes and
# are chosen at run time, so they must build where -march enables none of it:
# an intrinsic outside the named subsets builds with -march=native on a
# machine that has it and fails everywhere else.
#
# Then the kernel checks of test_quant (every weight format, batch size and
# shape, the fused kernels against the scalar reference) and test_ops (the
# attention tiles among them) are linked from the x86-64-v2 and -v3 objects
# and run where this CPU can: the skinny kernels and the cross-attention have
# an AVX-512 path, an AVX2 path and a plain-vector path, and a -march=native
# build tests only its own. (Each kernel is compiled once per level, for both
# purposes.)
#
#   tests/portable_kernels.sh CC OPENBLAS_INCLUDE SOURCE_DIR [OPENBLAS_LIB]
set -euo pipefail
cc=$1 blas_inc=$2 root=$3 blas_lib=${4:-}
fail=0 n=0
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common_flags=(-std=c11 -O2 -fopenmp -fno-trapping-math -ffp-contract=fast -Wno-psabi
              -I"$root/include" -I"$root/kernels" -I"$root/common" -I"$root/tests" -I"$blas_inc")
for march in x86-64-v2 x86-64-v3 x86-64-v4; do
  mkdir -p "$tmp/$march"
  for src in "$root"/kernels/*.c; do
    n=$((n + 1))
    if ! out=$("$cc" "${common_flags[@]}" -march="$march" -Wall -Wextra -Werror=implicit-function-declaration \
        -c "$src" -o "$tmp/$march/kernels_$(basename "$src" .c).o" 2>&1); then
      echo "FAIL -march=$march ${src#"$root"/}:"
      echo "$out" | head -20
      fail=1
    fi
  done
done
[ "$fail" -eq 0 ] && echo "ok: $n compilations (kernels/*.c for x86-64-v2, -v3, -v4)"
[ "$fail" -eq 0 ] || exit 1

[ -n "$blas_lib" ] || { echo "no OpenBLAS library given: kernel checks per level not run"; exit 0; }
for march in x86-64-v2 x86-64-v3; do
  case $march in
    x86-64-v2) has sse4_2 popcnt || { echo "skip $march: this CPU lacks it"; continue; } ;;
    x86-64-v3) has avx2 fma bmi2 f16c movbe || { echo "skip $march: this CPU lacks it"; continue; } ;;
  esac
  built=1
  for src in "$root"/common/*.c "$root"/tests/test_quant.c "$root"/tests/test_ops.c; do
    obj="$tmp/$march/$(basename "$(dirname "$src")")_$(basename "$src" .c).o"
    if ! out=$("$cc" "${common_flags[@]}" -march="$march" -c "$src" -o "$obj" 2>&1); then
      echo "FAIL: ${src#"$root"/} for -march=$march does not build:"; echo "$out" | head -20
      fail=1 built=0
    fi
  done
  [ "$built" -eq 1 ] || continue
  for t in test_quant test_ops; do
    objs=("$tmp/$march"/kernels_*.o "$tmp/$march"/common_*.o "$tmp/$march/tests_$t.o")
    if ! out=$("$cc" -fopenmp "${objs[@]}" -o "$tmp/$march/$t" "$blas_lib" -lcjson -lm 2>&1); then
      echo "FAIL: $t for -march=$march does not link:"; echo "$out" | head -20; fail=1; continue
    fi
    if out=$(cd "$root" && "$tmp/$march/$t" 2>&1); then
      echo "ok: $t built for -march=$march: $(echo "$out" | tail -1)"
    else
      echo "FAIL: $t built for -march=$march:"; echo "$out" | grep -E "FAIL|failed|checks" | head -20; fail=1
    fi
  done
done
exit "$fail"
