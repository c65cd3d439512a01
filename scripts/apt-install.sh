#!/usr/bin/env bash
# Installs the Debian packages given that are not installed yet (with sudo when not root; a fresh
# machine without package lists gets one `apt-get update`), the apt output into LOG.
#   scripts/apt-install.sh WHO LOG package...      (WHO names the caller in its one line)
set -euo pipefail
who=$1 log=$2
shift 2
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "$who: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  $SUDO apt-get update >>"$log" 2>&1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >>"$log" 2>&1 ||
    { tail -20 "$log"; exit 1; }
fi
