#!/usr/bin/env bash
# Builds a small REAL cats-vs-dogs set from this project's shared CIFAR-10 JPEGs: the cat and dog
# classes of the CIFAR-10 train split become train/, those of the test split val/:
#   datasets/cats_vs_dogs_cifar/{train,val}/{cat,dog}/NNNN.jpg   (5,000 + 1,000 per class, 32x32)
#   datasets/cats_vs_dogs/from-shared.sh [DIR_WITH_TARBALLS]      (default: ../shared/data or $TRAINER_DATA)
# Needs no internet. Configs resize it (image_size: [224, 224]) for MobileNetV2-style models.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-${TRAINER_DATA:-../shared/data}}
out=datasets/cats_vs_dogs_cifar
for pair in train:train test:val; do
  split=${pair%%:*} dest=${pair##*:}
  tarball="$src/cifar10-jpg-$split.tar.gz"
  [ -f "$tarball" ] || { echo "from-shared: $tarball not found" >&2; exit 3; }
  if [ -d "$out/$dest/cat" ] && [ -d "$out/$dest/dog" ]; then echo "$out/$dest exists"; continue; fi
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/cats-dogs.XXXXXX")
  # Members are cifar10-jpg/<split>/<class>/NNNN.jpg: keep <class>/NNNN.jpg of cat and dog only.
  tar -xzf "$tarball" -C "$tmp" --strip-components=2 "cifar10-jpg/$split/cat" "cifar10-jpg/$split/dog"
  mkdir -p "$out/$dest"
  rm -rf "$out/$dest/cat" "$out/$dest/dog"
  mv "$tmp/cat" "$tmp/dog" "$out/$dest/"
  rmdir "$tmp"
  echo "$out/$dest: $(ls "$out/$dest/cat" | wc -l) cats, $(ls "$out/$dest/dog" | wc -l) dogs (CIFAR-10 $split split)"
done
