#!/usr/bin/env bash
# The config loader's fuzz run alone (kept for habit): scripts/fuzz.sh [seconds] config.
#   scripts/fuzz-config.sh [seconds]          (default 60)
exec "$(dirname "$0")/fuzz.sh" "${1:-60}" config
