#!/usr/bin/env bash
# Every test (op, data, engine/graph and the CLI end-to-end runs) under AddressSanitizer,
# LeakSanitizer and UndefinedBehaviorSanitizer, in its own CPU-only clang build (build-asan/,
# shared with scripts/fuzz.sh: scripts/asan-build.sh).
#   scripts/test-asan.sh [ctest args...]     e.g. scripts/test-asan.sh -R e2e
# The e2e tests run the trainer binary of this build, so it is instrumented too. Reports do not
# go to the tests' stderr, where a test that expects a failing exit code would hide them: every
# process writes them under $report_dir, and any report there fails this script, printed in full,
# even when ctest itself passed. UB is fatal (-fno-sanitize-recover=undefined). Leaks are checked
# at every process exit; oneDNN and libgomp need no suppressions (their caches stay reachable),
# fontconfig (under PLplot's text, curves.png) does: tests/lsan.supp says why.
# UBSAN_OPTIONS carries log_path too: the two runtimes share those flags and the last parsed wins.
# detect_stack_use_after_return stays off: with GCC 12 (-O1, -march=native; this build used GCC
# until 2026-11-29) the fake stack frame base of a function that catches exceptions was corrupted
# after a catch (a SEGV in tests/unit/ops/embedding_test.cpp's init-list copy).
# Needs the packages scripts/setup.sh installs (and installs clang-14 if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${ASAN_BUILD_DIR:-build-asan}
start=$(date +%s)
# clang-14, -O1 (ASan's recommended level), with the fuzz targets (scripts/asan-build.sh).
scripts/asan-build.sh
built=$(date +%s)

report_dir=$(mktemp -d /tmp/trainer-asan.XXXXXX)
# exitcode=86: a sanitizer's exit is told apart from the CLI's own exit codes (0-4, 130).
common="log_path=$report_dir/report:exitcode=86:print_stacktrace=1:halt_on_error=1"
export ASAN_OPTIONS="$common:detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="$common"
export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
# Instrumented code is several times slower; OpenMP threads spinning at barriers meanwhile would
# take the cores from it (and from the loader threads) on a 2-core machine.
export OMP_WAIT_POLICY=PASSIVE
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer  # function names and file:line in the reports
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH=$symbolizer

cd "$build"
set +e
ctest -j "${CTEST_PARALLEL_LEVEL:-$(nproc)}" --output-on-failure --timeout 900 --output-junit Testing/junit.xml "$@"
rc=$?
set -e
cd "$root"
# "tests: N passed, M skipped, K failed", then each skipped test and why.
summary=$(scripts/test-summary.sh "$build")
counts=$(head -1 <<<"$summary")
reports=$(find "$report_dir" -type f | sort)
end=$(date +%s)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "=== sanitizer report: $f"
    cat "$f"
  done
  echo "$summary"
  echo "asan+ubsan: FAILED: $(echo "$reports" | wc -l) sanitizer report(s) (above; kept in $report_dir), $counts"
  exit 1
fi
rm -rf "$report_dir"
echo "$summary"
if [ "$rc" -ne 0 ]; then
  echo "asan+ubsan: FAILED: $counts (no sanitizer report)"
  exit "$rc"
fi
echo "asan+ubsan: $counts, 0 sanitizer reports (build $((built - start)) s, tests $((end - built)) s)"
