#!/usr/bin/env bash
# The threaded parts — the data-parallel engine (worker threads, communication threads,
# LocalComm rendezvous, failure propagation), the device-parallel stages (stage threads, mailbox
# hand-offs, shared-gradient sums) and the prefetching loader — under ThreadSanitizer.
#   scripts/test-tsan.sh            (CPU only; its own build in build-tsan/)
#   scripts/test-tsan.sh --build-only   (the build alone)
# The OpenMP runtimes (clang's libomp, and libgomp, which Debian's oneDNN loads) and oneDNN are not
# instrumented: tests/tsan.supp silences reports that lie entirely inside them. The tests run
# replicas of one compute thread each: TSan cannot see OpenMP's own barriers, so parallel regions
# would be reported falsely.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TSAN_BUILD_DIR:-build-tsan}
# clang-14 at -O0 with line tables (file:line in reports): it compiled this in 4 min where GCC at
# -O2 -g1 took about 10 (CI's critical path), and -O0 in 166 s where -O1 took 202 (2026-11-29, 2
# cores), the tests then 15 s instead of 7. A build folder GCC configured is started afresh.
scripts/clang-packages.sh
if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++-14' "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" -DTRAINER_CUDA=OFF -DTRAINER_SANITIZE=thread \
  -DTRAINER_NATIVE=OFF >/dev/null
cmake --build "$build" --parallel --target unit_threads  # the test files below alone (tests/CMakeLists.txt)
[ "${1:-}" = --build-only ] && exit 0  # CI builds it early, at low priority, and runs it later
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1"
export OMP_NUM_THREADS=1
# Exit 77: nothing failed, and some cases were skipped, each saying why ("SKIPPED (<kind>): <reason>",
# tests/skip.h): this build has no CUDA for the GPU cases, a CPU without AVX-512 no bf16.
run() {
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -eq 77 ]; then echo "tsan: $*: passed, with skips (above)"; return 0; fi
  return "$rc"
}
run "$build/tests/unit_threads" "data parallel*"
run "$build/tests/unit_threads" "[device_parallel]"
run "$build/tests/unit_threads" "loader*"
