#!/usr/bin/env bash
# The fast paths' differential tests ([fuzz]: tests/unit/ops/fastpath_*_test.cpp, fuzz_conv_test.cpp)
# for longer than CI runs them, before a release: each for SECONDS seconds from a fresh seed, which
# is printed (a failure prints TRAINER_FUZZ_SEED=... TRAINER_FUZZ_CASE=k, which reproduces it alone).
#   scripts/fuzz-numerics.sh 600           # ten minutes per test
#   TRAINER_FUZZ_SEED=123 scripts/fuzz-numerics.sh 60
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || scripts/setup.sh
cmake --build "$build" --parallel --target unit_ops >/dev/null
seed=${TRAINER_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "fuzz-numerics: seed $seed, $seconds s per test"
rc=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS= read -r name; do
  [ -n "$name" ] || continue
  spec=${name//,/\\,}  # Catch2 reads a comma as "or"
  echo "fuzz-numerics: $name"
  # The test's own exit status (under pipefail, `... | grep || true` would leave PIPESTATUS as
  # true's 0 whenever the test failed: every failure read as a pass until 2026-11-29).
  st=0
  TRAINER_FUZZ_SEED=$seed TRAINER_FUZZ_SECONDS=$seconds "$build/tests/unit_ops" "$spec" >"$log" 2>&1 || st=$?
  grep -v -E '^(~+|-+|\.+|Filters: .*|unit_ops is a Catch .*|Run with -\? .*|=+|)$' "$log" || true
  # 77: the test could not run here (no GPU, no AVX-512: skip.h), said above; not a failure.
  if [ "$st" -eq 77 ]; then echo "fuzz-numerics: $name: skipped, in whole or in part (the reason above)"; elif [ "$st" -ne 0 ]; then
    echo "fuzz-numerics: $name: FAILED (exit $st)"
    rc=1
  fi
done < <("$build/tests/unit_ops" --list-test-names-only "[fuzz]")
echo "fuzz-numerics: $([ $rc -eq 0 ] && echo "no failure" || echo "FAILED"), seed $seed"
exit $rc
