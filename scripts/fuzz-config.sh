#!/usr/bin/env bash
# Fuzzes the config loader (tests/fuzz/config_fuzz.cpp: YAML text -> Experiment -> summary) with
# libFuzzer under ASan + UBSan for a bounded time; exits non-zero on any crash, sanitizer report,
# leak, timeout (> 5 s per input) or out-of-memory (> 2 GB), printing the reproducer's path.
#   scripts/fuzz-config.sh [seconds]          (default 60; its own clang-14 build in build-fuzz/)
#   build-fuzz/config_fuzz CRASH_FILE         replays one reproducer
# Seeds: configs/ (every shipped config, bench/ included) with tests/fuzz/yaml.dict. The working
# corpus stays in build-fuzz/config-corpus between local runs (gitignored); CI starts fresh.
# Installs clang-14, its sanitizer/libFuzzer runtimes (libclang-rt-14-dev), LLVM's OpenMP
# (libomp-14-dev: clang's -fopenmp) and llvm-14 (llvm-symbolizer, for readable stacks) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${FUZZ_BUILD_DIR:-build-fuzz}

packages=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/trainer-apt-fuzz.log 2>&1; then
    $SUDO apt-get update >>/tmp/trainer-apt-fuzz.log 2>&1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}" \
      >>/tmp/trainer-apt-fuzz.log 2>&1 || { tail -20 /tmp/trainer-apt-fuzz.log; exit 1; }
  fi
fi

# The whole core is compiled by clang with ASan + UBSan and libFuzzer's coverage instrumentation
# (TRAINER_FUZZ=ON); only the fuzz target is built. System libraries (yaml-cpp, fmt) are not
# instrumented: their crashes and leaks are caught, their inner branches give no coverage.
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DTRAINER_CUDA=OFF -DTRAINER_SANITIZE=address -DTRAINER_FUZZ=ON \
  -DTRAINER_TESTS=OFF >/dev/null
cmake --build "$build" --parallel --target config_fuzz

corpus=$build/config-corpus
artifacts=$build/config-artifacts
mkdir -p "$corpus"
rm -rf "$artifacts" && mkdir -p "$artifacts"
log=$build/config-fuzz.log
export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:print_stacktrace=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer

echo "fuzz: config loader for ${seconds} s (corpus $corpus, seeds configs/)"
start=$(date +%s)
set +e
"$build/config_fuzz" "$corpus" configs -dict=tests/fuzz/yaml.dict -max_total_time="$seconds" -timeout=5 \
  -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
found=$(find "$artifacts" -type f | sort)
if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
  tail -80 "$log"
  echo "fuzz config loader: ${execs:-?} execs in ${elapsed} s, FAILED (libFuzzer exit $rc; log $log)"
  for f in $found; do
    echo "  reproducer: $(realpath "$f")   (replay: $build/config_fuzz $f)"
  done
  exit 1
fi
units=$(find "$corpus" -type f | wc -l)
echo "fuzz config loader: ${execs} execs in ${elapsed} s, 0 crashes (corpus ${units} inputs)"
