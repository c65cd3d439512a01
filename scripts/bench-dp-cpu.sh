#!/usr/bin/env bash
# Data parallelism on CPU: MiniGoogLeNet at the same global batch, two replicas of one thread
# each (--cpu 2) against one replica of two threads (--cpu 1), run in alternation; prints both
# medians, their ratio, and the share of the gradient all-reduce hidden behind backward.
#   scripts/bench-dp-cpu.sh            # global batch 64, 3 rounds of 20 steps
#   BATCH=128 ROUNDS=5 scripts/bench-dp-cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${BATCH:-64} steps=${STEPS:-20} rounds=${ROUNDS:-3} build=${BUILD_DIR:-build}
[ -x "$build/trainer" ] || scripts/setup.sh
field() { sed -nE "s/.*\"$1\": ([0-9.]+).*/\\1/p" | tail -1; }
one=() two=() hidden=() ar=()
for r in $(seq "$rounds"); do
  a=$("$build/trainer" bench configs/minigooglenet.yaml --cpu 1 --threads 2 --steps "$steps" --set train.batch_size="$batch")
  b=$("$build/trainer" bench configs/minigooglenet.yaml --cpu 2 --threads 1 --steps "$steps" --set train.batch_size=$((batch / 2)))
  one+=("$(field images_per_sec <<<"$a")") two+=("$(field images_per_sec <<<"$b")")
  hidden+=("$(field allreduce_hidden <<<"$b")") ar+=("$(field allreduce_ms_per_step <<<"$b")")
  echo "round $r: --cpu 1 (2 threads) ${one[-1]} img/s, --cpu 2 (1 thread each) ${two[-1]} img/s, all-reduce ${ar[-1]} ms/step, hidden ${hidden[-1]}"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
m1=$(median "${one[@]}") m2=$(median "${two[@]}")
printf '\nMiniGoogLeNet, global batch %s, median of %s rounds of %s steps\n' "$batch" "$rounds" "$steps"
printf '  %-40s %10s img/s\n' "--cpu 1 --threads 2" "$m1" "--cpu 2 --threads 1" "$m2"
printf '  %-40s %10s\n' "ratio (--cpu 2)/(--cpu 1)" "$(awk -v a="$m2" -v b="$m1" 'BEGIN {printf "%.3f", a/b}')"
printf '  %-40s %10s ms/step, %s hidden behind backward\n' "gradient all-reduce" "$(median "${ar[@]}")" "$(median "${hidden[@]}")"
