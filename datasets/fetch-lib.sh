# shellcheck shell=bash
# Helpers for the fetch scripts (sourced, not run): download with curl or wget, verify checksums.

# fetch URL FILE: downloads URL to FILE (via FILE.part, so an interrupted download is never taken
# for a complete one) unless FILE exists. Returns non-zero when the download fails (also where
# `set -e` does not apply, e.g. in `fetch ... || next_mirror`).
fetch() {
  local url=$1 file=$2
  if [ -s "$file" ]; then echo "have $file"; return 0; fi
  mkdir -p "$(dirname "$file")" || return 1
  echo "downloading $url"
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 --connect-timeout 30 -o "$file.part" "$url" || { rm -f "$file.part"; return 1; }
  elif command -v wget >/dev/null 2>&1; then
    wget -O "$file.part" "$url" || { rm -f "$file.part"; return 1; }
  else
    echo "fetch: need curl or wget" >&2; return 1
  fi
  mv "$file.part" "$file"
}

# check_sum md5|sha256 FILE EXPECTED: stops (and removes FILE) when the digest differs.
check_sum() {
  local algo=$1 file=$2 want=$3 got
  got=$("${algo}sum" "$file" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "$file: $algo $got, expected $want (removed; run again to download it again)" >&2
    rm -f "$file"; exit 1
  fi
  echo "$file: $algo ok"
}
