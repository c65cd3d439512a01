#!/usr/bin/env bash
# Installs every dependency from Debian 12's packages (idempotent) and builds the trainer into
# build/ (only it: scripts/test.sh builds the tests, so that the README's first command trains in
# minutes).
#   scripts/setup.sh            # install what is missing, configure, build build/trainer
#   BUILD_DIR=out scripts/setup.sh
# Environment: CI=true turns compiler warnings into errors; TRAINER_CUDA=AUTO|ON|OFF (default AUTO:
# the CUDA backend is compiled where an NVIDIA driver is loaded and nvcc is found, for the GPUs
# present; ON compiles it wherever nvcc is, e.g. /usr/local/cuda/bin/nvcc, as CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config   # toolchain
  libyaml-cpp-dev                                 # configs
  nlohmann-json3-dev                              # JSON: checkpoint sidecars, safetensors headers
  libcli11-dev                                    # command line
  libspdlog-dev libfmt-dev                        # formatting, logging
  catch2                                          # tests (v2, header-only)
  libdnnl-dev                                     # oneDNN: CPU conv/pool/BN/matmul
  libturbojpeg0-dev libjpeg62-turbo-dev           # JPEG decoding (TurboJPEG and libjpeg APIs)
  libpng-dev zlib1g-dev                           # PNG and .gz decoding
  libplplot-dev plplot-driver-cairo               # curves.png (PLplot and its pngcairo device)
  tar gzip                                        # unpacking test data
  python3-numpy                                   # tests: an independent safetensors reader
  python3-torch                                   # tests: the Keras peer check (PyTorch written to Keras's formulas)
  libopenmpi-dev openmpi-bin                      # MPI: runs across processes/nodes (mpirun)
  libprotobuf-dev protobuf-compiler               # TensorBoard event files (its Event/Summary protobufs)
  libonnx-dev                                     # trainer export: the ONNX model built with ONNX's own protobuf classes
  python3-onnx python3-opencv python3-protobuf    # tests: onnx.checker, OpenCV's DNN runs the export, an event reader
  fortunes                                        # text: configs/gpt_bytes.yaml's corpus (/usr/share/games/fortunes, 2.6 MB)
)
scripts/apt-install.sh setup /tmp/trainer-apt.log "${packages[@]}"

build=${BUILD_DIR:-build}
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_WERROR=$werror \
  -DTRAINER_CUDA="${TRAINER_CUDA:-AUTO}" >/dev/null
cmake --build "$build" --parallel --target trainer
echo "setup: built $build/trainer (scripts/test.sh builds and runs the tests)"
