#!/usr/bin/env bash
# MiniGoogLeNet training throughput on CPU next to the PyTorch peer (../shared/anchors), run in
# alternation in one command so both see the same machine; prints both medians, the ratio, and
# both processes' peak resident memory.
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

# Runs a command; prints its output, then "maxrss_kb N": the process's peak resident set size
# (getrusage of the child), measured the same way for both sides.
peak() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
sys.stdout.write(r.stdout)
print("maxrss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)' "$@"
}
ours=() theirs=() ours_rss=() theirs_rss=()
for r in $(seq "$rounds"); do
  o=$(peak "$build/trainer" bench configs/minigooglenet.yaml --threads "$threads" --steps "$steps" --warmup 3 \
        --set train.batch_size="$batch")
  t=$(peak /usr/bin/python3 "$peer" --threads "$threads" --channels-last --batch "$batch" --steps "$steps" --warmup 3)
  oi=$(grep images_per_sec <<<"$o" | tail -1 | sed -E 's/.*"images_per_sec": ([0-9.]+).*/\1/')
  ti=$(grep images_per_s <<<"$t" | tail -1 | sed -E 's/.*"images_per_s": ([0-9.]+).*/\1/')
  om=$(awk '/^maxrss_kb/ {printf "%.0f", $2 / 1024}' <<<"$o") tm=$(awk '/^maxrss_kb/ {printf "%.0f", $2 / 1024}' <<<"$t")
  echo "round $r: trainer $oi img/s (peak RSS $om MiB), pytorch $ti img/s (peak RSS $tm MiB)"
  ours+=("$oi") theirs+=("$ti") ours_rss+=("$om") theirs_rss+=("$tm")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}")
printf '\nMiniGoogLeNet training, fp32, batch %s, %s threads (median of %s rounds of %s steps)\n' "$batch" "$threads" "$rounds" "$steps"
printf '  %-36s %10s img/s\n' "trainer" "$mo" "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') channels-last" "$mt"
printf '  %-36s %10s\n' "ratio trainer/PyTorch" "$(awk -v a="$mo" -v b="$mt" 'BEGIN {printf "%.2fx", a/b}')"
printf '  %-36s %10s MiB (trainer), %s MiB (PyTorch)\n' "peak RSS (median)" "$(median "${ours_rss[@]}")" "$(median "${theirs_rss[@]}")"
