#!/usr/bin/env bash
# Fuzzes every reader of outside bytes (tests/fuzz/*_fuzz.cpp) with libFuzzer under ASan + UBSan,
# each for a bounded time, as many at once as there are cores (FUZZ_JOBS); exits non-zero on any crash, sanitizer report,
# leak, timeout (> 5 s per input) or out-of-memory (> 1 GB RSS or one allocation over 1 GB),
# printing each reproducer's path. One line per target:
#   fuzz <target>: N execs in S s, 0 crashes (corpus K inputs)
#   scripts/fuzz.sh [seconds-per-target] [target...]   (default 60 s; all targets; build in build-asan/)
#   build-asan/<target>_fuzz CRASH_FILE                 replays one reproducer
# Targets: config (YAML configs), overrides (--set lines), jpeg, png, idx (raw and .gz), cifar,
# npy, llmc (llm.c's token shards and tokenizer file), safetensors, sidecar (checkpoint sidecar JSON). Seeds: configs/, the images in
# tests/e2e/bad_inputs/, and small valid files scripts/fuzz-seeds.py writes into the build folder.
# The working corpora stay in build-asan/corpus/<target> between local runs (gitignored); CI
# starts fresh. scripts/asan-build.sh installs clang-14 and its runtimes when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
all=(config overrides jpeg png idx cifar npy llmc safetensors sidecar)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
build=${FUZZ_BUILD_DIR:-${ASAN_BUILD_DIR:-build-asan}}

# The core compiled by clang with ASan + UBSan, libFuzzer's coverage instrumentation in the
# libraries that read outside bytes (scripts/asan-build.sh: the build scripts/test-asan.sh runs the
# tests in; here only the fuzz targets are built). System libraries (yaml-cpp, libpng,
# libjpeg-turbo, zlib) are not instrumented: their crashes and leaks are caught, their inner
# branches give no coverage.
ASAN_BUILD_DIR=$build scripts/asan-build.sh "${targets[@]/%/_fuzz}"

seeds=$build/fuzz-seeds
rm -rf "$seeds" && python3 scripts/fuzz-seeds.py "$seeds"
mkdir -p "$seeds/config" "$seeds/jpeg" "$seeds/png" "$seeds/sidecar"
cp configs/*.yaml configs/bench/*.yaml "$seeds/config/" 2>/dev/null || true
cp tests/e2e/bad_inputs/*.jpg "$seeds/jpeg/"
cp tests/e2e/bad_inputs/*.png "$seeds/png/"
export TRAINER_FUZZ_SEED_DIR=$seeds/sidecar  # sidecar_fuzz writes a valid sidecar there at start

export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:print_stacktrace=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer

# One target: its libFuzzer run and its line in fuzz-<target>.result; fuzz-<target>.clean when it
# found nothing (a run that ends any other way, this function's own failure included, fails).
fuzz_one() {
  local t=$1 corpus=$build/corpus/$1 artifacts=$build/artifacts/$1 log=$build/fuzz-$1.log
  mkdir -p "$corpus"
  rm -rf "$artifacts" && mkdir -p "$artifacts"
  local extra=(-max_len=65536)
  case $t in
    config) extra=(-dict=tests/fuzz/yaml.dict -max_len=8192) ;;
    overrides) extra=(-dict=tests/fuzz/yaml.dict -max_len=2048) ;;
    sidecar) extra=(-max_len=4096) ;;
    idx | cifar | npy | safetensors) extra=(-max_len=16384) ;;
  esac
  local start rc elapsed execs found units
  start=$(date +%s)
  set +e
  "$build/${t}_fuzz" "$corpus" "$seeds/$t" "${extra[@]}" -max_total_time="$seconds" -timeout=5 \
    -rss_limit_mb=1024 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
  rc=$?
  set -e
  elapsed=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(find "$artifacts" -type f | sort)
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    {
      tail -60 "$log"
      echo "fuzz $t: ${execs:-?} execs in ${elapsed} s, FAILED (libFuzzer exit $rc; log $log)"
      for f in $found; do
        echo "  reproducer: $(realpath "$f")   (replay: $build/${t}_fuzz $f)"
      done
    } >"$build/fuzz-$t.result"
    return 0
  fi
  units=$(find "$corpus" -type f | wc -l)
  echo "fuzz $t: ${execs} execs in ${elapsed} s, 0 crashes (corpus ${units} inputs)" >"$build/fuzz-$t.result"
  touch "$build/fuzz-$t.clean"
}

# Each libFuzzer process uses one core: as many targets at once as there are cores (CI's 2 halve
# the wall time), each still fuzzed for its full time; the lines come out in the targets' order.
jobs_max=${FUZZ_JOBS:-$(nproc)}
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  rm -f "$build/fuzz-$t.result" "$build/fuzz-$t.clean"
  fuzz_one "$t" &
done
wait || true
failed=0
for t in "${targets[@]}"; do
  cat "$build/fuzz-$t.result" 2>/dev/null || echo "fuzz $t: FAILED (no result: the script's run of it ended early)"
  [ -f "$build/fuzz-$t.clean" ] || failed=1
done
exit "$failed"
