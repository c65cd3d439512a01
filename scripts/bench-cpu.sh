#!/usr/bin/env bash
# MiniGoogLeNet training throughput on CPU next to the PyTorch peer (../shared/anchors), run in
# alternation in one command so both see the same machine; prints both medians and the ratio.
#   scripts/bench-cpu.sh                    # fp32, batch 64, 2 threads, 3 rounds of 20 steps
#   THREADS=4 BATCH=128 ROUNDS=5 scripts/bench-cpu.sh
# Needs PyTorch for the peer: installs Debian's python3-torch (1.13, oneDNN) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2} batch=${BATCH:-64} steps=${STEPS:-20} rounds=${ROUNDS:-3}
peer=${PEER:-../shared/anchors/minigooglenet_torch.py}
build=${BUILD_DIR:-build}
[ -x "$build/trainer" ] || scripts/setup.sh
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends python3-torch >/tmp/trainer-apt.log 2>&1 ||
    { $SUDO apt-get update >>/tmp/trainer-apt.log 2>&1 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends python3-torch >>/tmp/trainer-apt.log 2>&1; }
fi
[ -f "$peer" ] || { echo "bench-cpu: the PyTorch peer $peer is missing (set PEER=...)"; exit 2; }

ours=() theirs=()
for r in $(seq "$rounds"); do
  o=$("$build/trainer" bench configs/minigooglenet.yaml --threads "$threads" --steps "$steps" --warmup 3 \
        --set train.batch_size="$batch" | tail -1)
  t=$(/usr/bin/python3 "$peer" --threads "$threads" --channels-last --batch "$batch" --steps "$steps" --warmup 3 | tail -1)
  oi=$(sed -E 's/.*"images_per_sec": ([0-9.]+).*/\1/' <<<"$o")
  ti=$(sed -E 's/.*"images_per_s": ([0-9.]+).*/\1/' <<<"$t")
  echo "round $r: trainer $oi img/s, pytorch $ti img/s"
  ours+=("$oi") theirs+=("$ti")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}")
printf '\nMiniGoogLeNet training, fp32, batch %s, %s threads (median of %s rounds of %s steps)\n' "$batch" "$threads" "$rounds" "$steps"
printf '  %-36s %10s img/s\n' "trainer" "$mo" "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') channels-last" "$mt"
printf '  %-36s %10s\n' "ratio trainer/PyTorch" "$(awk -v a="$mo" -v b="$mt" 'BEGIN {printf "%.2fx", a/b}')"
