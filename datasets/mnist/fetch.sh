#!/usr/bin/env bash
# Downloads MNIST's four IDX files (gzip, 11 MB in all) into datasets/mnist/ for `type: mnist_idx`
# (which reads the .gz files as they are):
#   datasets/mnist/{train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
#                   t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz}
#   datasets/mnist/fetch.sh [MIRROR_URL/]
# yann.lecun.com, the original site, often refuses downloads now, so PyTorch's mirror is the
# default and the others are tried after it. The original site publishes no checksums: the MD5s
# below are those torchvision and TensorFlow Datasets check.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=datasets/fetch-lib.sh
. datasets/fetch-lib.sh
mirrors=(${1:+"$1"} https://ossci-datasets.s3.amazonaws.com/mnist/ https://storage.googleapis.com/cvdf-datasets/mnist/
         http://yann.lecun.com/exdb/mnist/)
files=(train-images-idx3-ubyte.gz:f68b3c2dcbeaaa9fbdd348bbdeb94873
       train-labels-idx1-ubyte.gz:d53e105ee54ea40749a09fcbcd1e9432
       t10k-images-idx3-ubyte.gz:9fb629c4189551a2d022fa330f9573f3
       t10k-labels-idx1-ubyte.gz:ec29112dd5afa0611ce80d1b7f02629c)
for entry in "${files[@]}"; do
  name=${entry%%:*} md5=${entry##*:} out=datasets/mnist/${entry%%:*}
  for m in "${mirrors[@]}"; do
    [ -s "$out" ] && break
    fetch "$m$name" "$out" || echo "  (failed; trying the next mirror)"
  done
  [ -s "$out" ] || { echo "mnist: could not download $name from any mirror" >&2; exit 1; }
  check_sum md5 "$out" "$md5"
done
echo "datasets/mnist: 60,000 train + 10,000 test images (28x28 gray)"
