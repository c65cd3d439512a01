#!/usr/bin/env bash
# Runs every test case of a Catch2 test binary in a process of its own (as CTest does), so that one
# CUDA fault (sticky for its process) cannot hide the other cases; optionally under a wrapper such
# as compute-sanitizer. Prints one line per failing case, one per skipped case (exit 77, tests/skip.h:
# its "SKIPPED (<kind>): <reason>" line) and a summary line last:
#   <name>: P passed, K skipped, F failed[, N not run (time bound)] (T cases, W with a warning line) [, R sanitizer reports]
#
#   scripts/run-isolated.sh BINARY LOGDIR [options]
#     --filter REGEX     only the cases whose name matches (grep -E)
#     --shard K/N        only cases K, K+N, K+2N, ... of the (filtered) list (K from 1)
#     --wrap "CMD ..."   run each case as CMD ... BINARY CASE (e.g. compute-sanitizer --tool memcheck)
#     --timeout S        per case (default 120); a case over it counts as failed
#     --deadline EPOCH   no case starts after this time (date +%s), and none runs past it: the cases
#                        left are counted as "not run", so that the caller's time bound always holds
#     --jobs N           cases at once (default 1; several share one GPU fine)
#     --list             only print how many cases would run ("N cases") and exit 0 (dry runs)
# Exit status: 0 when every case ran and passed or skipped (and the wrapper reported nothing), 1 otherwise.
set -uo pipefail
bin=$1 logdir=$2
shift 2
filter="" wrap="" timeout=120 jobs=1 deadline=0 shard="" list_only=0
while (($#)); do
  case $1 in
    --filter) filter=$2; shift 2 ;;
    --shard) shard=$2; shift 2 ;;
    --wrap) wrap=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --list) list_only=1; shift ;;
    *) echo "run-isolated: unknown option $1" >&2; exit 2 ;;
  esac
done
name=$(basename "$bin")
mkdir -p "$logdir"
list=$logdir/cases.txt
# (30 s at most: a binary that hangs while starting, e.g. on a GPU in a bad state, would hang the caller.)
timeout 30 "$bin" --list-test-names-only 2>/dev/null | sed '/^$/d' >"$list.all"
if [ -n "$filter" ]; then grep -E -- "$filter" "$list.all" >"$list.f" || true; else cp "$list.all" "$list.f"; fi
if [ -n "$shard" ]; then
  k=${shard%/*} n=${shard#*/}
  awk -v k="$k" -v n="$n" '(NR - k) % n == 0' "$list.f" >"$list"
else
  cp "$list.f" "$list"
fi
total=$(wc -l <"$list")
if ((list_only)); then
  echo "$total cases"
  exit 0
fi

# One case: escape Catch2's test-spec characters (\ , [ ] * ~ and a leading/trailing space is kept
# by the quotes), run it with --warn NoTests (a name that matches nothing fails), log it. Past the
# deadline it is not started (rc "notrun"); close to it, its timeout shrinks to the time left.
run_case() {
  local i=$1 case=$2
  local spec=${case//\\/\\\\}
  spec=${spec//,/\\,}
  spec=${spec//[/\\[}
  spec=${spec//]/\\]}
  spec=${spec//\*/\\*}
  [[ $spec == ~* ]] && spec="\\$spec"
  local log=$logdir/case-$i.log t=$timeout
  if [ "$deadline" -gt 0 ]; then
    local left=$((deadline - $(date +%s)))
    if [ "$left" -lt 5 ]; then
      echo notrun >"$logdir/case-$i.rc"
      return
    fi
    [ "$left" -lt "$t" ] && t=$left
  fi
  # shellcheck disable=SC2086
  timeout --kill-after=5 "$t" $wrap "$bin" "$spec" --warn NoTests >"$log" 2>&1
  local rc=$?
  echo "$rc" >"$logdir/case-$i.rc"
}
export -f run_case
export bin logdir timeout wrap deadline
nl -ba -w1 -s$'\t' "$list" | xargs -d '\n' -P "$jobs" -I{} bash -c 'IFS=$'"'"'\t'"'"' read -r i c <<<"$1"; run_case "$i" "$c"' _ {}

passed=0 skipped_cases=0 failed=0 notrun=0 warned=0 reports=0 hostonly=0
i=0
while IFS= read -r case; do
  i=$((i + 1))
  rc=$(cat "$logdir/case-$i.rc" 2>/dev/null || echo 99)
  if [ "$rc" = notrun ]; then
    notrun=$((notrun + 1))
    continue
  fi
  log=$logdir/case-$i.log
  grep -q "warning:" "$log" && warned=$((warned + 1))
  # compute-sanitizer's summary line: "========= ERROR SUMMARY: N errors"
  r=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p' "$log" | tail -1)
  reports=$((reports + ${r:-0}))
  # A case that makes no CUDA call (host-only kernel math, policies) gives the sanitizer nothing to
  # instrument: compute-sanitizer then exits 255 with this line although the case passed — or
  # skipped (its exit 77 lost: the cuDNN attention plans under cuDNN 9.14, 2026-11-30).
  hostonly_rc=0
  [ -n "$wrap" ] && [ "$rc" = 255 ] && grep -q "terminated before first instrumented API call" "$log" && hostonly_rc=1
  if ((hostonly_rc)) && grep -q "^All tests passed" "$log"; then
    passed=$((passed + 1)) hostonly=$((hostonly + 1))
  elif ((hostonly_rc)) && grep -q "SKIPPED (" "$log" && ! grep -q "FAILED" "$log"; then
    skipped_cases=$((skipped_cases + 1))
    echo "SKIPPED: $case: $(grep -m1 -o 'SKIPPED (.*' "$log" | sed 's/^SKIPPED //')"
  elif [ "$rc" = 0 ] && [ "${r:-0}" = 0 ]; then
    passed=$((passed + 1))
  elif [ "$rc" = 77 ] && [ "${r:-0}" = 0 ]; then
    skipped_cases=$((skipped_cases + 1))
    echo "SKIPPED: $case: $(grep -m1 -o 'SKIPPED (.*' "$log" | sed 's/^SKIPPED //')"
  else
    failed=$((failed + 1))
    why="exit $rc"
    { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && why="timed out"
    [ "${r:-0}" != 0 ] && why="$why, $r sanitizer reports"
    echo "FAILED ($why): $case   [$log]"
  fi
done <"$list"
extra=""
[ -n "$wrap" ] && extra=", $reports sanitizer reports, $hostonly passed with no CUDA call to check"
skipped=""
[ "$notrun" -gt 0 ] && skipped=", $notrun not run (time bound)"
echo "$name: $passed passed, $skipped_cases skipped, $failed failed$skipped ($total cases, $warned with a warning line)$extra"
[ "$failed" = 0 ] && [ "$notrun" = 0 ]
