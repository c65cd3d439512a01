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
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # A fresh machine has no package lists: update once, then install.
  if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/trainer-apt.log 2>&1; then
    $SUDO apt-get update >>/tmp/trainer-apt.log 2>&1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}" \
      >>/tmp/trainer-apt.log 2>&1 || { tail -20 /tmp/trainer-apt.log; exit 1; }
  fi
fi

build=${BUILD_DIR:-build}
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_WERROR=$werror \
  -DTRAINER_CUDA="${TRAINER_CUDA:-AUTO}" >/dev/null
cmake --build "$build" --parallel --target trainer
echo "setup: built $build/trainer (scripts/test.sh builds and runs the tests)"
