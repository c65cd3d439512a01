#!/usr/bin/env bash
# Downloads the CIFAR-10 binary release (162 MB) and unpacks it for `type: cifar10_bin`:
#   datasets/cifar-10-batches-bin/{data_batch_1..5.bin, test_batch.bin, batches.meta.txt}
#   datasets/cifar10/fetch.sh
# The MD5 is the one published on https://www.cs.toronto.edu/~kriz/cifar.html (no SHA-256 is published).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=datasets/fetch-lib.sh
. datasets/fetch-lib.sh
url=https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
tarball=datasets/downloads/cifar-10-binary.tar.gz
if [ -f datasets/cifar-10-batches-bin/test_batch.bin ]; then echo "datasets/cifar-10-batches-bin exists"; exit 0; fi
fetch "$url" "$tarball"
check_sum md5 "$tarball" c32a1d4ab5d03f1284b67883e8d87530
tar -xzf "$tarball" -C datasets   # -> datasets/cifar-10-batches-bin/
for f in data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin; do
  size=$(stat -c %s "datasets/cifar-10-batches-bin/$f")
  [ "$size" = 30730000 ] || { echo "datasets/cifar-10-batches-bin/$f: $size bytes, expected 30730000" >&2; exit 3; }
done
echo "datasets/cifar-10-batches-bin: 50,000 train + 10,000 test images"
