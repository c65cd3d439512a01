#!/usr/bin/env bash
# Installs what the sanitizer builds (scripts/asan-build.sh, scripts/test-tsan.sh) compile with, if
# missing: clang-14, its sanitizer and libFuzzer runtimes (libclang-rt-14-dev), LLVM's OpenMP
# (libomp-14-dev: clang's -fopenmp) and llvm-14 (llvm-symbolizer: file:line in reports).
# Sourced or run; the apt log goes to /tmp/trainer-apt-clang.log.
set -euo pipefail
packages=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "clang-packages: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/trainer-apt-clang.log 2>&1; then
    $SUDO apt-get update >>/tmp/trainer-apt-clang.log 2>&1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}" \
      >>/tmp/trainer-apt-clang.log 2>&1 || { tail -20 /tmp/trainer-apt-clang.log; exit 1; }
  fi
fi
