#!/usr/bin/env bash
# Runs every test case of a Catch2 test binary in a process of its own (as CTest does), so that one
# CUDA fault (sticky for its process) cannot hide the other cases; optionally under a wrapper such
# as compute-sanitizer. Prints one line per failing case and a summary line last:
#   <name>: P passed, F failed (N cases, S with a skip/warning line) [, R sanitizer reports]
#
#   scripts/run-isolated.sh BINARY LOGDIR [options]
#     --filter REGEX     only the cases whose name matches (grep -E)
#     --wrap "CMD ..."   run each case as CMD ... BINARY CASE (e.g. compute-sanitizer --tool memcheck)
#     --timeout S        per case (default 600); a case over it counts as failed
#     --jobs N           cases at once (default 1; several share one GPU fine)
# Exit status: 0 when every case passed (and the wrapper reported nothing), 1 otherwise.
set -uo pipefail
bin=$1 logdir=$2
shift 2
filter="" wrap="" timeout=600 jobs=1
while (($#)); do
  case $1 in
    --filter) filter=$2; shift 2 ;;
    --wrap) wrap=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "run-isolated: unknown option $1" >&2; exit 2 ;;
  esac
done
name=$(basename "$bin")
mkdir -p "$logdir"
list=$logdir/cases.txt
"$bin" --list-test-names-only 2>/dev/null | sed '/^$/d' >"$list.all"
if [ -n "$filter" ]; then grep -E -- "$filter" "$list.all" >"$list" || true; else cp "$list.all" "$list"; fi
total=$(wc -l <"$list")

# One case: escape Catch2's test-spec characters (\ , [ ] * ~ and a leading/trailing space is kept
# by the quotes), run it with --warn NoTests (a name that matches nothing fails), log it.
run_case() {
  local i=$1 case=$2
  local spec=${case//\\/\\\\}
  spec=${spec//,/\\,}
  spec=${spec//[/\\[}
  spec=${spec//]/\\]}
  spec=${spec//\*/\\*}
  [[ $spec == ~* ]] && spec="\\$spec"
  local log=$logdir/case-$i.log
  # shellcheck disable=SC2086
  timeout --kill-after=10 "$timeout" $wrap "$bin" "$spec" --warn NoTests >"$log" 2>&1
  local rc=$?
  echo "$rc" >"$logdir/case-$i.rc"
}
export -f run_case
export bin logdir timeout wrap
nl -ba -w1 -s$'\t' "$list" | xargs -d '\n' -P "$jobs" -I{} bash -c 'IFS=$'"'"'\t'"'"' read -r i c <<<"$1"; run_case "$i" "$c"' _ {}

passed=0 failed=0 warned=0 reports=0
i=0
while IFS= read -r case; do
  i=$((i + 1))
  rc=$(cat "$logdir/case-$i.rc" 2>/dev/null || echo 99)
  log=$logdir/case-$i.log
  grep -q "warning:" "$log" && warned=$((warned + 1))
  # compute-sanitizer's summary line: "========= ERROR SUMMARY: N errors"
  r=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p' "$log" | tail -1)
  reports=$((reports + ${r:-0}))
  if [ "$rc" = 0 ] && [ "${r:-0}" = 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    why="exit $rc"
    [ "$rc" = 124 ] && why="timed out after ${timeout} s"
    [ "${r:-0}" != 0 ] && why="$why, $r sanitizer reports"
    echo "FAILED ($why): $case   [$log]"
  fi
done <"$list"
extra=""
[ -n "$wrap" ] && extra=", $reports sanitizer reports"
echo "$name: $passed passed, $failed failed ($total cases, $warned with a skip/warning line)$extra"
[ "$failed" = 0 ]
