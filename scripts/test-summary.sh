#!/usr/bin/env bash
# The counts of the last ctest run in a build folder, and why each skipped test did not run.
#   scripts/test-summary.sh BUILD_DIR      (reads BUILD_DIR/Testing/junit.xml: ctest --output-junit Testing/junit.xml)
# Prints "tests: N passed, M skipped, K failed", then one line per skipped test: its name and its
# "SKIPPED (<kind>): <reason>" line (tests/skip.h; CTest's SKIP_RETURN_CODE 77). A test CTest did not
# run for another reason (its executable missing) counts as failed, as CTest counts it.
set -euo pipefail
junit=${1:?usage: scripts/test-summary.sh BUILD_DIR}/Testing/junit.xml
[ -f "$junit" ] || { echo "test-summary: no $junit (ctest --output-junit Testing/junit.xml)" >&2; exit 2; }
awk '
  function unescape(s) {
    gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s); gsub(/&amp;/, "\\&", s)
    return s
  }
  function attr(line, key,   v) {
    if (!match(line, key "=\"[^\"]*\"")) return ""
    v = substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 3)
    return unescape(v)
  }
  /^[[:space:]]*<testcase / { name = attr($0, "name"); status = attr($0, "status"); why = ""; more = 0; skip77 = 0; next }
  /<skipped message="SKIP_RETURN_CODE=/ { skip77 = 1 }
  # Catch2 wraps a long message at 80 columns: its next lines, indented alike, up to a blank line.
  more && /^  [^ ]/ && !/<\/system-out>/ { line = unescape($0); sub(/^ +/, "", line); why = why " " line; next }
  { more = 0 }
  why == "" && /SKIPPED \(/ { why = unescape($0); sub(/^.*SKIPPED \(/, "SKIPPED (", why); more = 1 }
  /<\/testcase>/ {
    if (status == "run") passed++
    else if (status == "notrun" && skip77) { skipped++; list[skipped] = "  " name ": " (why == "" ? "(no SKIPPED line in its output)" : why) }
    else failed++
  }
  END {
    printf "tests: %d passed, %d skipped, %d failed\n", passed, skipped, failed
    for (i = 1; i <= skipped; i++) print list[i]
  }' "$junit"
