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
grep -h -A1 ": warning:" Testing/Temporary/LastTest.log | grep -vE "^--$|: warning:$" | sed 's/^ */  /' | sort -u
exit $rc
