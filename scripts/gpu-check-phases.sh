#!/usr/bin/env bash
# scripts/gpu-check.sh's phases that run the shipped configs, the engine, the step graphs and the
# benchmarks (sourced by it: its helpers row, skip, need, run_bounded, bench_row, isolated and its
# variables are in scope). Not run on its own.
# --- the shipped configs on the GPU ---------------------------------------------------------------
# config_run <label> <precision> <gpus> <config> [--set ...]: exit code, final loss and val_accuracy
# (metrics.csv: epoch, accuracy, loss, lr, val_accuracy, val_loss), seconds per epoch (metrics.jsonl).
config_run() {
  local label=$1 prec=$2 gpus=$3 cfg=$4
  shift 4
  local name
  name=$(printf '%-22s %-5s --gpus %-4s' "$label" "$prec" "$gpus")
  need "$cfg" "config" || return
  ((dry)) && { skip "$name" "trainer run $cfg"; return; }
  local dir="$out/run-${label// /_}-$prec-g${gpus//,/_}"
  rm -rf "$dir"
  run_bounded "${step_timeout[$phase]}" "$T" run "$cfg" --gpus "$gpus" --set precision="$prec" "$@" --run-dir "$dir" \
    >"$dir.log" 2>&1
  local rc=$?
  ((rc == 125)) && { skip "$name"; return; }
  local last loss acc secs
  last=$(tail -1 "$dir/metrics.csv" 2>/dev/null)
  loss=$(echo "$last" | cut -d, -f3)
  acc=$(echo "$last" | cut -d, -f5)
  secs=$(tail -1 "$dir/metrics.jsonl" 2>/dev/null | sed -nE 's/.*"time_s": *([0-9.]+).*/\1/p')
  row "$name" "$(printf 'exit %-3s loss %-9s val_accuracy %-8s s/epoch %s' "$rc" "${loss:-n/a}" "${acc:-n/a}" "${secs:-n/a}")"
  [ "$rc" != 0 ] && row "  (exit $rc)" "$(grep -v '^\s*$' "$dir.log" | tail -1)"
  # Where the last epoch's time went (metrics.jsonl's time_*_s: input, step, wait, log, checkpoint,
  # validation, epoch_end, other; step_staging and step_launch inside step), in ms, and its
  # host_waits (about one a step: the host and the GPU took turns).
  local parts waits
  parts=$(tail -1 "$dir/metrics.jsonl" 2>/dev/null | grep -oE '"time_[a-z_]+_s": *-?[0-9.e+-]+' |
    sed -E 's/"time_([a-z_]+)_s": *(.*)/\1 \2/' | awk '{printf "%s %.0f  ", $1, $2 * 1000}')
  waits=$(tail -1 "$dir/metrics.jsonl" 2>/dev/null | sed -nE 's/.*"host_waits": *([0-9.e+]+).*/\1/p')
  [ -n "$parts" ] && row "  (ms of the last epoch)" "$parts${waits:+ host_waits $waits}"
}

cifar() {  # unpacks the shared CIFAR-10 JPEGs into /tmp/cifar once; false when they are missing
  [ -d /tmp/cifar/cifar10-jpg/test ] && return 0
  [ -f "$data/cifar10-jpg-train.tar.gz" ] || return 1
  ((dry)) && return 0
  mkdir -p /tmp/cifar && tar -xzf "$data/cifar10-jpg-train.tar.gz" -C /tmp/cifar && tar -xzf "$data/cifar10-jpg-test.tar.gz" -C /tmp/cifar
}

phase_configs() {
  for prec in fp32 bf16; do
    config_run quickstart "$prec" 0 configs/quickstart.yaml
    config_run quickstart "$prec" 0,0 configs/quickstart.yaml --set train.batch_size=32
    config_run smoke "$prec" 0 configs/smoke.yaml
    config_run smoke "$prec" 0,0 configs/smoke.yaml --set train.batch_size=16
    config_run shared_lstm "$prec" 0 configs/shared_lstm.yaml --set placement.lstm_b=gpu:0
    config_run shared_lstm "$prec" 0,0 configs/shared_lstm.yaml
    config_run model_parallel "$prec" 0 configs/model_parallel.yaml --set placement.a1=gpu:0 --set placement.b1=cpu
    config_run model_parallel "$prec" 0,0 configs/model_parallel.yaml --set placement.a1=gpu:0 --set placement.b1=gpu:1
    config_run hybrid "$prec" 0,0,0,0 configs/hybrid.yaml --set placement.a1=gpu:0 --set placement.b1=gpu:1
    config_run "smoke accumulate 4" "$prec" 0,0 configs/smoke.yaml --set train.batch_size=16 --set train.accumulate=4
    config_run "smoke clip_norm 1" "$prec" 0 configs/smoke.yaml --set train.clip_norm=1
    config_run "quickstart ema" "$prec" 0,0 configs/quickstart.yaml --set train.batch_size=32 --set 'train.ema={decay: 0.99}'
  done
  # predict with the averaged weights on the GPU and on the CPU (the config's devices: none): the
  # same top classes and probabilities within rounding (the CSVs' first rows side by side).
  local ema="$out/run-quickstart_ema-fp32-g0_0"
  if ((dry)); then
    skip "predict --gpus 0 vs cpu" "trainer predict $ema"
  elif [ -d "$ema" ]; then
    local imgs="$root/tests/e2e/bad_inputs/bird32x32.jpg $root/tests/e2e/bad_inputs/rgb4x4.png"
    local where flag rc
    for where in gpu cpu; do
      flag=()
      [ $where = gpu ] && flag=(--gpus 0)
      run_bounded 60 "$T" predict "$ema" $imgs "${flag[@]}" --csv "$out/predict-$where.csv" >"$out/predict-$where.log" 2>&1
      rc=$?
      if ((rc == 125)); then skip "predict on the ${where^^}"
      elif ((rc == 0)); then row "predict on the ${where^^}" "$(sed -n 2p "$out/predict-$where.csv")"
      else row "predict on the ${where^^}" "exit $rc: $(grep -v '^[[:space:]]*$' "$out/predict-$where.log" | tail -1)"
      fi
    done
  fi
  # Throughput of the two on the GPU: the hybrid's copies and stages; one gradient all-reduce per
  # accumulated step (gradient_allreduces_per_step).
  if ((dry)); then
    skip "bench hybrid 2x2 --gpus 0,0,0,0" "trainer bench configs/hybrid.yaml"
    skip "bench smoke accumulate 4 --gpus 0,0" "trainer bench configs/smoke.yaml"
    return
  fi
  bounded_row "bench hybrid 2x2 --gpus 0,0,0,0" 60 "$out/bench-hybrid.log" "$T" bench configs/hybrid.yaml \
    --gpus 0,0,0,0 --set placement.a1=gpu:0 --set placement.b1=gpu:1 --steps 20 --json
  bounded_row "bench smoke accumulate 4 --gpus 0,0" 60 "$out/bench-accumulate.log" "$T" bench configs/smoke.yaml \
    --gpus 0,0 --set train.accumulate=4 --steps 20 --json
}

phase_configs_mgn() {
  if ! cifar; then row "minigooglenet" "skipped: no CIFAR-10 tarballs in $data"; return; fi
  local c=(--set train.epochs=1 --set data.train.path=/tmp/cifar/cifar10-jpg/train
           --set data.val.path=/tmp/cifar/cifar10-jpg/test)
  for prec in fp32 bf16; do
    config_run minigooglenet "$prec" 0 configs/minigooglenet.yaml "${c[@]}"
    config_run minigooglenet "$prec" 0,0 configs/minigooglenet.yaml "${c[@]}" --set train.batch_size=32
  done
  # Where the epoch's step goes beyond the bench's (2026-11-30, bf16: 3.07 ms per step in the epoch,
  # 2.36 in the bench): the same step fed by one synthetic batch, and by the loader (--data).
  local label="minigooglenet b64 bf16 --gpus 0 bench: synthetic / --data (ms/step; input wait ms/step)"
  if ((dry)); then skip "$label" "trainer bench, one batch and the loader's"
  elif (($(left) < 30)); then row "$label" "not run (time bound)"
  else
    local v o ms=() iw=()
    for v in "" "--data"; do
      # shellcheck disable=SC2086
      o=$(run_bounded "${step_timeout[$phase]}" "$T" bench configs/minigooglenet.yaml --gpus 0 --steps 300 --warmup 30 \
            --json --set precision=bf16 "${c[@]}" $v 2>&1)
      echo "$o" >"$out/bench-mgn-epochgap${v:+-data}.log"
      ms+=("$(json_value ms_per_step <<<"$o")") iw+=("$(json_value input_wait_ms <<<"$o")")
    done
    row "$label" "${ms[0]:-?} / ${ms[1]:-?}; ${iw[0]:-?} / ${iw[1]:-?}"
  fi
}

phase_configs_mnv2() {
  need datasets/cats_vs_dogs/from-shared.sh "cats vs dogs unpacker" || return
  if ((!dry)) && ! datasets/cats_vs_dogs/from-shared.sh "$data" >"$out/cats-dogs-unpack.log" 2>&1; then
    row "mobilenetv2" "skipped: $(tail -1 "$out/cats-dogs-unpack.log")"
    return
  fi
  local m=(--set train.epochs=1 --set data.train.path=datasets/cats_vs_dogs_cifar/train
           --set data.val.path=datasets/cats_vs_dogs_cifar/val)
  for batch in 64 128; do
    for prec in fp32 bf16; do
      config_run "mobilenetv2 b$batch" "$prec" 0 configs/mobilenetv2_cats_vs_dogs.yaml "${m[@]}" --set train.batch_size=$batch
      config_run "mobilenetv2 b$batch" "$prec" 0,0 configs/mobilenetv2_cats_vs_dogs.yaml "${m[@]}" \
        --set train.batch_size=$((batch / 2))
    done
  done
}

# --- the engine on one GPU: data parallel, resume, eval, device parallel, MPI ----------------------
phase_engine() {
  need configs/smoke.yaml "config" || return
  local s=${step_timeout[$phase]}
  if ((dry)); then
    for r in "smoke loss: --gpus 0 / NCCL 1 rank / --gpus 0,0" "SIGINT at step 40 + resume (smoke, GPU)" \
      "trainer eval on GPU" "bench model_parallel gpu:0 + cpu, M=1" "bench model_parallel gpu:0 + cpu, M=4" \
      "bench model_parallel gpu:0 + gpu:1 (--gpus 0,0), M=1" "bench model_parallel gpu:0 + gpu:1 (--gpus 0,0), M=4" \
      "model_parallel gpu:0 + cpu, M=1, by OpenMP wait policy (4 rows)" \
      "minigooglenet --cpu 1 b64, by GOMP_SPINCOUNT (2 rows)" \
      "mpirun -np 1 trainer run smoke.yaml --gpus 0"; do skip "$r"; done
    need configs/model_parallel.yaml "config"
    return
  fi
  smoke() {  # smoke <name> <args...>: final training loss of configs/smoke.yaml
    local name=$1
    shift
    run_bounded "$s" "$T" run configs/smoke.yaml "$@" --run-dir "$out/dp-$name" >"$out/dp-$name.log" 2>&1 &&
      tail -1 "$out/dp-$name/metrics.csv" | cut -d, -f3
  }
  log "engine"
  local l1 ln l2
  l1=$(smoke single --gpus 0)
  ln=$(TRAINER_COMM=nccl smoke nccl1 --gpus 0)
  l2=$(smoke twice --gpus 0,0 --set train.batch_size=16)
  row "smoke loss: --gpus 0 / NCCL 1 rank / --gpus 0,0" "${l1:-failed} / ${ln:-failed} / ${l2:-failed}"
  # The uninterrupted run is dp-single above (same config, same GPU).
  TRAINER_TEST_SIGINT_AT_STEP=40 run_bounded "$s" "$T" run configs/smoke.yaml --gpus 0 --run-dir "$out/ck-cut" \
    >"$out/ck-cut.log" 2>&1
  local cut=$?
  run_bounded "$s" "$T" run --resume "$out/ck-cut" --gpus 0 --run-dir "$out/ck-res" >"$out/ck-res.log" 2>&1
  local res=$? ck="differs"
  cmp -s "$out/dp-single/checkpoints/epoch-0003.safetensors" "$out/ck-res/checkpoints/epoch-0003.safetensors" &&
    ck="bit-identical"
  row "SIGINT at step 40 + resume (smoke, GPU)" "rc $cut then $res; final weights $ck"
  run_bounded 60 "$T" eval "$out/dp-single" --gpus 0 >"$out/ck-eval.log" 2>&1
  row "trainer eval on GPU" "rc $?; $(grep -o 'loss: .*' "$out/ck-eval.log" | tail -1)"
  for m in 1 4; do
    bounded_row "bench model_parallel gpu:0 + cpu, M=$m" 60 "$out/bench-model_parallel-m$m.log" "$T" bench \
      configs/model_parallel.yaml --gpus 0 --set placement.a1=gpu:0 --set placement.b1=cpu \
      --set pipeline.microbatches=$m --steps 20
  done
  # Two GPU stages (one GPU listed twice: two contexts, two streams): the boundaries are device
  # copies ordered by events, no host wait per boundary and micro-batch (host_syncs_per_step: one
  # per stage at the step's end, plus the loss's read).
  for m in 1 4; do
    bounded_row "bench model_parallel gpu:0 + gpu:1 (--gpus 0,0), M=$m" 60 "$out/bench-model_parallel-gg-m$m.log" "$T" \
      bench configs/model_parallel.yaml --gpus 0,0 --set placement.a1=gpu:0 --set placement.b1=gpu:1 \
      --set pipeline.microbatches=$m --steps 20
  done
  # That bench ran at 8,582 img/s (M=1) on the H100 machine at 2264054 and at 1,958 at 4358a80. The H200
  # run of 2026-11-27 found why: 16 CPU-stage threads beside the GPU stage's thread, and a short spin
  # (GOMP_SPINCOUNT=3000) that puts the one sharing a core to sleep (2,314 img/s; 5,451 with
  # --threads 15; 6,403 with a long spin). The CPU stage now leaves a core per GPU stage: the rows
  # above run with 15 threads. These keep the spin count's and wait policy's effect in view.
  local v i=0
  for v in "GOMP_SPINCOUNT=300000|" "GOMP_SPINCOUNT=3000|" "GOMP_SPINCOUNT=3000|--threads 15" \
           "OMP_WAIT_POLICY=active|"; do
    bench_row "model_parallel gpu:0 + cpu, M=1, ${v%%|*} ${v#*|}" "$out/bench-mp-$((++i)).log" \
      env "${v%%|*}" "$T" bench configs/model_parallel.yaml --gpus 0 --set placement.a1=gpu:0 --set placement.b1=cpu \
      --steps 20 --json ${v#*|}
  done
  # The same threads on the CPU alone (MiniGoogLeNet b64, all cores): is the spin count the cost?
  for v in "GOMP_SPINCOUNT=300000" "GOMP_SPINCOUNT=3000"; do
    bench_row "minigooglenet --cpu 1 b64, ${v}" "$out/bench-cpu-$v.log" env "$v" "$T" bench configs/minigooglenet.yaml \
      --cpu 1 --steps 10 --warmup 2 --json
  done
  if command -v mpirun >/dev/null; then
    run_bounded 60 mpirun -np 1 --allow-run-as-root "$T" run configs/smoke.yaml --gpus 0 --run-dir "$out/mpi-gpu" \
      >"$out/mpi-gpu.log" 2>&1
    row "mpirun -np 1 trainer run smoke.yaml --gpus 0" "rc $?; $(tail -1 "$out/mpi-gpu/metrics.csv" 2>/dev/null)"
  else
    row "mpirun -np 1 trainer run smoke.yaml --gpus 0" "skipped: no mpirun on this machine"
  fi
}

# --- throughput against the PyTorch peer (scripts/bench-vs-pytorch.sh with DEVICE=cuda) ---------
referee() {  # referee <model> <batch> <precision> <rounds>: its summary rows
  local tag="$1-b$2-$3"
  need scripts/bench-vs-pytorch.sh "bench script" || return
  need "scripts/peers/${1/gpt2/gpt}_torch.py" "PyTorch peer" || return  # (GPT-2 124M: the GPT peer, sized)
  ((dry)) && { skip "  $tag" "bench-vs-pytorch, $4 round(s)"; return; }
  log "bench $tag"
  # Each process of a round: ours, then PyTorch eager, eager + cudnn.benchmark and torch.compile's
  # default and reduce-overhead modes with it (a mode whose compile outlasts the step timeout is
  # reported so; the phase's deadline cuts the rest). max-autotune's compile takes minutes, more
  # than a step's timeout here: GPU_CHECK_PEERS="... max-autotune" with a longer bound asks for it.
  local s=${step_timeout[$phase]} t0b=$(date +%s)
  DEVICE=cuda MODEL=$1 BATCH=$2 PRECISION=$3 ROUNDS=$4 STEP_TIMEOUT=$s TRAINER=$T \
    PEER_VARIANTS="${GPU_CHECK_PEERS:-eager benchmark default reduce-overhead}" \
    run_bounded $((5 * s * $4)) scripts/bench-vs-pytorch.sh >"$out/bench-$tag.log" 2>&1
  local rc=$?
  local t1
  t1=$(date +%s)
  ((rc == 125)) && { skip "  $tag"; return; }
  while read -r l; do row "  $tag" "$l"; done < <(grep -E "^  (trainer|eager|compile|ratio)" "$out/bench-$tag.log")
  # (The H200 run of 2026-11-27 evening printed "exit 124: " and nothing more for a round the
  # command's budget cut: say so, and what the round had printed.)
  local last
  last=$(grep -v '^[[:space:]]*$' "$out/bench-$tag.log" | tail -1)
  case $rc in
    0) ;;
    124 | 137)
      # What the cut round had measured (bench-vs-pytorch prints each figure as it comes), then why it ended.
      while read -r l; do row "  $tag" "$l"; done < <(sed -n 's/^measured: //p' "$out/bench-$tag.log")
      row "  $tag" "timed out after $((t1 - t0b)) s (the phase's deadline or GPU_CHECK_BUDGET): ${last:-no output yet}" ;;
    *) row "  $tag" "bench-vs-pytorch exit $rc: ${last:-no output}" ;;
  esac
}
# json_value <key>: the last value of "key" in the JSON lines on stdin (a number, true or false; empty
# if none, or null).
json_value() { sed -nE "s/.*\"$1\": ?([-0-9.e+]+|true|false)[,} ]*.*/\1/p" | tail -1; }
# no_result <rc>: what a run captured as $(run_bounded ...) that printed no result was, by its exit code
# (a row said "failed" for runs the phase's deadline cut or never started).
no_result() {
  case $1 in
    124 | 137) echo "timed out" ;;
    125) echo "not run (time bound)" ;;  # run_bounded's: under 10 s left, not started
    *) echo "failed (exit $1)" ;;
  esac
}
# --- the step as one CUDA graph against the same step launched kernel by kernel ------------------
phase_graphs() {
  local b p g o rc ms
  for b in 64 256; do
    for p in fp32 bf16; do
      local label="graphs: minigooglenet b$b $p (ms/step on / off)"
      ((dry)) && { skip "$label" "trainer bench, devices.cuda_graphs true and false"; continue; }
      (($(left) < 10)) && { row "$label" "not run (time bound)"; continue; }
      local r=()
      for g in true false; do
        # TRAINER_CUDNN_LOG=1: every convolution's algorithm choice on stderr (its log), so that a
        # heuristic that offers no candidate — the fallback algorithm, otherwise silent — is counted.
        o=$(TRAINER_CUDNN_LOG=1 run_bounded "${step_timeout[$phase]}" "$T" bench configs/minigooglenet.yaml --gpus 0 --steps 50 \
              --warmup 10 --set train.batch_size=$b --set precision=$p --set devices.cuda_graphs=$g 2>&1)
        rc=$?
        echo "$o" >"$out/graphs-b$b-$p-$g.log"
        ms=$(json_value ms_per_step <<<"$o")
        r+=("${ms:-$(no_result $rc)}")
      done
      # The recording's note if any (a step that could not be recorded), and how many convolution
      # passes took cuDNN's fallback algorithm (a conv2d "fallback" line of TRAINER_CUDNN_LOG).
      row "$label" "${r[0]} / ${r[1]}; conv fallbacks: $(grep -c ' fallback ' "$out/graphs-b$b-$p-true.log")$(grep -h '^note:' "$out/graphs-b$b-$p-true.log" | grep -v 'conv2d' | head -1 | cut -c1-80)"
    done
  done
}
# --- issue 45: every strategy's step as a graph? ms/step with graphs allowed and not, and whether it was one -
# graphs_row <label> <log base> <TRAINER_COMM> <bench args...>: one row, `trainer bench` with
# devices.cuda_graphs true then false — ms/step, step_graph and host syncs per step, both ways.
graphs_row() {
  local label=$1 base=$2 comm=$3 g o rc ms
  shift 3
  ((dry)) && { skip "$label" "trainer bench, devices.cuda_graphs true and false"; return; }
  (($(left) < 10)) && { row "$label" "not run (time bound)"; return; }
  local r=() k=() w=()
  for g in true false; do
    o=$(TRAINER_COMM=$comm run_bounded "${step_timeout[$phase]}" "$T" bench "$@" --json --set devices.cuda_graphs=$g 2>&1)
    rc=$?
    echo "$o" >"$out/$base-$g.log"
    ms=$(json_value ms_per_step <<<"$o")
    r+=("${ms:-$(no_result $rc)}")
    k+=("$(json_value step_graph <<<"$o")")
    w+=("$(json_value host_syncs_per_step <<<"$o")")
  done
  row "$label" "${r[0]} / ${r[1]}; ${k[0]:-?} / ${k[1]:-?}; ${w[0]:-?} / ${w[1]:-?}"
}
phase_step_graphs() {
  local gpus v
  # "nccl": --gpus 0 over a one-rank NCCL communicator, its all-reduce and broadcast recorded in the graph.
  for gpus in 0 0,0 nccl; do
    for v in "fp32|" "bf16|--set precision=bf16" "fp16 + loss scale|--set precision=fp16" \
             "clip_norm 1|--set train.clip_norm=1" "accumulate 2|--set train.accumulate=2" \
             "sync_bn|--set train.sync_bn=true"; do
      [ "$gpus" = nccl ] && case "$v" in fp32*|fp16*) ;; *) continue ;; esac
      [ "$gpus" = 0 ] && case "$v" in sync_bn*) continue ;; esac  # one replica: nothing to synchronise
      local shown="--gpus $gpus" comm="" devs=$gpus
      [ "$gpus" = nccl ] && shown="--gpus 0 one-rank NCCL" comm=nccl devs=0
      # shellcheck disable=SC2086
      graphs_row "step-graphs: minigooglenet b64 $shown ${v%%|*} (ms/step graphs on / off; step_graph; host syncs/step)" \
        "step-graphs-$gpus-${v%%|*}" "$comm" configs/minigooglenet.yaml --gpus $devs --steps 40 --warmup 10 \
        --set train.batch_size=64 ${v#*|}
    done
  done
  # A pipeline's step as its stages' programs: two GPU stages (one GPU listed twice: two streams),
  # boundaries as device copies and host steps between recorded pieces.
  local mp=(configs/model_parallel.yaml --gpus 0,0 --set placement.a1=gpu:0 --set placement.b1=gpu:1)
  for v in "fp32|" "bf16|--set precision=bf16" "accumulate 2|--set train.accumulate=2" \
           "fp16 + loss scale|--set precision=fp16" "clip_norm 1|--set train.clip_norm=1" \
           "ema|--set train.ema.decay=0.99"; do
    # shellcheck disable=SC2086
    graphs_row "step-graphs: model_parallel gpu:0 + gpu:1 ${v%%|*} (ms/step graphs on / off; step_graph; host syncs/step)" \
      "step-graphs-mp-${v%%|*}" "" "${mp[@]}" --steps 40 --warmup 10 ${v#*|}
  done
  # Hybrid, 2 copies x 2 stages on one GPU listed four times: each stage's sum over the copies (the
  # in-process rendezvous) inside the stages' programs (written 2026-12-01 without a GPU).
  for v in "fp32|" "fp16 + loss scale|--set precision=fp16" "ema|--set train.ema.decay=0.99"; do
    # shellcheck disable=SC2086
    graphs_row "step-graphs: hybrid 2 copies x 2 stages on --gpus 0,0,0,0 ${v%%|*} (ms/step graphs on / off; step_graph; host syncs/step)" \
      "step-graphs-hybrid-${v%%|*}" "" configs/hybrid.yaml --gpus 0,0,0,0 --steps 40 --warmup 10 ${v#*|}
  done
  # The shared LSTM with every stage on the GPU: its two copies' gradients summed inside the programs.
  graphs_row "step-graphs: shared_lstm on gpu:0 + gpu:1 + gpu:0 (ms/step graphs on / off; step_graph; host syncs/step)" \
    "step-graphs-shared-lstm" "" configs/shared_lstm.yaml --gpus 0,0 --set placement.merged=gpu:0 --steps 40 --warmup 10
  local label="step-graphs: model_parallel gpu:0 + gpu:1, 2 epochs, graphs on vs off (final weights)"
  if ((dry)); then skip "$label" "trainer run, devices.cuda_graphs true and false"
  elif (($(left) < 20)); then row "$label" "not run (time bound)"
  else
    local g rcs=""
    for g in true false; do
      run_bounded "${step_timeout[$phase]}" "$T" run "${mp[@]}" --set data.train.size=2000 --set train.epochs=2 \
        --set devices.cuda_graphs=$g --run-dir "$out/mp-graphs-$g" >"$out/mp-graphs-$g.log" 2>&1
      rcs+=" $?"
    done
    local same="differ"
    cmp -s "$out/mp-graphs-true/checkpoints/epoch-0002.safetensors" "$out/mp-graphs-false/checkpoints/epoch-0002.safetensors" &&
      same="bit-identical"
    row "$label" "rc$rcs; $same"
  fi
}
phase_bench() { for p in fp32 bf16; do referee minigooglenet 256 "$p" 1; done; }
# layer_totals <log of trainer bench --layers> <n>: the n layer types with the most fwd + bwd ms
# ("12.34 conv2d,5.67 batchnorm,..."), then the input-gradient sums outside the layers, if any.
layer_totals() {
  printf '%s%s' "$(grep -E ' fwd +[0-9.]+ ms  bwd' "$1" |
    awk '{t[$2] += $5 + $8} END {for (k in t) printf "%.2f %s\n", t[k], k}' | sort -rn | head -"$2" | paste -sd, -)" \
    "$(grep -oE "outside the layers' bwd above: [0-9.]+ ms" "$1" | sed 's/.*above: /; input-gradient sums /')"
}
# --- issue 47: the GPTs on the GPU -----------------------------------------------------------------
phase_gpt() {
  local p o rc
  # The GPT-2 rows first: their code (cuDNN's attention above all) has not run on a GPU yet, and the
  # phase often starts late in a command; gpt_bytes' epochs and the PyTorch comparison after them.
  # GPT-2 small's shape on synthetic ids (llm.c's single-GPU batch, 4 x 1024): tokens/s = samples/s x 1024.
  # bf16 by default runs cuDNN's fused flash attention (attn_cudnn, on by default since the H200 run
  # of 2026-11-30; its log says, on stderr, any shape cuDNN refused and the GEMM path took); the
  # third row without it (attn_gemm's batched GEMMs), the fourth attention by its reference kernel
  # (one block per query row), to show what each path gains.
  local v fast
  for v in "fp32|default" "bf16|default" "bf16|-attn_cudnn" "bf16|-attn_cudnn,-attn_gemm"; do
    p=${v%%|*} fast=${v#*|}
    local suffix=""
    [ "$fast" = default ] || suffix=" $fast"
    local label="gpt2_124m b4 $p$suffix (ms, tokens/s, graph)"
    ((dry)) && { skip "$label" "trainer bench configs/gpt2_124m.yaml"; continue; }
    (($(left) < 10)) && { row "$label" "not run (time bound)"; continue; }
    # cuDNN's warnings (why an engine refused a graph) beside the row's log, for the bf16 default row;
    # TRAINER_CUDNN_LOG=1: the log names each attention plan's engine (and each convolution's choice).
    local dbg=0
    [ "$p/$fast" = bf16/default ] && dbg=2
    o=$(CUDNN_LOGLEVEL_DBG=$dbg CUDNN_LOGDEST_DBG="$out/gpt2-cudnn-warnings.log" TRAINER_CUDNN_LOG=1 TRAINER_FAST_PATHS=$fast \
          run_bounded "${step_timeout[$phase]}" "$T" bench configs/gpt2_124m.yaml --gpus 0 \
          --steps 20 --warmup 5 --json --set precision=$p 2>&1)
    rc=$?
    echo "$o" >"$out/gpt2-$p${suffix// /}.log"
    local ms ips graph
    ms=$(json_value ms_per_step <<<"$o")
    ips=$(json_value images_per_sec <<<"$o")
    graph=$(json_value step_graph <<<"$o")
    if [ -n "$ms" ]; then
      row "$label" "$ms ms, $(awk -v s="${ips:-0}" 'BEGIN {printf "%.0f", s * 1024}') tokens/s, ${graph:-?}"
    else
      row "$label" "$(no_result $rc)${o:+: $(grep -v '^[[:space:]]*$' <<<"$o" | tail -1 | cut -c1-90)}"
    fi
  done
  # Where the bf16 step goes (0.46x PyTorch compiled on 2026-11-30, with no profile to say why): every
  # layer timed, the step synchronised around each; the layer types' totals, the input-gradient
  # sums, the plan's arena beside the device's peak (13.9 GiB against PyTorch's 6.1-6.6 then).
  local label="layers: gpt2_124m b4 bf16 (fwd+bwd ms per type; memory)"
  if ((dry)); then
    skip "$label" "trainer bench --layers"
  elif (($(left) < 10)); then
    row "$label" "not run (time bound)"
  else
    TRAINER_CUDNN_LOG=1 run_bounded "${step_timeout[$phase]}" "$T" bench configs/gpt2_124m.yaml --gpus 0 --steps 5 \
      --warmup 2 --layers --set precision=bf16 >"$out/layers-gpt2-bf16.log" 2>&1
    rc=$?
    row "$label" "rc $rc; $(layer_totals "$out/layers-gpt2-bf16.log" 8)$(
      grep -oE "arena, one allocation per copy\): [0-9.]+ MiB" "$out/layers-gpt2-bf16.log" | sed 's/.*: /; arena /')$(
      json_value peak_device_mb <"$out/layers-gpt2-bf16.log" | sed 's/^/; device peak /; s/$/ MiB/')"
  fi
  for p in fp32 bf16; do
    config_run gpt_bytes "$p" 0 configs/gpt_bytes.yaml --set train.epochs=1 \
      --set data.train.path=/tmp/trainer-gpu/fortunes --set data.val.path=/tmp/trainer-gpu/fortunes
  done
  referee gpt2 4 bf16 1
}
phase_bench_b64() {
  local p f
  # MiniGoogLeNet's bf16 step with its 1x1 convolutions as cuBLAS GEMMs (conv_1x1_gemm, written
  # 2026-12-01 without a GPU, off by default) against cuDNN's (the default), then the peers.
  for f in default conv_1x1_gemm; do
    local label="minigooglenet b64 bf16 step, TRAINER_FAST_PATHS=$f"
    ((dry)) && { skip "$label" "trainer bench --json"; continue; }
    bench_row "$label" "$out/bench-mgn-bf16-$f.log" env TRAINER_FAST_PATHS=$f "$T" bench configs/minigooglenet.yaml \
      --gpus 0 --steps 40 --warmup 10 --json --set train.batch_size=64 --set precision=bf16
  done
  for p in fp32 bf16; do referee minigooglenet 64 "$p" 1; done
}
phase_bench_mnv2() {
  local p f
  # Where its step goes (it ran at 0.48x/0.65x PyTorch eager on an H200, 2026-11-26): every layer
  # timed, the step synchronised around each; one row per precision with the layer types' totals.
  # First (the phase was cut by its budget on 2026-11-30): each precision with the general depthwise
  # kernels (the default) and with the dw_tiled fast path (written 2026-12-01 without a GPU; off by
  # default until these rows and the ops phase's `depthwise_conv2d (cuda): dw_tiled ...` say so).
  # Then whole steps with and without dw_tiled, the PyTorch peers, and bf16 with the algorithms
  # measured instead of guessed (TRAINER_CUDNN_FIND=1).
  for p in fp32 fp32-dw_tiled bf16 bf16-dw_tiled bf16-conv_1x1_gemm bf16-find; do
    local label="layers: mobilenetv2 b64 $p (fwd+bwd ms per type)" prec=${p%%-*}
    ((dry)) && { skip "$label" "trainer bench --layers"; continue; }
    TRAINER_FAST_PATHS=$(case ${p#*-} in dw_tiled | conv_1x1_gemm) echo "${p#*-}" ;; *) echo default ;; esac) \
      TRAINER_CUDNN_FIND=$([ "${p#*-}" = find ] && echo 1 || echo 0) TRAINER_CUDNN_LOG=1 run_bounded 60 "$T" bench \
      configs/mobilenetv2_cats_vs_dogs.yaml --gpus 0 --steps 10 --warmup 3 --layers \
      --set train.batch_size=64 --set precision=$prec >"$out/layers-mnv2-$p.log" 2>&1
    local rc=$?
    ((rc == 125)) && { skip "$label"; continue; }
    row "$label" "rc $rc; $(layer_totals "$out/layers-mnv2-$p.log" 6)"
    # bf16's 1x1 convolutions took ~0.3 ms forward whatever their size on the H100 (2026-11-27), fp32's
    # 0.07-0.15: which cuDNN algorithms and math types were chosen (TRAINER_CUDNN_LOG=1, one line each).
    case ${p#*-} in dw_tiled | conv_1x1_gemm) continue ;; esac
    row "cuDNN choices: mobilenetv2 b64 $p" "$(grep -c ': cuDNN ' "$out/layers-mnv2-$p.log") choices; $(grep -oE \
      '(forward|backward data|backward filter): cuDNN [a-z]+ algorithm [0-9]+ \(math [A-Z_]+' "$out/layers-mnv2-$p.log" |
      sed -E 's/: cuDNN ([a-z]+) algorithm ([0-9]+) \(math /:\1 \2:/' | sort | uniq -c |
      sort -rn | head -8 | awk '{$1=$1; print}' | paste -sd, -)"
  done
  # Whole steps (recorded as a graph), the general depthwise kernels against dw_tiled, and in bf16
  # cuDNN's 1x1 convolutions against conv_1x1_gemm's GEMMs, and both fast paths together.
  for p in fp32 bf16; do
    local fs="default dw_tiled"
    [ $p = bf16 ] && fs="$fs conv_1x1_gemm dw_tiled,conv_1x1_gemm"
    for f in $fs; do
      local label="mobilenetv2 b64 $p step, TRAINER_FAST_PATHS=$f"
      ((dry)) && { skip "$label" "trainer bench --json"; continue; }
      bench_row "$label" "$out/bench-mnv2-$p-${f/,/+}.log" env TRAINER_FAST_PATHS=$f "$T" bench \
        configs/mobilenetv2_cats_vs_dogs.yaml --gpus 0 --steps 30 --warmup 5 --json --set train.batch_size=64 \
        --set precision=$p
    done
  done
  for p in fp32 bf16; do referee mobilenetv2 64 "$p" 1; done
  # Whole bf16 steps, the algorithms guessed (cuDNN's heuristic, the default) vs measured.
  for f in 0 1; do
    local label="mobilenetv2 b64 bf16 step, TRAINER_CUDNN_FIND=$f"
    ((dry)) && { skip "$label" "trainer bench --json"; continue; }
    bench_row "$label" "$out/bench-mnv2-bf16-find$f.log" env TRAINER_CUDNN_FIND=$f "$T" bench \
      configs/mobilenetv2_cats_vs_dogs.yaml --gpus 0 --steps 30 --warmup 5 --json --set train.batch_size=64 \
      --set precision=bf16
  done
}
