#!/usr/bin/env bash
# Every GPU check of the project, for a GPU machine without internet (see ../shared/GPU.md).
#
#   scripts/gpu-check.sh pack          on the development machine: builds for sm_90 into build-gpu/ and packs
#                                      the binaries, the Debian shared libraries they need (PLplot's drivers
#                                      and data included) and the CIFAR-10 tarballs into .device-pack/
#                                      (ignored by git; < 64 MiB, carried to the GPU machine; the PyTorch
#                                      peers are in scripts/peers/).
#   scripts/gpu-check.sh [PHASE ...]   on the GPU machine, the phases in order (default: all of them):
#     ops        unit_ops, every test case in its own process (scripts/run-isolated.sh): counts, failures
#     core       unit_core likewise (GPU vs CPU, one GPU listed N times, mixed precision on the GPU)
#     e2e        unit_data and the CLI tests likewise (mpirun tests skip with their reason where it is missing)
#     sanitize   compute-sanitizer memcheck on every unit_ops case, racecheck on the shared-memory kernels'
#     configs    the shipped small configs x (fp32, bf16) x (--gpus 0, --gpus 0,0): exit, loss, val_accuracy, s/epoch
#     configs-big  the same for MiniGoogLeNet (one epoch of the shared CIFAR-10) and MobileNetV2 cats vs dogs
#                (one epoch at batch 64 and 128)
#     engine     one-rank NCCL and --gpus 0,0 against --gpus 0, SIGINT + resume, eval, device parallel, mpirun
#     bench      MiniGoogLeNet batch 256 (fp32, bf16) against PyTorch eager and torch.compile
#                (scripts/bench-vs-pytorch.sh, DEVICE=cuda: img/s, ratios, peak device memory)
#     bench-b64  the same at batch 64 (the seed recipe's), and one CIFAR-10 epoch of configs/minigooglenet.yaml
#     bench-mnv2 MobileNetV2 224x224 at batch 64 (fp32, bf16) against PyTorch
# Every step runs under `timeout`; logs go to $OUT/gpu-check (or /tmp/gpu-check), are archived into
# $OUT/gpu-check-logs.tar.gz at the end, and the summary table is printed last. One call of the device
# tool runs at most 10 minutes: run the phases in several calls (e.g. `ops core`, `e2e`, `sanitize`,
# `configs engine`, `configs-big`, `bench`, `bench-b64`, `bench-mnv2`).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = "pack" ]; then
  set -e
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTRAINER_NATIVE=OFF -DTRAINER_TEST_ROOT=/tmp/trainer-src -DTRAINER_TEST_BINARY=/tmp/trainer-gpu/trainer >/dev/null
  cmake --build build-gpu --parallel
  stage=$(mktemp -d)/trainer-gpu
  mkdir -p "$stage/lib" "$stage/tests" "$stage/plplot/drivers" "$stage/plplot/data"
  cp build-gpu/trainer "$stage/"
  cp build-gpu/tests/unit_ops build-gpu/tests/unit_core build-gpu/tests/unit_data build-gpu/tests/e2e "$stage/tests/"
  strip "$stage/trainer" "$stage"/tests/* || true
  # PLplot loads its output drivers (pngcairo: cairo.so) at run time from PLPLOT_DRV_DIR, and its
  # fonts and palettes from PLPLOT_LIB: both travel (without the map shapefiles).
  drv=$(ls -d /usr/lib/x86_64-linux-gnu/plplot*/drivers | head -1)
  cp "$drv"/cairo.* "$drv"/null.* "$stage/plplot/drivers/"
  share=$(ls -d /usr/share/plplot[0-9]* | head -1)
  cp "$share"/*.fnt "$share"/*.pal "$stage/plplot/data/"
  # Debian libraries the GPU machine lacks (not glibc itself, not the CUDA libraries), for the
  # binaries and the driver plugins.
  ldd build-gpu/trainer build-gpu/tests/* "$drv"/cairo.so 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s)\.so|/usr/local/cuda|libcudnn|libcublas|libnccl' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  mkdir -p .device-pack
  tar -C "$(dirname "$stage")" -cJf .device-pack/trainer-gpu.tar.xz trainer-gpu
  mkdir -p .device-pack/data
  install -m 644 ../shared/data/cifar10-jpg-*.tar.gz .device-pack/data/
  du -sh .device-pack
  echo "pack: done; on the GPU machine with .device-pack carried: bash scripts/gpu-check.sh [PHASE ...]"
  exit 0
fi

out=${OUT:-/tmp}/gpu-check
mkdir -p "$out"
rows=()
row() { rows+=("$(printf '%-58s %s' "$1" "$2")"); }
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$out/progress.log"; }
finish() {
  tar -C "$(dirname "$out")" -czf "${OUT:-/tmp}/gpu-check-logs.tar.gz" "$(basename "$out")" 2>/dev/null
  echo
  echo "gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), logs in ${OUT:-/tmp}/gpu-check-logs.tar.gz)"
  printf '%s\n' "${rows[@]}" | tee -a "$out/summary.log"
}
trap finish EXIT

# --- binaries, libraries, data --------------------------------------------------------------------
if [ -f .device-pack/trainer-gpu.tar.xz ]; then
  [ -x /tmp/trainer-gpu/trainer ] || tar -C /tmp -xJf .device-pack/trainer-gpu.tar.xz
  ln -sfn "$root" /tmp/trainer-src
  bin=/tmp/trainer-gpu
  tests=$bin/tests
  export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PLPLOT_DRV_DIR=$bin/plplot/drivers PLPLOT_LIB=$bin/plplot/data
  export TRAINER_DATA=$root/.device-pack/data
else
  [ -x build/trainer ] || scripts/setup.sh
  bin=$root/build tests=$root/build/tests
fi
data=${TRAINER_DATA:-../shared/data}
# CUDA libraries: the toolkit's, then PyTorch's wheels (cuDNN, NCCL).
nv=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs.update(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64${nv:+:$nv}
T=$bin/trainer
nvidia-smi -L >"$out/nvidia-smi.log" 2>&1
missing=$(ldd "$T" | grep "not found" || true)
[ -n "$missing" ] && row "trainer cannot start, missing libraries" "$(echo "$missing" | tr '\n' ' ')"
timeout 60 "$T" devices >"$out/devices.log" 2>&1
row "GPU" "$(head -1 "$out/nvidia-smi.log"); trainer devices: $(grep -c '^cuda:' "$out/devices.log") GPU line(s)"

cifar() {  # unpacks the shared CIFAR-10 JPEGs into /tmp/cifar once; false when they are missing
  [ -d /tmp/cifar/cifar10-jpg/test ] && return 0
  [ -f "$data/cifar10-jpg-train.tar.gz" ] || return 1
  mkdir -p /tmp/cifar && tar -xzf "$data/cifar10-jpg-train.tar.gz" -C /tmp/cifar && tar -xzf "$data/cifar10-jpg-test.tar.gz" -C /tmp/cifar
}

# --- the test suite, one process per case ---------------------------------------------------------
isolated() {  # isolated <binary> <jobs> [run-isolated options]: a row with its counts
  local b=$1 jobs=$2
  shift 2
  log "tests $b"
  (cd /tmp && "$root/scripts/run-isolated.sh" "$tests/$b" "$out/tests-$b" --jobs "$jobs" --timeout 600 "$@") \
    >"$out/tests-$b.log" 2>&1
  row "tests $b (one process per case)" "$(tail -1 "$out/tests-$b.log")"
  grep '^FAILED' "$out/tests-$b.log" | head -20 | while read -r f; do row "  $b" "$f"; done
  grep -ho "cuda: skipped[^']*" "$out/tests-$b"/case-*.log 2>/dev/null | sort -u | head -1 |
    while read -r s; do row "  $b: CUDA SKIPPED" "$s"; done
}

phase_ops() { isolated unit_ops 4; }
phase_core() { isolated unit_core 4; }
phase_e2e() {
  isolated unit_data 8
  command -v mpirun >/dev/null || row "  e2e" "no mpirun on this machine: the mpi cases skip, saying so"
  isolated e2e 3
}

phase_sanitize() {
  if ! command -v compute-sanitizer >/dev/null; then row "compute-sanitizer" "not found: skipped"; return; fi
  log "memcheck unit_ops"
  (cd /tmp && timeout 560 "$root/scripts/run-isolated.sh" "$tests/unit_ops" "$out/memcheck" --jobs 8 --timeout 400 \
    --wrap "compute-sanitizer --tool memcheck --leak-check full --error-exitcode 97") >"$out/memcheck.log" 2>&1
  row "compute-sanitizer memcheck, unit_ops" "$(tail -1 "$out/memcheck.log")"
  log "racecheck"
  (cd /tmp && timeout 300 "$root/scripts/run-isolated.sh" "$tests/unit_ops" "$out/racecheck" --jobs 8 --timeout 280 \
    --filter "batchnorm|conv2d|dense|lstm|softmax|sigmoid_xent" \
    --wrap "compute-sanitizer --tool racecheck --error-exitcode 97") >"$out/racecheck.log" 2>&1
  row "compute-sanitizer racecheck (shared-memory kernels)" "$(tail -1 "$out/racecheck.log")"
}

# --- every shipped config on the GPU --------------------------------------------------------------
# config_run <label> <precision> <gpus> <config> [--set ...]: exit code, final loss and val_accuracy
# (metrics.csv: epoch, accuracy, loss, lr, val_accuracy, val_loss), seconds per epoch (metrics.jsonl).
config_run() {
  local label=$1 prec=$2 gpus=$3 cfg=$4
  shift 4
  local dir="$out/run-${label// /_}-$prec-g${gpus//,/_}"
  rm -rf "$dir"
  timeout 300 "$T" run "$cfg" --gpus "$gpus" --set precision="$prec" "$@" --run-dir "$dir" >"$dir.log" 2>&1
  local rc=$?
  local last loss acc secs
  last=$(tail -1 "$dir/metrics.csv" 2>/dev/null)
  loss=$(echo "$last" | cut -d, -f3)
  acc=$(echo "$last" | cut -d, -f5)
  secs=$(tail -1 "$dir/metrics.jsonl" 2>/dev/null | sed -nE 's/.*"time_s": *([0-9.]+).*/\1/p')
  row "$(printf '%-22s %-5s --gpus %-4s' "$label" "$prec" "$gpus")" \
    "$(printf 'exit %-3s loss %-9s val_accuracy %-8s s/epoch %s' "$rc" "${loss:-n/a}" "${acc:-n/a}" "${secs:-n/a}")"
  [ "$rc" != 0 ] && row "  (exit $rc)" "$(grep -v '^\s*$' "$dir.log" | tail -1)"
}

phase_configs() {
  log "configs"
  for prec in fp32 bf16; do
    config_run quickstart "$prec" 0 configs/quickstart.yaml
    config_run quickstart "$prec" 0,0 configs/quickstart.yaml --set train.batch_size=32
    config_run smoke "$prec" 0 configs/smoke.yaml
    config_run smoke "$prec" 0,0 configs/smoke.yaml --set train.batch_size=16
    config_run shared_lstm "$prec" 0 configs/shared_lstm.yaml --set placement.lstm_b=gpu:0
    config_run shared_lstm "$prec" 0,0 configs/shared_lstm.yaml
    config_run model_parallel "$prec" 0 configs/model_parallel.yaml --set placement.a1=gpu:0 --set placement.b1=cpu
    config_run model_parallel "$prec" 0,0 configs/model_parallel.yaml --set placement.a1=gpu:0 --set placement.b1=gpu:1
  done
}

phase_configs_big() {
  log "configs-big"
  if cifar; then
    local c=(--set train.epochs=1 --set data.train.path=/tmp/cifar/cifar10-jpg/train
             --set data.val.path=/tmp/cifar/cifar10-jpg/test)
    for prec in fp32 bf16; do
      config_run minigooglenet "$prec" 0 configs/minigooglenet.yaml "${c[@]}"
      config_run minigooglenet "$prec" 0,0 configs/minigooglenet.yaml "${c[@]}" --set train.batch_size=32
    done
  else
    row "minigooglenet" "skipped: no CIFAR-10 tarballs in $data"
  fi
  if datasets/cats_vs_dogs/from-shared.sh "$data" >"$out/cats-dogs-unpack.log" 2>&1; then
    local m=(--set train.epochs=1 --set data.train.path=datasets/cats_vs_dogs_cifar/train
             --set data.val.path=datasets/cats_vs_dogs_cifar/val)
    for prec in fp32 bf16; do
      for batch in 64 128; do
        config_run "mobilenetv2 b$batch" "$prec" 0 configs/mobilenetv2_cats_vs_dogs.yaml "${m[@]}" \
          --set train.batch_size=$batch
        config_run "mobilenetv2 b$batch" "$prec" 0,0 configs/mobilenetv2_cats_vs_dogs.yaml "${m[@]}" \
          --set train.batch_size=$((batch / 2))
      done
    done
  else
    row "mobilenetv2" "skipped: $(tail -1 "$out/cats-dogs-unpack.log")"
  fi
}

# --- the engine on one GPU: data parallel, resume, eval, device parallel, MPI ----------------------
phase_engine() {
  smoke() {  # smoke <name> <args...>: final training loss of configs/smoke.yaml
    local name=$1
    shift
    timeout 240 "$T" run configs/smoke.yaml "$@" --run-dir "$out/dp-$name" >"$out/dp-$name.log" 2>&1 &&
      tail -1 "$out/dp-$name/metrics.csv" | cut -d, -f3
  }
  log "engine"
  local l1 ln l2
  l1=$(smoke single --gpus 0)
  ln=$(TRAINER_COMM=nccl smoke nccl1 --gpus 0)
  l2=$(smoke twice --gpus 0,0 --set train.batch_size=16)
  row "smoke loss: --gpus 0 / NCCL 1 rank / --gpus 0,0" "${l1:-failed} / ${ln:-failed} / ${l2:-failed}"
  timeout 240 "$T" run configs/smoke.yaml --gpus 0 --run-dir "$out/ck-full" >"$out/ck-full.log" 2>&1
  TRAINER_TEST_SIGINT_AT_STEP=40 timeout 240 "$T" run configs/smoke.yaml --gpus 0 --run-dir "$out/ck-cut" \
    >"$out/ck-cut.log" 2>&1
  local cut=$?
  timeout 240 "$T" run --resume "$out/ck-cut" --gpus 0 --run-dir "$out/ck-res" >"$out/ck-res.log" 2>&1
  local res=$? ck="differs"
  cmp -s "$out/ck-full/checkpoints/epoch-0003.safetensors" "$out/ck-res/checkpoints/epoch-0003.safetensors" &&
    ck="bit-identical"
  row "SIGINT at step 40 + resume (smoke, GPU)" "rc $cut then $res; final weights $ck"
  timeout 120 "$T" eval "$out/ck-full" --gpus 0 >"$out/ck-eval.log" 2>&1
  row "trainer eval on GPU" "rc $?; $(grep -o 'loss: .*' "$out/ck-eval.log" | tail -1)"
  for m in 1 4; do
    row "bench model_parallel gpu:0 + cpu, M=$m" "$(timeout 240 "$T" bench configs/model_parallel.yaml --gpus 0 \
      --set placement.a1=gpu:0 --set placement.b1=cpu --set pipeline.microbatches=$m --steps 20 2>&1 | tail -1)"
  done
  if command -v mpirun >/dev/null; then
    timeout 240 mpirun -np 1 --allow-run-as-root "$T" run configs/smoke.yaml --gpus 0 --run-dir "$out/mpi-gpu" \
      >"$out/mpi-gpu.log" 2>&1
    row "mpirun -np 1 trainer run smoke.yaml --gpus 0" "rc $?; $(tail -1 "$out/mpi-gpu/metrics.csv" 2>/dev/null)"
  else
    row "mpirun -np 1 trainer run smoke.yaml --gpus 0" "skipped: no mpirun on this machine"
  fi
}

# --- throughput against the PyTorch peer (scripts/bench-vs-pytorch.sh with DEVICE=cuda) ---------
referee() {  # referee <model> <batch> <precision>: its summary rows
  local tag="$1-b$2-$3"
  log "bench $tag"
  DEVICE=cuda MODEL=$1 BATCH=$2 PRECISION=$3 TRAINER=$T timeout 560 scripts/bench-vs-pytorch.sh \
    >"$out/bench-$tag.log" 2>&1
  local rc=$?
  grep -E "^  (trainer|eager|compile|ratio)" "$out/bench-$tag.log" | while read -r l; do row "  $tag" "$l"; done
  [ $rc = 0 ] || row "  $tag" "bench-vs-pytorch exit $rc: $(tail -1 "$out/bench-$tag.log")"
}
phase_bench() { for p in fp32 bf16; do referee minigooglenet 256 "$p"; done; }
phase_bench_b64() {
  for p in fp32 bf16; do referee minigooglenet 64 "$p"; done
  if cifar; then
    log "CIFAR-10 epoch"
    config_run "minigooglenet epoch" fp32 0 configs/minigooglenet.yaml --set train.epochs=1 \
      --set data.train.path=/tmp/cifar/cifar10-jpg/train --set data.val.path=/tmp/cifar/cifar10-jpg/test
  fi
}
phase_bench_mnv2() { for p in fp32 bf16; do referee mobilenetv2 64 "$p"; done; }

phases=("$@")
all=(ops core e2e sanitize configs configs-big engine bench bench-b64 bench-mnv2)
((${#phases[@]})) || phases=("${all[@]}")
for p in "${phases[@]}"; do
  case " ${all[*]} " in
    *" $p "*) "phase_${p//-/_}" ;;
    *) row "unknown phase" "$p (phases: ${all[*]})" ;;
  esac
done
