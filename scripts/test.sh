#!/usr/bin/env bash
# Builds (if needed) and runs every test: op tests, data, engine/graph, CLI end-to-end.
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -R e2e
# A test that cannot run here (no GPU, a CPU without AVX-512, a missing package, the real data of
# ../shared/data absent — TRAINER_DATA=dir points elsewhere —, a mount not allowed) is skipped, saying
# why (tests/skip.h): CTest counts it as "Skipped", not as passed. TRAINER_TEST_REQUIRE=package (CI)
# makes a skip of a listed kind a failure. The last lines: the counts, then each skipped test and why.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || scripts/setup.sh
cmake --build "$build" --parallel
cd "$build"
# Tests run $(nproc) at a time (CTEST_PARALLEL_LEVEL to choose): on two cores the suite took 263 s
# instead of 383. Those that time themselves or signal processes run alone (RUN_SERIAL:
# tests/serial_tests.cmake.in).
jobs=${CTEST_PARALLEL_LEVEL:-$(nproc)}
set +e
ctest -j "$jobs" --output-on-failure --timeout 900 --output-junit Testing/junit.xml "$@"
rc=$?
# Figures the tests report (Catch2 WARN lines), also when passing; the skips are listed below them.
awk '/warning:$/ {w = 1; msg = ""; next}
     w && /^[[:space:]]*$/ {w = 0; gsub(/^ +| +$/, "", msg); if (msg !~ /^SKIPPED \(/) print "  " msg; next}
     w {sub(/^ +/, ""); msg = msg (msg == "" ? "" : " ") $0}' Testing/Temporary/LastTest.log | sort -u
"$root/scripts/test-summary.sh" .
exit $rc
