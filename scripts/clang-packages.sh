#!/usr/bin/env bash
# Installs what the sanitizer builds (scripts/asan-build.sh, scripts/test-tsan.sh) compile with, if
# missing: clang-14, its sanitizer and libFuzzer runtimes (libclang-rt-14-dev), LLVM's OpenMP
# (libomp-14-dev: clang's -fopenmp) and llvm-14 (llvm-symbolizer: file:line in reports).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/apt-install.sh clang-packages /tmp/trainer-apt-clang.log clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
