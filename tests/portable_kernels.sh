#!/usr/bin/env bash
# The CPU kernels compile for x86-64 machines of every level, not only for the
# build machine: each file is compiled (-O2, code generated and dropped) for
# baseline x86-64-v2 (SSE4.2), x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512).
# The AVX-512 kernels carry their instruction sets in target attributes and
# are chosen at run time, so they must build where -march enables none of it:
# an intrinsic outside the named subsets builds with -march=native on a
# machine that has it and fails everywhere else.
#
#   tests/portable_kernels.sh CC OPENBLAS_INCLUDE SOURCE_DIR
set -euo pipefail
cc=$1 blas_inc=$2 root=$3
fail=0 n=0
for march in x86-64-v2 x86-64-v3 x86-64-v4; do
  for src in "$root"/kernels/*.c; do
    n=$((n + 1))
    if ! out=$("$cc" -std=c11 -O2 -fopenmp -march="$march" -Wall -Wextra -Werror=implicit-function-declaration \
        -I"$root/include" -I"$root/kernels" -I"$blas_inc" -c "$src" -o /dev/null 2>&1); then
      echo "FAIL -march=$march ${src#"$root"/}:"
      echo "$out" | head -20
      fail=1
    fi
  done
done
[ "$fail" -eq 0 ] && echo "ok: $n compilations (kernels/*.c for x86-64-v2, -v3, -v4)"
exit "$fail"
