#!/usr/bin/env bash
# Unpacks this project's shared copy of CIFAR-10 (JPEG, image-folder layout) into
# datasets/cifar10-jpg/{train,test}/<class>/NNNN.jpg, where configs/minigooglenet.yaml reads it.
#   datasets/cifar10/unpack-shared.sh [DIR_WITH_TARBALLS]   (default: ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-${TRAINER_DATA:-../shared/data}}
for split in train test; do
  tarball="$src/cifar10-jpg-$split.tar.gz"
  [ -f "$tarball" ] || { echo "unpack-shared: $tarball not found" >&2; exit 3; }
  [ -d "datasets/cifar10-jpg/$split" ] && { echo "datasets/cifar10-jpg/$split exists"; continue; }
  mkdir -p datasets
  tar -xzf "$tarball" -C datasets
  echo "unpacked $split -> datasets/cifar10-jpg/$split"
done
