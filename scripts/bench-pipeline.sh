#!/usr/bin/env bash
# Device parallelism on 2 CPU devices: configs/model_parallel.yaml (a CNN cut A -> B) with each
# batch in M = 1, 2, 4, 8 micro-batches (GPipe); prints images/s, ms/step and the measured
# bubble (stage idle fraction) next to GPipe's ideal (S-1)/(M+S-1), median of ROUNDS rounds.
#   scripts/bench-pipeline.sh                 # batch 64, 3 rounds of 20 steps
#   CONFIG=configs/shared_lstm.yaml MS="1 2 4" scripts/bench-pipeline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
config=${CONFIG:-configs/model_parallel.yaml} batch=${BATCH:-64} steps=${STEPS:-20} rounds=${ROUNDS:-3}
ms=${MS:-1 2 4 8} build=${BUILD_DIR:-build}
[ -x "$build/trainer" ] || scripts/setup.sh
field() { sed -nE "s/.*\"$1\": ?([0-9.]+).*/\\1/p" | tail -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
stages=$("$build/trainer" summary "$config" | awk '/^Memory per device/ {on = 1; next} on && /^  [a-z]/ {n++} END {print n + 0}')
printf '%s, batch %s, %s stages, median of %s rounds of %s steps\n' "$config" "$batch" "$stages" "$rounds" "$steps"
printf '  %4s %10s %9s %8s %8s\n' M img/s ms/step bubble ideal
for m in $ms; do
  ips=() msps=() bub=()
  for r in $(seq "$rounds"); do
    out=$("$build/trainer" bench "$config" --steps "$steps" --warmup 2 --set train.batch_size="$batch" --set pipeline.microbatches="$m")
    ips+=("$(field images_per_sec <<<"$out")") msps+=("$(field ms_per_step <<<"$out")") bub+=("$(field bubble <<<"$out")")
  done
  printf '  %4s %10s %9s %8s %8s\n' "$m" "$(median "${ips[@]}")" "$(median "${msps[@]}")" "$(median "${bub[@]}")" \
    "$(awk -v s="$stages" -v m="$m" 'BEGIN {printf "%.3f", (s - 1) / (m + s - 1)}')"
done
