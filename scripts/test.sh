#!/usr/bin/env bash
# Builds (if needed) and runs every test: op tests, data, engine/graph, CLI end-to-end.
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -R e2e
# Real-data tests read ../shared/data (override with TRAINER_DATA=dir) and skip, saying why,
# when it is absent. CUDA tests skip, saying why, when no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || scripts/setup.sh
cmake --build "$build" --parallel
cd "$build"
set +e
ctest --output-on-failure --timeout 900 "$@"
rc=$?
# Figures the tests report and every skip with its reason (Catch2 WARN lines), also when passing.
awk '/warning:$/ {w = 1; msg = ""; next}
     w && /^[[:space:]]*$/ {w = 0; gsub(/^ +| +$/, "", msg); print "  " msg; next}
     w {sub(/^ +/, ""); msg = msg (msg == "" ? "" : " ") $0}' Testing/Temporary/LastTest.log | sort -u
exit $rc
