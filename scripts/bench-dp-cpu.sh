#!/usr/bin/env bash
# Data parallelism on CPU: MiniGoogLeNet at the same global batch, run in alternation:
#   one      one process, one replica of two threads        (--cpu 1 --threads 2)
#   two      one process, two replicas of one thread each   (--cpu 2 --threads 1)
#   mpi      two processes of one single-thread replica     (mpirun -np 2 ... --cpu 1 --threads 1)
# and prints each one's median img/s, the ratios two/one and mpi/one, and for the data-parallel
# runs the gradient all-reduce per step (ms), the share of it hidden behind backward, and the time
# the updates waited for the other replica's backward (imbalance, not communication).
#   scripts/bench-dp-cpu.sh                 # global batch 64, 3 rounds of 20 steps
#   BATCH=128 ROUNDS=5 scripts/bench-dp-cpu.sh
#   MPI=0 scripts/bench-dp-cpu.sh           # without the mpirun runs (also when mpirun is missing)
#   SET="train.bucket_mb=4" scripts/bench-dp-cpu.sh   # extra --set overrides for every run
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${BATCH:-64} steps=${STEPS:-20} rounds=${ROUNDS:-3} build=${BUILD_DIR:-build} model=${MODEL:-configs/minigooglenet.yaml}
[ -x "$build/trainer" ] || scripts/setup.sh
mpi=${MPI:-1}
command -v mpirun >/dev/null 2>&1 || { [ "$mpi" = 1 ] && echo "(mpirun not found: the mpi runs are left out)"; mpi=0; }
sets=()
for s in ${SET:-}; do sets+=(--set "$s"); done
# Open MPI on shared memory only, as the tests run it (containers refuse cross-memory attach).
mpirun_=(env OMPI_MCA_btl=self,vader OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
  mpirun -np 2 --oversubscribe --allow-run-as-root)
field() { sed -nE "s/.*\"$1\": ?([0-9.]+).*/\\1/p" | tail -1; }
bench() { "$build/trainer" bench "$model" --json --steps "$steps" "${sets[@]}" "$@"; }
declare -A img ar hid skew
for r in $(seq "$rounds"); do
  out[0]=$(bench --cpu 1 --threads 2 --set train.batch_size="$batch")
  out[1]=$(bench --cpu 2 --threads 1 --set train.batch_size=$((batch / 2)))
  names=(one two)
  if [ "$mpi" = 1 ]; then
    out[2]=$("${mpirun_[@]}" "$build/trainer" bench "$model" --json --steps "$steps" "${sets[@]}" --cpu 1 --threads 1 \
      --set train.batch_size=$((batch / 2)))
    names+=(mpi)
  fi
  line="round $r:"
  for i in "${!names[@]}"; do
    n=${names[$i]}
    img[$n]+=" $(field images_per_sec <<<"${out[$i]}")"
    line+=" $n $(field images_per_sec <<<"${out[$i]}") img/s"
    if [ "$n" != one ]; then
      ar[$n]+=" $(field allreduce_ms <<<"${out[$i]}")" hid[$n]+=" $(field allreduce_hidden <<<"${out[$i]}")"
      skew[$n]+=" $(field skew_ms <<<"${out[$i]}")"
      line+=" (all-reduce $(field allreduce_ms <<<"${out[$i]}") ms, hidden $(field allreduce_hidden <<<"${out[$i]}"),"
      line+=" waiting for the other replica $(field skew_ms <<<"${out[$i]}") ms)"
    fi
    line+=";"
  done
  echo "$line"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# shellcheck disable=SC2086
m1=$(median ${img[one]})
printf '\n%s, global batch %s, median of %s rounds of %s steps\n' "$(basename "$model" .yaml)" "$batch" "$rounds" "$steps"
printf '  %-48s %10s img/s\n' "one: --cpu 1 --threads 2" "$m1"
declare -A label=([two]="two: --cpu 2 --threads 1" [mpi]="mpi: mpirun -np 2 ... --cpu 1 --threads 1")
for n in two mpi; do
  [ -n "${img[$n]:-}" ] || continue
  # shellcheck disable=SC2086
  m=$(median ${img[$n]})
  printf '  %-48s %10s img/s, ratio to one %s\n' "${label[$n]}" "$m" "$(awk -v a="$m" -v b="$m1" 'BEGIN {printf "%.3f", a/b}')"
  # shellcheck disable=SC2086
  printf '  %-48s %10s ms/step, %s hidden behind backward; waiting for the other replica %s ms/step\n' \
    "  gradient all-reduce" "$(median ${ar[$n]})" "$(median ${hid[$n]})" "$(median ${skew[$n]})"
done
