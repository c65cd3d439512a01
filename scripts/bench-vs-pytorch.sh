#!/usr/bin/env bash
# Training throughput of `trainer bench` next to the PyTorch peer (same model, batch, threads and
# precision), run alternately in one command so both see the same machine; prints both medians,
# the ratio, and both processes' peak resident memory.
#   scripts/bench-vs-pytorch.sh                              # MiniGoogLeNet, fp32, batch 64, 2 threads
#   PRECISION=bf16 scripts/bench-vs-pytorch.sh               # ours in bf16, PyTorch with bf16 autocast
#   MODEL=mobilenetv2 scripts/bench-vs-pytorch.sh            # MobileNetV2 224x224, batch 16
#   MODEL=transformer scripts/bench-vs-pytorch.sh            # configs/transformer_sequences.yaml, batch 32
#   MODEL=gpt scripts/bench-vs-pytorch.sh                    # configs/gpt_bytes.yaml (128 tokens a sample), batch 32
#   MODEL=gpt2 DEVICE=cuda PRECISION=bf16 scripts/bench-vs-pytorch.sh   # GPT-2 124M (1024 tokens a sample), batch 4
#   THREADS=4 BATCH=128 ROUNDS=5 STEPS=30 scripts/bench-vs-pytorch.sh
#   DEVICE=cuda MODEL=... BATCH=... PRECISION=... scripts/bench-vs-pytorch.sh
#                         # on a GPU: trainer --gpus 0 against PyTorch 2.x (python3 on PATH) eager,
#                         # eager + cudnn.benchmark and torch.compile default / reduce-overhead /
#                         # max-autotune with it (PEER_VARIANTS="eager benchmark default
#                         # reduce-overhead max-autotune" picks some), 50 steps after 10 warm-up, 2
#                         # rounds; medians, the ratio against each and against the fastest, the
#                         # warm-up (compile) seconds apart, and each side's peak device memory (our
#                         # allocator's, PyTorch's max_memory_reserved); STEP_TIMEOUT=S bounds each
#                         # process (default 300 s for ours, 400 s for a peer; gpu-check sets it), and
#                         # GPU_CHECK_DEADLINE=EPOCH (date +%s; gpu-check's run_bounded sets it) ends them all
# Peers: scripts/peers/{minigooglenet,mobilenetv2,transformer,gpt}_torch.py (the first a copy of
# ../shared/anchors/minigooglenet_torch.py that also reports device memory), run on the CPU by
# Debian's PyTorch 1.13 (/usr/bin/python3, channels_last) with OpenBLAS, installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-minigooglenet} precision=${PRECISION:-fp32} device=${DEVICE:-cpu} peer_args=""
threads=${THREADS:-2}
build=${BUILD_DIR:-build}
case "$model" in
  minigooglenet) config=configs/minigooglenet.yaml peer=${PEER:-scripts/peers/minigooglenet_torch.py}
                 batch=${BATCH:-64} steps=${STEPS:-20} pkgs="python3-torch" ;;
  mobilenetv2)   config=configs/mobilenetv2_cats_vs_dogs.yaml peer=${PEER:-scripts/peers/mobilenetv2_torch.py}
                 batch=${BATCH:-16} steps=${STEPS:-10} pkgs="python3-torch python3-torchvision" ;;
  transformer)   config=configs/transformer_sequences.yaml peer=${PEER:-scripts/peers/transformer_torch.py}
                 batch=${BATCH:-32} steps=${STEPS:-20} pkgs="python3-torch" ;;
  gpt)           config=configs/gpt_bytes.yaml peer=${PEER:-scripts/peers/gpt_torch.py}
                 batch=${BATCH:-32} steps=${STEPS:-20} pkgs="python3-torch" ;;
  gpt2)          config=configs/gpt2_124m.yaml peer=${PEER:-scripts/peers/gpt_torch.py}
                 peer_args="--layers 12 --width 768 --heads 12 --block 1024 --vocab 50257 --tie --gelu tanh --ln-eps 1e-5"
                 batch=${BATCH:-4} steps=${STEPS:-20} pkgs="python3-torch" ;;
  *) echo "bench-vs-pytorch: MODEL must be minigooglenet, mobilenetv2, transformer, gpt or gpt2, not '$model'"; exit 2 ;;
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
  # The PyTorch a careful user runs: eager, eager with cudnn.benchmark (PyTorch's performance guide),
  # and torch.compile's three modes with it (reduce-overhead and max-autotune replay CUDA graphs).
  # PEER_VARIANTS picks some. A variant that fails or does not finish within STEP_TIMEOUT (its
  # compile included) is reported so and left out of the comparison.
  # shellcheck disable=SC2206
  variants=(${PEER_VARIANTS:-eager benchmark default reduce-overhead max-autotune})
  label() { case $1 in eager) echo "eager" ;; benchmark) echo "eager + cudnn.benchmark" ;;
                       *) echo "compile $1 + cudnn.benchmark" ;; esac; }
  flags() { case $1 in eager) ;; benchmark) echo --cudnn-benchmark ;;
                       default | reduce-overhead | max-autotune) echo --cudnn-benchmark --compile-mode "$1" ;;
                       *) echo "bench-vs-pytorch: PEER_VARIANTS: '$1' is not one of eager benchmark default reduce-overhead max-autotune" >&2
                          return 2 ;; esac; }
  for v in "${variants[@]}"; do flags "$v" >/dev/null || exit 2; done
  # within <default>: a process's timeout, STEP_TIMEOUT (or <default>) and no later than GPU_CHECK_DEADLINE.
  # GNU timeout runs its command in a process group of its own: the caller's timeout ending this script
  # does not reach a process started by the `timeout` here, which then ran on past the caller's deadline
  # (into the next phase's time, on the one GPU). At least 1 s: `timeout 0` has no limit.
  within() {
    local t=${STEP_TIMEOUT:-$1} l
    if [ -n "${GPU_CHECK_DEADLINE:-}" ]; then
      l=$((GPU_CHECK_DEADLINE - $(date +%s)))
      if ((l < t)); then t=$l; fi
    fi
    if ((t < 1)); then t=1; fi
    echo "$t"
  }
  field() { sed -nE "s/.*\"$1\": ?([0-9.]+).*/\1/p" | tail -1; }
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
  declare -A ips mem warm
  for r in $(seq "$rounds"); do
    o=$(timeout -k 5 "$(within 300)" "$trainer" bench "$config" --gpus 0 --steps "$steps" --warmup 10 --set train.batch_size="$batch" \
          "${ours_prec[@]}" 2>&1) || { echo "bench-vs-pytorch: trainer bench failed: $(tail -1 <<<"$o")"; exit 1; }
    ips[trainer]+=" $(field images_per_sec <<<"$o")" mem[trainer]+=" $(field peak_device_mb <<<"$o")"
    # Each figure as it is measured (a caller's deadline may cut the round: gpu-check keeps these).
    echo "measured: round $r: trainer ${ips[trainer]##* } img/s"
    line="round $r: trainer ${ips[trainer]##* } img/s"
    for v in "${variants[@]}"; do
      rc=0 limit=$(within 400)
      # shellcheck disable=SC2046
      t=$(timeout -k 5 "$limit" python3 "$peer" --device cuda --channels-last --batch "$batch" --steps "$steps" --warmup 10 \
            "${peer_prec[@]}" $(flags "$v") $peer_args 2>&1) || rc=$?
      if ((rc != 0)); then
        ((rc == 124 || rc == 137)) && echo "bench-vs-pytorch: $(label "$v"): did not finish within $limit s (STEP_TIMEOUT or GPU_CHECK_DEADLINE; compile included)" ||
          echo "bench-vs-pytorch: $(label "$v") failed: $(tail -1 <<<"$t")"
        continue
      fi
      ips[$v]+=" $(field images_per_s <<<"$t")" mem[$v]+=" $(field peak_device_mb <<<"$t")" warm[$v]+=" $(field warmup_seconds <<<"$t")"
      echo "measured: round $r: $(label "$v") ${ips[$v]##* } img/s (warm-up ${warm[$v]##* } s)"
      line+=", $(label "$v") ${ips[$v]##* }"
    done
    echo "$line"
  done
  printf '\n%s training on %s, %s, batch %s (median of %s rounds of %s steps after 10 warm-up; compile time in the warm-up, apart)\n' \
    "$model" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" "$precision" "$batch" "$rounds" "$steps"
  # shellcheck disable=SC2086
  printf '  %-46s %10s img/s   peak device memory %s MiB\n' trainer "$(median ${ips[trainer]:-0})" "$(median ${mem[trainer]:-0})"
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  # shellcheck disable=SC2086
  mo=$(median ${ips[trainer]:-0}) best=0 best_label=""
  for v in "${variants[@]}"; do
    [ -n "${ips[$v]:-}" ] || { printf '  %-46s %10s\n' "$(label "$v")" "did not run (above)"; continue; }
    # shellcheck disable=SC2086
    m=$(median ${ips[$v]})
    # shellcheck disable=SC2086
    printf '  %-46s %10s img/s   peak device memory %s MiB, warm-up %s s\n' "$(label "$v")" "$m" "$(median ${mem[$v]})" "$(median ${warm[$v]})"
    awk -v a="$m" -v b="$best" 'BEGIN { exit !(a > b) }' && best=$m best_label=$(label "$v")
  done
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2086
    [ -n "${ips[$v]:-}" ] && printf '  %-46s %10s\n' "ratio vs $(label "$v")" "$(ratio "$mo" "$(median ${ips[$v]})")"
  done
  printf '  %-46s %10s   (%s)\n' "ratio vs the fastest PyTorch" "$(ratio "$mo" "$best")" "${best_label:-none ran}"
  exit 0
fi
rounds=${ROUNDS:-3}
case "$precision" in
  fp32) ours_prec=() peer_prec=() ;;
  bf16) ours_prec=(--set precision=bf16) peer_prec=(--amp bf16) ;;
  *) echo "bench-vs-pytorch: PRECISION must be fp32 or bf16, not '$precision'"; exit 2 ;;
esac
# OpenBLAS: Debian's PyTorch takes its matrix products from the system BLAS, which is the reference
# (netlib) one unless OpenBLAS is installed: ~1 GFLOP/s for a transformer's [2048 x 128] x [128 x
# 128] on two cores (the peer's mm took 38 ms a call, 2026-11-29). A careful user has OpenBLAS.
# shellcheck disable=SC2086
scripts/apt-install.sh bench-vs-pytorch /tmp/trainer-apt.log $pkgs libopenblas0-pthread
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
  # shellcheck disable=SC2086
  t=$(peak /usr/bin/python3 "$peer" --threads "$threads" --channels-last --batch "$batch" --steps "$steps" --warmup 3 \
        "${peer_prec[@]}" $peer_args) || { echo "bench-vs-pytorch: the PyTorch peer failed (its message is above)"; exit 1; }
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
