#!/usr/bin/env bash
# Training throughput of `trainer bench` next to the PyTorch peer (same model, batch, threads and
# precision), run alternately in one command so both see the same machine; prints both medians,
# the ratio, and both processes' peak resident memory.
#   scripts/bench-vs-pytorch.sh                              # MiniGoogLeNet, fp32, batch 64, 2 threads
#   PRECISION=bf16 scripts/bench-vs-pytorch.sh               # ours in bf16, PyTorch with bf16 autocast
#   MODEL=mobilenetv2 scripts/bench-vs-pytorch.sh            # MobileNetV2 224x224, batch 16
#   THREADS=4 BATCH=128 ROUNDS=5 STEPS=30 scripts/bench-vs-pytorch.sh
#   DEVICE=cuda MODEL=... BATCH=... PRECISION=... scripts/bench-vs-pytorch.sh
#                         # on a GPU: trainer --gpus 0 against PyTorch 2.x eager and torch.compile
#                         # (python3 on PATH), 50 steps after 10 warm-up, 2 rounds; medians, both
#                         # ratios, and each side's peak device memory (our allocator's, PyTorch's
#                         # max_memory_reserved); STEP_TIMEOUT=S bounds each process (default
#                         # 300 s for ours, 400 s for a peer; scripts/gpu-check.sh sets it)
# Peers: scripts/peers/{minigooglenet,mobilenetv2}_torch.py (the first a copy of
# ../shared/anchors/minigooglenet_torch.py that also reports device memory), run on the CPU by
# Debian's PyTorch 1.13 (/usr/bin/python3, channels_last), installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-minigooglenet} precision=${PRECISION:-fp32} device=${DEVICE:-cpu}
threads=${THREADS:-2}
build=${BUILD_DIR:-build}
case "$model" in
  minigooglenet) config=configs/minigooglenet.yaml peer=${PEER:-scripts/peers/minigooglenet_torch.py}
                 batch=${BATCH:-64} steps=${STEPS:-20} pkgs="python3-torch" ;;
  mobilenetv2)   config=configs/mobilenetv2_cats_vs_dogs.yaml peer=${PEER:-scripts/peers/mobilenetv2_torch.py}
                 batch=${BATCH:-16} steps=${STEPS:-10} pkgs="python3-torch python3-torchvision" ;;
  *) echo "bench-vs-pytorch: MODEL must be minigooglenet or mobilenetv2, not '$model'"; exit 2 ;;
esac
[ -x "${TRAINER:-$build/trainer}" ] || scripts/setup.sh
trainer=${TRAINER:-$build/trainer}
if [ "$device" = cuda ]; then
  rounds=${ROUNDS:-2} steps=${STEPS:-50}
  case "$precision" in
    fp32) ours_prec=() peer_prec=() ;;
    bf16) ours_prec=(--set precision=bf16) peer_prec=(--amp bf16) ;;
    *) echo "bench-vs-pytorch: PRECISION must be fp32 or bf16, not '$precision'"; exit 2 ;;
  esac
  field() { sed -nE "s/.*\"$1\": ?([0-9.]+).*/\1/p" | tail -1; }
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
  declare -A ips mem
  for r in $(seq "$rounds"); do
    o=$(timeout "${STEP_TIMEOUT:-300}" "$trainer" bench "$config" --gpus 0 --steps "$steps" --warmup 10 --set train.batch_size="$batch" \
          "${ours_prec[@]}" 2>&1) || { echo "bench-vs-pytorch: trainer bench failed: $(tail -1 <<<"$o")"; exit 1; }
    ips[trainer]+=" $(field images_per_sec <<<"$o")" mem[trainer]+=" $(field peak_device_mb <<<"$o")"
    for kind in eager compile; do
      extra=(); [ $kind = compile ] && extra=(--compile)
      t=$(timeout "${STEP_TIMEOUT:-400}" python3 "$peer" --device cuda --channels-last --batch "$batch" --steps "$steps" --warmup 10 \
            "${peer_prec[@]}" "${extra[@]}" 2>&1) || { echo "bench-vs-pytorch: the $kind peer failed: $(tail -1 <<<"$t")"; t=""; }
      ips[$kind]+=" $(field images_per_s <<<"$t")" mem[$kind]+=" $(field peak_device_mb <<<"$t")"
    done
    echo "round $r: trainer${ips[trainer]##* } img/s, eager${ips[eager]##* }, compile${ips[compile]##* }"
  done
  printf '\n%s training on %s, %s, batch %s (median of %s rounds of %s steps after 10 warm-up)\n' "$model" \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" "$precision" "$batch" "$rounds" "$steps"
  for k in trainer eager compile; do
    # shellcheck disable=SC2086
    printf '  %-26s %10s img/s   peak device memory %s MiB\n' "$k" "$(median ${ips[$k]:-0})" "$(median ${mem[$k]:-0})"
  done
  # shellcheck disable=SC2086
  mo=$(median ${ips[trainer]:-0}) me=$(median ${ips[eager]:-0}) mc=$(median ${ips[compile]:-0})
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  printf '  %-26s %10s\n  %-26s %10s\n' "ratio vs eager" "$(ratio "$mo" "$me")" "ratio vs torch.compile" "$(ratio "$mo" "$mc")"
  exit 0
fi
rounds=${ROUNDS:-3}
case "$precision" in
  fp32) ours_prec=() peer_prec=() ;;
  bf16) ours_prec=(--set precision=bf16) peer_prec=(--amp bf16) ;;
  *) echo "bench-vs-pytorch: PRECISION must be fp32 or bf16, not '$precision'"; exit 2 ;;
esac
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null || { [ "$model" = mobilenetv2 ] && ! /usr/bin/python3 -c 'import torchvision' 2>/dev/null; }; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $pkgs >/tmp/trainer-apt.log 2>&1 ||
    { $SUDO apt-get update >>/tmp/trainer-apt.log 2>&1 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $pkgs >>/tmp/trainer-apt.log 2>&1; }
fi
[ -f "$peer" ] || { echo "bench-vs-pytorch: the PyTorch peer $peer is missing (set PEER=...)"; exit 2; }

# Runs a command; prints its output, then "maxrss_kb N": the process's peak resident set size
# (getrusage of the child), measured the same way for both sides.
peak() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
sys.stdout.write(r.stdout)
print("maxrss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)' "$@"
}
ours=() theirs=() ours_rss=() theirs_rss=() ours_ceiling=()
for r in $(seq "$rounds"); do
  o=$(peak "$trainer" bench "$config" --threads "$threads" --steps "$steps" --warmup 3 \
        --set train.batch_size="$batch" "${ours_prec[@]}")
  t=$(peak /usr/bin/python3 "$peer" --threads "$threads" --channels-last --batch "$batch" --steps "$steps" --warmup 3 \
        "${peer_prec[@]}") || { echo "bench-vs-pytorch: the PyTorch peer failed (its message is above)"; exit 1; }
  # (trainer's --json is nlohmann's compact dump since 519a489: no space after the colon.)
  oi=$(sed -nE 's/.*"images_per_sec": ?([0-9.]+).*/\1/p' <<<"$o" | tail -1)
  oc=$(sed -nE 's/.*"ceiling_fraction": ?([0-9.]+).*/\1/p' <<<"$o" | tail -1)
  ti=$(sed -nE 's/.*"images_per_s": ?([0-9.]+).*/\1/p' <<<"$t" | tail -1)
  om=$(awk '/^maxrss_kb/ {printf "%.0f", $2 / 1024}' <<<"$o") tm=$(awk '/^maxrss_kb/ {printf "%.0f", $2 / 1024}' <<<"$t")
  echo "round $r: trainer $oi img/s (peak RSS $om MiB), pytorch $ti img/s (peak RSS $tm MiB)"
  ours+=("$oi") theirs+=("$ti") ours_rss+=("$om") theirs_rss+=("$tm") ours_ceiling+=("${oc:-0}")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}")
peer_name="PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)') channels-last"
[ "$precision" = bf16 ] && peer_name+=" bf16 autocast"
printf '\n%s training, %s, batch %s, %s threads (median of %s rounds of %s steps)\n' "$model" "$precision" "$batch" "$threads" "$rounds" "$steps"
printf '  %-44s %10s img/s\n' "trainer" "$mo" "$peer_name" "$mt"
printf '  %-44s %10s\n' "ratio trainer/PyTorch" "$(awk -v a="$mo" -v b="$mt" 'BEGIN {printf "%.2fx", a/b}')"
printf '  %-44s %10s MiB (trainer), %s MiB (PyTorch)\n' "peak RSS (median)" "$(median "${ours_rss[@]}")" "$(median "${theirs_rss[@]}")"
# trainer's share of the machine's ceiling (trainer bench: one large convolution's training step
# with the same threads and precision); PyTorch's at the same FLOPs per image is the ratio times less.
mc=$(median "${ours_ceiling[@]}")
printf '  %-44s %10s (trainer), %s (PyTorch)\n' "fraction of the machine's ceiling" "$mc" \
  "$(awk -v c="$mc" -v a="$mo" -v b="$mt" 'BEGIN {printf "%.2f", c * b / a}')"
