#!/usr/bin/env bash
# Downloads the CIFAR-100 binary release (161 MB) and unpacks it for `type: cifar100_bin`:
#   datasets/cifar-100-binary/{train.bin, test.bin, fine_label_names.txt, coarse_label_names.txt}
#   datasets/cifar100/fetch.sh
# The MD5 is the one published on https://www.cs.toronto.edu/~kriz/cifar.html (no SHA-256 is published).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=datasets/fetch-lib.sh
. datasets/fetch-lib.sh
url=https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz
tarball=datasets/downloads/cifar-100-binary.tar.gz
if [ -f datasets/cifar-100-binary/test.bin ]; then echo "datasets/cifar-100-binary exists"; exit 0; fi
fetch "$url" "$tarball"
check_sum md5 "$tarball" 03b5dce01913d631647c71ecec9e9cb8
tar -xzf "$tarball" -C datasets   # -> datasets/cifar-100-binary/
for f in train.bin:153700000 test.bin:30740000; do   # 50,000 and 10,000 records of 3,074 bytes
  name=${f%%:*} want=${f##*:} size=$(stat -c %s "datasets/cifar-100-binary/${f%%:*}")
  [ "$size" = "$want" ] || { echo "datasets/cifar-100-binary/$name: $size bytes, expected $want" >&2; exit 3; }
done
echo "datasets/cifar-100-binary: 50,000 train + 10,000 test images, 100 fine / 20 coarse classes"
