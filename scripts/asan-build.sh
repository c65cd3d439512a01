#!/usr/bin/env bash
# The one sanitizer build behind scripts/test-asan.sh and scripts/fuzz.sh: clang-14, ASan + LSan +
# UBSan (UB fatal), CPU only, in build-asan/ (ASAN_BUILD_DIR), with libFuzzer's coverage
# instrumentation in the libraries that read outside bytes (TRAINER_FUZZ: tensor, io, data, graph,
# checkpoint, run; not the compute kernels, whose tests it would only slow).
#   scripts/asan-build.sh [target...]     (default: everything, the tests and the fuzz targets)
# One build for both: CI compiled the whole core twice before (GCC for the tests, clang for the
# fuzz targets); clang compiles it in ~0.6x GCC's time at -O1.
# Installs clang-14 and its runtimes if missing (scripts/clang-packages.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ASAN_BUILD_DIR:-build-asan}

scripts/clang-packages.sh

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
