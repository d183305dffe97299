#!/usr/bin/env bash
# Builds sotto's libFuzzer harnesses (fuzz/fuzz_*.c) with clang, AddressSanitizer
# and UBSan into build-fuzz/, and runs them (one per core) from their seed corpus
# (fuzz/corpus/<target>/; what a run finds is kept in build-fuzz/corpus/<target>/).
# The reproducers of bugs fixed before (fuzz/regress/<target>/) run first.
#
#   scripts/fuzz.sh                 every target for 300 s
#   scripts/fuzz.sh 60              every target for 60 s
#   scripts/fuzz.sh --short         every target for 10 s (what scripts/test.sh runs)
#   scripts/fuzz.sh --build         build only
#   scripts/fuzz.sh 60 wav upload   only these targets
#
# Any crash, leak, timeout, out-of-memory or sanitizer report fails the run
# (exit 1) and prints the reproducer's path; replay one with
#   build-fuzz/fuzz_<target> <reproducer>
# Needs clang (Debian's clang package: libFuzzer and the sanitizers come with
# it) and the -dev packages the server builds with.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${SOTTO_FUZZ_OUT:-$root/build-fuzz} # SOTTO_FUZZ_OUT: another build directory
die() { echo "fuzz: $*" >&2; exit 1; }

secs=300
build_only=0
targets=()
for a in "$@"; do
  case "$a" in
    --short) secs=10 ;;
    --build) build_only=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    ''|*[!0-9]*) targets+=("$a") ;;
    *) secs=$a ;;
  esac
done

CC=${CC:-clang}
command -v "$CC" >/dev/null 2>&1 || die "$CC not found (apt-get install clang)"

pkgs="libcjson speexdsp opus sndfile ogg libwebsockets"
pkg-config --exists $pkgs || die "missing development packages: pkg-config $pkgs"
blas_inc=""
for d in /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp \
         /usr/include/openblas; do
  [ -f "$d/cblas.h" ] && { blas_inc="-I$d"; break; }
done
blas_lib="-lopenblas"
for d in /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp; do
  [ -f "$d/libopenblas.so" ] && { blas_lib="-L$d -Wl,-rpath,$d -lopenblas"; break; }
done

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# line tables (-gline-tables-only) are all a crash report needs: function, file, line
cflags="-std=c11 -gline-tables-only -O1 -march=native -fopenmp=libgomp $san -Wno-unknown-pragmas
  -I$root/include -I$root/common -I$root/engine -I$root/kernels -I$root/stream -I$root/vad -I$root/server
  -I$root/fuzz $blas_inc $(pkg-config --cflags $pkgs)"
libs="$(pkg-config --libs $pkgs) $blas_lib -lz -lm -lpthread -lgomp"

# Compiles, links and fuzzing runs go on side by side, one per core (SOTTO_FUZZ_JOBS).
jobs=${SOTTO_FUZZ_JOBS:-$(nproc)}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done; }
wait_all() { # waits for every background job; fails if any failed
  local ok=0 p
  for p in $(jobs -p); do wait "$p" || ok=1; done
  return $ok
}

# The library (as CMake's `sotto` target, without the CUDA backend), rebuilt
# when a source or any header is newer than its object.
mkdir -p "$out/obj"
newest_h=$(find "$root/include" "$root/common" "$root/engine" "$root/kernels" "$root/stream" "$root/vad" "$root/server" \
  "$root/fuzz" -name '*.h' -newer "$out/obj/.stamp" 2>/dev/null | head -1 || true)
[ -f "$out/obj/.stamp" ] || newest_h=all
objs=()
for src in "$root"/common/*.c "$root"/engine/*.c "$root"/kernels/*.c "$root"/stream/*.c "$root"/vad/*.c \
           "$root"/server/upload_audio.c "$root"/server/multipart.c "$root"/server/start_parse.c \
           "$root"/server/feed.c "$root"/server/ring.c "$root"/server/compat.c "$root"/server/rt_openai.c "$root"/server/dg_listen.c; do
  [ -f "$src" ] || continue
  [ "$(basename "$src")" = gpu_cuda.c ] && continue
  rel=${src#"$root"/}
  obj="$out/obj/${rel//\//_}.o"
  if [ -n "$newest_h" ] || [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    echo "fuzz: cc $rel"
    throttle
    # shellcheck disable=SC2086
    ( $CC $cflags -fsanitize=fuzzer-no-link -c "$src" -o "$obj" 2> "$obj.log" \
        || { cat "$obj.log"; echo "fuzz: compiling $rel failed" >&2; rm -f "$obj"; exit 1; } ) &
  fi
  objs+=("$obj")
done
wait_all || die "compiling the library failed"
touch "$out/obj/.stamp"
rm -f "$out/libsotto_fuzz.a"
ar rcs "$out/libsotto_fuzz.a" "${objs[@]}"

all=()
for h in "$root"/fuzz/fuzz_*.c; do
  t=$(basename "$h" .c)
  all+=("${t#fuzz_}")
done
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -f "$root/fuzz/fuzz_$t.c" ] || die "no harness fuzz/fuzz_$t.c (targets: ${all[*]})"
  throttle
  # shellcheck disable=SC2086
  $CC $cflags -Wall -Wextra -Werror -fsanitize=fuzzer "$root/fuzz/fuzz_$t.c" "$out/libsotto_fuzz.a" $libs -o "$out/fuzz_$t" \
    || { echo "fuzz: linking fuzz_$t failed" >&2; exit 1; } &
done
wait_all || die "building the harnesses failed"
[ "$build_only" -eq 1 ] && { echo "fuzz: built ${targets[*]} in $out"; exit 0; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:allocator_may_return_null=1
export LSAN_OPTIONS="suppressions=$root/fuzz/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# one target: its report goes to $out/fuzz_<t>.report, its verdict to the exit status
fuzz_one() {
  local t=$1
  work="$out/corpus/$t"
  art="$out/artifacts/$t"
  mkdir -p "$work" "$art"
  seeds="$root/fuzz/corpus/$t"
  [ -d "$seeds" ] || die "no seed corpus $seeds"
  log="$out/fuzz_$t.log"
  extra=() # reproducers of bugs found before: replayed first, kept clean
  [ -d "$root/fuzz/regress/$t" ] && extra=("$root/fuzz/regress/$t")
  dict=()
  [ -f "$root/fuzz/$t.dict" ] && dict=(-dict="$root/fuzz/$t.dict")
  rc=0
  (cd "$out" && "./fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2560 \
      -malloc_limit_mb=1024 -max_len=262144 -print_final_stats=1 -artifact_prefix="$art/" \
      "${dict[@]}" "$work" "$seeds" "${extra[@]}") > "$log" 2>&1 || rc=$?
  {
    echo "=== fuzz_$t: $secs s (log $log)"
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$log" | tail -2 || true
    if [ "$rc" -ne 0 ] || grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:" "$log"; then
      echo "=== fuzz_$t: FAILED (exit $rc)"
      grep -E "ERROR: |runtime error:|SUMMARY:" "$log" | head -5
      grep -E "Test unit written to|artifact_prefix" "$log" | sed 's/^/    reproducer: /' | head -3
      rc=1
    else
      echo "=== fuzz_$t: ok"
    fi
  } > "$out/fuzz_$t.report"
  return "$rc"
}
echo "fuzz: ${#targets[@]} targets, $secs s each, $jobs at a time"
for t in "${targets[@]}"; do rm -f "$out/fuzz_$t.report"; done
for t in "${targets[@]}"; do
  throttle
  fuzz_one "$t" &
done
wait_all || true
failed=()
for t in "${targets[@]}"; do
  cat "$out/fuzz_$t.report" 2>/dev/null || echo "=== fuzz_$t: FAILED (it left no report)"
  grep -qs "^=== fuzz_$t: ok$" "$out/fuzz_$t.report" || failed+=("$t")
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (reproducers under $out/artifacts/)"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets clean for $secs s each"
