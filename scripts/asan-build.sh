#!/usr/bin/env bash
# The one sanitizer build behind scripts/test-asan.sh and scripts/fuzz.sh: clang-14, ASan + LSan +
# UBSan (UB fatal), CPU only, in build-asan/ (ASAN_BUILD_DIR), with libFuzzer's coverage
# instrumentation in the libraries that read outside bytes (TRAINER_FUZZ: tensor, io, data, graph,
# checkpoint, run; not the compute kernels, whose tests it would only slow).
#   scripts/asan-build.sh [target...]     (default: everything, the tests and the fuzz targets)
# One build for both: CI compiled the whole core twice before (GCC for the tests, clang for the
# fuzz targets); clang compiles it in ~0.6x GCC's time at -O1.
# Installs clang-14, its sanitizer/libFuzzer runtimes (libclang-rt-14-dev), LLVM's OpenMP
# (libomp-14-dev: clang's -fopenmp) and llvm-14 (llvm-symbolizer: file:line in reports) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ASAN_BUILD_DIR:-build-asan}

packages=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "asan-build: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/trainer-apt-clang.log 2>&1; then
    $SUDO apt-get update >>/tmp/trainer-apt-clang.log 2>&1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}" \
      >>/tmp/trainer-apt-clang.log 2>&1 || { tail -20 /tmp/trainer-apt-clang.log; exit 1; }
  fi
fi

# -O1: ASan's recommended level. -gline-tables-only: reports say file:line; full -g made a heavy
# file (core/checkpoint/checkpoint.cpp) compile 1.6x slower.
# A build folder GCC configured (before this script used clang) is started afresh.
if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++-14' "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DTRAINER_CUDA=OFF \
  -DTRAINER_SANITIZE=address -DTRAINER_FUZZ=ON -DTRAINER_TESTS=ON >/dev/null
targets=()
(($#)) && targets=(--target "$@")
cmake --build "$build" --parallel "${targets[@]}"
