#!/usr/bin/env bash
# Loader benchmark (not a test): decode + augment throughput of `trainer bench-data` on real JPEGs.
#   scripts/bench-loader.sh [BUILD_DIR]        (default: build; builds the trainer target there)
# Cases, each with 1 and 2 loader workers:
#   cifar10 32x32   configs/bench/cifar10.yaml (MiniGoogLeNet's shift + flip + per-pixel mean) on the
#                   50,000 CIFAR-10 training JPEGs; cache: auto (decoded at open, in memory) and
#                   cache: false (decoded by the workers on every access)
#   cats/dogs 224   configs/bench/cats_dogs_224.yaml: the 10,000 CIFAR cat/dog training JPEGs resized
#                   32 -> 224 (antialiased bilinear), flip, MobileNetV2 preprocessing; same two caches
# Columns: open = setup_data seconds (open + decode when cached + statistics); cold = images /
# (open + first epoch); epoch 1 and cached = img/s of the first epoch and the mean of the later ones.
# Data comes from ../shared/data (datasets/cifar10/unpack-shared.sh, datasets/cats_vs_dogs/from-shared.sh).
# Numbers depend on the machine and on what else runs on it: the load average is printed with them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/trainer" ] || [ -n "${REBUILD:-}" ]; then
  cmake -S . -B "$build" -G Ninja -DTRAINER_TESTS=OFF >/dev/null
  ninja -C "$build" trainer >/dev/null
fi
bash datasets/cifar10/unpack-shared.sh >/dev/null
bash datasets/cats_vs_dogs/from-shared.sh >/dev/null
epochs=${EPOCHS:-4}

echo "machine: $(nproc) hardware threads; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-14s %-6s %7s %8s %10s %10s %10s\n' case cache workers open_s cold_img/s epoch1 cached
for c in cifar10:configs/bench/cifar10.yaml cats_dogs_224:configs/bench/cats_dogs_224.yaml; do
  name=${c%%:*} config=${c#*:}
  for cache in auto false; do
    for workers in 1 2; do
      line=$("$build/trainer" bench-data "$config" --workers "$workers" --epochs "$epochs" \
               --set "data.train.cache=$cache" --set "data.val.cache=$cache")
      python3 - "$name" "$cache" "$workers" "$line" <<'PY'
import json, sys
name, cache, workers, line = sys.argv[1:5]
r = json.loads(line)
rates = r["epoch_img_per_sec"]
later = sum(rates[1:]) / max(1, len(rates) - 1) if len(rates) > 1 else float("nan")
print(f"{name:14s} {cache:6s} {workers:>7s} {r['open_seconds']:8.2f} {r['cold_img_per_sec']:10.0f} "
      f"{rates[0]:10.0f} {later:10.0f}")
PY
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
