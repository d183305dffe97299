#!/usr/bin/env bash
# Runs all of sotto's tests. Installs what they need first: the Debian
# packages (scripts/setup.sh --deps-only), a Python virtual environment in
# .venv with the reference implementation (faster-whisper) and the text
# normalizer, and the test models (tiny.en, base).
#
#   scripts/test.sh            everything (unit tests under ASan+UBSan, then
#                              the reference tests on real speech)
#   scripts/test.sh --unit     only the C unit tests (ASan+UBSan build, ctest):
#                              no venv, browsers or reference-test packages
#
# The reference tests read the dev speech set from ../shared/audio
# (override with SOTTO_MANIFEST=/path/to/manifest.tsv). Exits non-zero on
# any failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
die() { echo "test: $*" >&2; exit 1; }

only_unit=0
for a in "$@"; do
  case "$a" in
    --unit) only_unit=1 ;;
    *) die "unknown option $a" ;;
  esac
done

# The build dependencies first: the two builds below need them.
"$root/scripts/setup.sh" --deps-only

# What only the tests need is fetched while the two builds compile (they need none of
# it): the models, the reference tests' Python environment, and their Debian packages
# (browsers, PulseAudio, clang for the fuzzers, haproxy and redis for the fleet). On a
# fresh machine these are mostly waits on the network, and the builds are CPU: done
# one after the other they took about as long again. Two jobs, since apt and pip do
# not share anything: the models and the venv (fetch_silero.sh installs into the
# same venv, so not beside the pip below), and apt. Each logs to build/test-prep-*.log,
# printed when it is joined; a failure stops the run there.
mkdir -p "$root/build"
prep_pids=()
prep_names=()
prep_start() { # name command...
  local name=$1; shift
  ( "$@" ) >"$root/build/test-prep-$name.log" 2>&1 &
  prep_pids+=("$!")
  prep_names+=("$name")
}
prep_join() {
  local i name rc
  for i in "${!prep_pids[@]}"; do
    name=${prep_names[$i]}
    if wait "${prep_pids[$i]}"; then rc=0; else rc=$?; fi
    sed "s/^/[$name] /" "$root/build/test-prep-$name.log"
    [ "$rc" -eq 0 ] || die "set-up step '$name' failed (exit $rc; its output is above)"
  done
  prep_pids=()
  prep_names=()
}

prep_python() { # the models, then the reference tests' venv
  "$root/scripts/fetch_models.sh" all || return 1
  [ "$only_unit" -eq 1 ] && return 0
  local venv="$root/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || { echo "test: python3 -m venv failed (install python3-venv)"; return 1; }
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "faster-whisper==1.2.1" "ctranslate2==4.8.5" "whisper-normalizer==0.1.15" "numpy>=1.24" "websockets==15.0.1" "playwright==1.65.2" \
    "openai==3.51.0" "deepgram-sdk==7.16.0" "onnxruntime==1.32.0" "axe-playwright-python==0.1.8" \
    || { echo "test: pip install of the test requirements failed"; return 1; }
}

# The Debian packages of the reference tests, in one apt-get run: Debian's Chromium for
# the browser test through playwright (no browser download); firefox-esr over WebDriver
# BiDi (no geckodriver); a private PulseAudio server through ALSA's pulse plugin for
# Firefox's microphone and sotto-mic's device; clang and libFuzzer (libclang-rt-14-dev)
# for scripts/fuzz.sh; haproxy and redis-server, which test_fleet.py starts itself.
test_packages=(chromium firefox-esr pulseaudio pulseaudio-utils libasound2-plugins opus-tools clang
  libclang-rt-14-dev haproxy redis-server)
missing=()
if [ "$only_unit" -eq 0 ]; then
  for p in "${test_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
prep_apt() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "test: installing ${missing[*]} for the browser, audio device, fuzz and fleet tests"
  $sudo apt-get update -qq || { echo "test: apt-get update failed"; return 1; }
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { echo "test: apt-get install ${missing[*]} failed"; return 1; }
}
if [ ${#missing[@]} -ne 0 ]; then
  if [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; then
    prep_start apt prep_apt
  else
    prep_apt || die "could not install ${missing[*]}" # sudo may ask for a password: not in the background
  fi
fi
prep_start models-venv prep_python
py="$root/.venv/bin/python"

failures=()
# The suite's offline transcriptions of the dev set, shared between the reference
# tests that need the same ones (tests/ref/refcommon.py run_sotto): keyed by the
# binary's SHA-256, the model files, the options and the audio; emptied per run.
export SOTTO_TEST_CACHE="$root/build/test-cache"
rm -rf "$SOTTO_TEST_CACHE"
# CPU seconds used by this shell's finished children (user + system; a test's
# servers count when the test waited for them), to tell CPU-bound steps from
# steps that mostly wait.
child_cpu() { awk '{ sub(/.*\) /, ""); printf "%d", ($14 + $15) / 100 }' "/proc/$1/stat"; } # pid
# A step runs in a subshell of its own that reports its children's CPU: this
# shell's own count would also take in a lane that happens to end during it.
step_cpu="$root/build/test-step.cpu"
run() { # name command...
  local name=$1; shift
  echo "=== $name"
  local t0=$SECONDS
  rm -f "$step_cpu"
  if (
    if "$@"; then r=0; else r=$?; fi
    child_cpu "$BASHPID" >"$step_cpu"
    exit "$r"
  ); then
    echo "=== $name: ok ($((SECONDS - t0)) s, cpu $(cat "$step_cpu" 2>/dev/null || echo ?) s)"
  else
    echo "=== $name: FAILED ($((SECONDS - t0)) s, cpu $(cat "$step_cpu" 2>/dev/null || echo ?) s)"
    failures+=("$name")
  fi
}

# Two more lanes, at the lowest CPU priority (nice 19), for the tests that
# measure no time: the unit tests and the offline reference tests (and a third,
# at nice 10, for the fuzzers: see there).
# They run beside the foreground's server tests, which mostly wait on real-time
# streams, browsers and timeouts, and take the CPU they leave idle; the kernel
# gives a nice-0 process that wants a core about 98% of it against a nice-19
# one, so what the foreground measures (capacity, latency) stays its own. Two
# lanes, not one: many of their tests use one core, and with one lane 12% of
# the machine's CPU time went idle while the foreground waited (fresh clone of
# d5047d5, /proc/stat every 10 s). All sides draw their servers' ports from
# disjoint ranges below the kernel's ephemeral ports (SOTTO_TEST_PORTS,
# tests/ref/server_client.py free_port), so no two servers race for one. A
# lane's output is printed, and its failures counted, at join_lanes.
lane_run() { # label failed_file "name|command" ...  (in a subshell of its own)
  local label=$1 failed=$2 spec name t0 me c0; shift 2
  for spec in "$@"; do
    name=${spec%%|*}
    t0=$SECONDS
    me=$BASHPID
    c0=$(child_cpu "$me")
    echo "=== $name ($label)"
    if bash -c "${spec#*|}"; then
      echo "=== $name: ok ($((SECONDS - t0)) s, cpu $(($(child_cpu "$me") - c0)) s)"
    else
      echo "=== $name: FAILED ($((SECONDS - t0)) s, cpu $(($(child_cpu "$me") - c0)) s)"
      echo "$name" >>"$failed"
    fi
  done
}
lane_pids=()
lane_names=()
start_lane() { # name nice port-range "name|command" ...
  local name=$1 nice=$2 ports=$3; shift 3
  rm -f "$root/build/test-lane-$name.log" "$root/build/test-lane-$name.failed"
  (
    renice -n "$nice" -p "$BASHPID" >/dev/null
    [ "$ports" = - ] || export SOTTO_TEST_PORTS=$ports
    # OpenMP threads that lose their core to the foreground sleep at a barrier
    # instead of spinning on the other core (CPU the foreground could use)
    export OMP_WAIT_POLICY=PASSIVE
    lane_run "in lane $name" "$root/build/test-lane-$name.failed" "$@"
  ) >"$root/build/test-lane-$name.log" 2>&1 &
  lane_pids+=("$!")
  lane_names+=("$name")
}
join_lanes() {
  local i t0 name
  for i in "${!lane_pids[@]}"; do
    name=${lane_names[$i]}
    t0=$SECONDS
    wait "${lane_pids[$i]}" || true
    echo "=== (waited $((SECONDS - t0)) s for lane $name)"
    cat "$root/build/test-lane-$name.log"
    if [ -f "$root/build/test-lane-$name.failed" ]; then
      while IFS= read -r n; do failures+=("$n"); done <"$root/build/test-lane-$name.failed"
    fi
  done
  lane_pids=()
  lane_names=()
}

# Beside the foreground, at its priority: a test that mostly waits (on timeouts,
# or on audio played at real-time pace) while the foreground runs another such
# test, the pair within the two cores (CPU per second of wall time, fresh-clone
# run of d5047d5): test_security under ASan (0.16) and then bounded inputs under
# ASan (18 s, busy) beside test_security (0.11) and then bounded inputs (15 s,
# busy); Firefox (0.70) beside Chromium (0.66); sotto-mic (0.70) beside the page
# test (0.67); the fleet under ASan (0.74) beside the fleet (0.65). Tests that
# measure capacity or latency, or use both cores, stay alone: the protocols and
# streaming server under ASan side by side took 191 s against 96 + 100 one
# after the other. (The security tests beside the browser and page tests, out
# of the foreground's path, made sotto-mic's SIGINT-to-exit take 15.9 s against
# its 10 s bound: too much at once.) Its servers' ports come from a range of
# their own.
beside_pid=""
beside_log="$root/build/test-beside.log"
beside_failed="$root/build/test-beside.failed"
start_beside() { # "name|command" ...
  rm -f "$beside_log" "$beside_failed"
  (
    export SOTTO_TEST_PORTS=29000-31999
    lane_run "beside the foreground" "$beside_failed" "$@"
  ) >"$beside_log" 2>&1 &
  beside_pid=$!
}
join_beside() {
  [ -n "$beside_pid" ] || return 0
  wait "$beside_pid" || true
  beside_pid=""
  cat "$beside_log"
  if [ -f "$beside_failed" ]; then
    while IFS= read -r name; do failures+=("$name"); done <"$beside_failed"
  fi
}

# 1. C unit tests with AddressSanitizer + UndefinedBehaviorSanitizer. This
#    build's GPU backend runs over the CPU emulation of CUDA (kernels/cuda/emu), so
#    test_device checks engine/gpu_cuda.c against the CPU engine here.
cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOTTO_SANITIZE=ON \
  -DSOTTO_NATIVE=ON -DSOTTO_CUDA_EMU=ON >/dev/null
cmake --build "$root/build-asan" -j "$(nproc)" >/dev/null || {
  cmake --build "$root/build-asan" -j 1 2>&1 | tail -40; die "ASan build failed"; }
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
unit=(ctest --test-dir "$root/build-asan" --output-on-failure -j 1)
unit_name="unit tests (ASan+UBSan)"
fuzz_name="fuzzers, 10 s per target (libFuzzer + ASan/UBSan)"

if [ "$only_unit" -eq 1 ]; then
  prep_join
  run "$unit_name" "${unit[@]}"
else
  # 2. Reference tests on real speech with the optimised build.
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$root/build" -j "$(nproc)" >/dev/null || die "release build failed"
  prep_join
  manifest=${SOTTO_MANIFEST:-$(dirname "$root")/shared/audio/manifest.tsv}
  if [ ! -f "$manifest" ]; then
    run "$unit_name" "${unit[@]}"
    run "$fuzz_name" "$root/scripts/fuzz.sh" --short
    echo "test: the dev speech set is missing ($manifest); the reference tests cannot run"
    failures+=("reference tests (no dev speech set)")
  else
    S="$root/build/sotto"
    R="$root/tests/ref"
    q() { printf '%q ' "$@"; } # one command line for the lane
    # lane A, first: its offline transcriptions of the dev set fill SOTTO_TEST_CACHE for
    # test_server; then the other offline reference tests
    lane_a=(
      "transcripts vs faster-whisper (tiny.en)|$(q "$py" "$R/test_reference.py" --sotto "$S" --model models/tiny.en --manifest "$manifest")"
      "--device cuda over the CUDA emulation (ASan+UBSan build)|$(q "$py" "$R/test_device_cli.py" --sotto "$root/build-asan/sotto" --server "$root/build-asan/sotto-server" --model models/tiny.en --manifest "$manifest")"
      "Silero VAD vs onnxruntime|$(q "$py" "$R/test_silero_ref.py" --probs "$root/build/silero_probs" --onnx models/silero_vad/silero_vad.onnx --model models/silero_vad/silero_vad.safetensors --manifest "$manifest")"
      "tokenizer vs Hugging Face (tiny.en)|$(q "$py" "$R/test_tokenizer_ref.py" --sotto "$S" --model models/tiny.en --manifest "$manifest")"
      "tokenizer vs Hugging Face (base)|$(q "$py" "$R/test_tokenizer_ref.py" --sotto "$S" --model models/base --manifest "$manifest")"
      "log-mel vs faster-whisper|$(q "$py" "$R/test_mel_ref.py" --sotto "$S" --manifest "$manifest")"
      "encoder vs CTranslate2|$(q "$py" "$R/test_encoder_ref.py" --sotto "$S" --model models/tiny.en --manifest "$manifest")"
      "the sotto command line: getopt_long options anywhere, -- , --help, named errors|$(q "$py" "$R/test_cli.py" --sotto "$S" --model models/tiny.en --base-model models/base --manifest "$manifest" --server "$root/build/sotto-server" --mic "$root/build/sotto-mic")"
      "Hugging Face loader|$(q "$py" "$R/test_hf_loader.py" --sotto "$S" --model models/tiny.en --manifest "$manifest")"
      "multilingual (base)|$(q "$py" "$R/test_multilingual.py" --sotto "$S" --model models/base --manifest "$manifest")"
    )
    # lane B: the unit tests, the device selection of the release build, the quantized weights
    lane_b=(
      "$unit_name|$(q "${unit[@]}")"
      "device selection (release build: CUDA compiled in, no GPU here)|$(q env SOTTO_SOURCE_DIR="$root" "$root/build/test_device")"
    )
    if [ -x "$root/build/test_cublas_lazy" ]; then
      lane_b+=("cuBLAS opened on first GPU use, not at start-up (release build)|$(q ctest --test-dir "$root/build" -R '^test_cublas_lazy' --output-on-failure)")
    fi
    lane_b+=(
      "--device in the CLI and the server (release build)|$(q "$py" "$R/test_device_cli.py" --sotto "$S" --server "$root/build/sotto-server" --model models/tiny.en --manifest "$manifest")"
      # accuracy on the fixed 22-clip subset (short and long, read and spontaneous, the two
      # clips where all-4-bit tiny.en once looped): the presets on every dev clip took 21 of
      # the suite's 50 minutes on an AVX2 machine; bench/bench_quant.py measures the whole set
      "quantized weights (tiny.en, 22-clip subset)|$(q "$py" "$R/test_quant.py" --sotto "$S" --model models/tiny.en --manifest "$manifest" --subset)"
    )
    start_lane A 19 20000-22999 "${lane_a[@]}"
    start_lane B 19 23000-25999 "${lane_b[@]}"
    # The fuzzers run for a fixed time per target (10 s), so at nice 19 among the other
    # lanes they got half the CPU they used to (52 against 114 CPU s in the fresh clone of
    # 70ed542), and fuzzed that much less. At nice 10 they come before the lanes and still
    # yield to the foreground (weight 110 against 1024); they run while the first server
    # tests wait on timeouts.
    start_lane F 10 - "$fuzz_name|$(q "$root/scripts/fuzz.sh" --short)"
    # The foreground: the server tests, first those that mostly wait (timeouts,
    # browsers, real-time streams), then those that load both cores.
    export SOTTO_TEST_PORTS=26000-28999
    # test_security's three sections (their own servers, mostly waiting on timeouts) run
    # at once (--parallel); under ASan beside the release build's
    start_beside "security under ASan+UBSan|$(q "$py" "$R/test_security.py" --server "$root/build-asan/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --parallel)" \
      "bounded inputs under ASan+UBSan|$(q "$py" "$R/test_inputs.py" --server "$root/build-asan/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest")"
    run "security: admission, timeouts, frame limits, keys and tokens" "$py" "$R/test_security.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --parallel
    run "bounded inputs: static files, methods, uploads, Ogg streams" "$py" "$R/test_inputs.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest"
    join_beside
    # Firefox's microphone and sotto-mic's device are private PulseAudio servers; Chromium's is a file
    start_beside "browser dictation page (headless Firefox, PulseAudio microphone)|$(q "$py" "$R/test_firefox.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --artifacts "$root/build/test-artifacts")"
    run "browser dictation page (headless Chromium, fake microphone)" "$py" "$R/test_web.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --artifacts "$root/build/test-artifacts"
    join_beside
    start_beside "desktop client sotto-mic (ASan+UBSan build)|$(q "$py" "$R/test_mic.py" --mic "$root/build-asan/sotto-mic" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest")"
    run "dictation page as people use it (headless Chromium, axe-core)" "$py" "$R/test_page.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --artifacts "$root/build/test-artifacts" --only down,taken,busy,viewer,cues,layout,insecure,use,upload,mic
    join_beside
    start_beside "fleet under ASan+UBSan (cross-instance resume, feeds, kill -9)|$(q "$py" "$R/test_fleet.py" --server "$root/build-asan/sotto-server" --model models/tiny.en --manifest "$manifest" --only resume,feeds,kill --sessions 3 --viewers 30)"
    run "fleet: 3 instances behind HAProxy sharing Redis (feeds, kill -9, SIGTERM, Redis restart, sotto-mic)" "$py" "$R/test_fleet.py" --server "$root/build/sotto-server" --model models/tiny.en --manifest "$manifest" --mic "$root/build/sotto-mic"
    join_beside
    # The protocol and server tests run twice, on the release build and under ASan+UBSan. The
    # sections whose outcome does not depend on the server's speed or scale (bad input, resume,
    # variants, metrics, SIGTERM, TLS; translation, Deepgram, the error answers) run once, under
    # the sanitizers, which check the same code more closely; the release build runs those that
    # do: accuracy, real-time latency, overload and backlog, 200 feed viewers, the long batch clip.
    run "OpenAI and Deepgram protocols (official client libraries): batch, real-time deltas" "$py" "$R/test_compat.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --base-model models/base --manifest "$manifest" --only batch,realtime
    run "streaming server (tiny.en)" "$py" "$R/test_server.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --format-clips 25 --skip badinput,resume,variants,metrics,sigterm,tls
    run "streaming server in hard rooms: noise, babble, continuous speech, non-speech, overload (tiny.en)" "$py" "$R/test_rooms.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest"
    run "scheduler: overload policy, loads while serving, the acquire race (tiny.en, base)" "$py" "$R/test_sched.py" --server "$root/build/sotto-server" --sotto "$S" --model models/tiny.en --base-model models/base --manifest "$manifest"
    run "scheduler: finals between partial windows, loads while serving and the acquire race under ASan+UBSan" "$py" "$R/test_sched.py" --server "$root/build-asan/sotto-server" --sotto "$S" --model models/tiny.en --base-model models/base --manifest "$manifest" --only finals,race,loading --race-offsets 2 --sanitized
    run "streaming server under ASan+UBSan (no accuracy sections)" "$py" "$R/test_server.py" --server "$root/build-asan/sotto-server" --sotto "$S" --model models/tiny.en --manifest "$manifest" --only badinput,resume,overload,backlog,variants,feeds,metrics,sigterm,tls --viewers 50 --sanitized
    run "OpenAI and Deepgram protocols under ASan+UBSan" "$py" "$R/test_compat.py" --server "$root/build-asan/sotto-server" --sotto "$S" --model models/tiny.en --base-model models/base --manifest "$manifest" --sanitized
    run "soak: hostile clients around one real-time session under ASan+UBSan (short)" "$py" "$R/test_soak.py" --server "$root/build-asan/sotto-server" --model models/tiny.en --manifest "$manifest" --short
    join_lanes
  fi
fi

echo
if [ ${#failures[@]} -ne 0 ]; then
  echo "FAILED: ${failures[*]}"
  exit 1
fi
echo "all tests passed"
