#!/usr/bin/env bash
# Every GPU check of the project in one command, for a GPU machine without internet
# (see ../shared/GPU.md). Two halves:
#
#   scripts/gpu-check.sh pack   on the development machine: builds for sm_90 into build-gpu/ and
#                               packs the binaries, the Debian shared libraries they need, the
#                               PyTorch peer and the CIFAR-10 tarballs into .device-pack/ (ignored
#                               by git; < 64 MiB, carried to the GPU machine).
#   scripts/gpu-check.sh        on the GPU machine: unpacks .device-pack/ (or uses build/ when it
#                               was built there), finds cuDNN/cuBLAS (CUDA toolkit or PyTorch's
#                               nvidia/* wheels), then runs the whole test suite (CUDA tests
#                               included), MiniGoogLeNet training throughput next to PyTorch eager
#                               and torch.compile (batch 256, fp32 and bf16), one full CIFAR-10
#                               epoch, and prints a table last. Logs go to $OUT/gpu-check (or
#                               /tmp/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = "pack" ]; then
  set -e
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTRAINER_NATIVE=OFF -DTRAINER_TEST_ROOT=/tmp/trainer-src -DTRAINER_TEST_BINARY=/tmp/trainer-gpu/trainer >/dev/null
  cmake --build build-gpu --parallel
  stage=$(mktemp -d)/trainer-gpu
  mkdir -p "$stage/lib" "$stage/tests"
  cp build-gpu/trainer "$stage/"
  cp build-gpu/tests/unit_ops build-gpu/tests/unit_core build-gpu/tests/unit_data build-gpu/tests/e2e "$stage/tests/"
  strip "$stage/trainer" "$stage"/tests/* || true
  # Debian libraries the GPU machine lacks (not glibc itself, not the CUDA libraries).
  ldd build-gpu/trainer build-gpu/tests/unit_ops build-gpu/tests/unit_core build-gpu/tests/unit_data build-gpu/tests/e2e | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s)\.so|/usr/local/cuda|libcudnn|libcublas' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  mkdir -p .device-pack
  tar -C "$(dirname "$stage")" -cJf .device-pack/trainer-gpu.tar.xz trainer-gpu
  mkdir -p .device-pack/anchors .device-pack/data
  install -m 644 ../shared/anchors/minigooglenet_torch.py .device-pack/anchors/
  install -m 644 ../shared/data/cifar10-jpg-*.tar.gz .device-pack/data/
  du -sh .device-pack
  echo "pack: done; run on the GPU machine with .device-pack carried: bash scripts/gpu-check.sh"
  exit 0
fi

out=${OUT:-/tmp}/gpu-check
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/summary.log"; }
rows=()
row() { rows+=("$(printf '%-46s %s' "$1" "$2")"); }

# --- binaries -------------------------------------------------------------------------------
if [ -f .device-pack/trainer-gpu.tar.xz ]; then
  rm -rf /tmp/trainer-gpu && tar -C /tmp -xJf .device-pack/trainer-gpu.tar.xz
  ln -sfn "$root" /tmp/trainer-src
  bin=/tmp/trainer-gpu
  tests=$bin/tests
  export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TRAINER_DATA=$root/.device-pack/data
  peer=$root/.device-pack/anchors/minigooglenet_torch.py
else
  [ -x build/trainer ] || scripts/setup.sh
  bin=$root/build tests=$root/build/tests
  peer=${PEER:-../shared/anchors/minigooglenet_torch.py}
fi

# --- CUDA libraries: the toolkit's, then PyTorch's wheels ---------------------------------------
nv=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs.update(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64${nv:+:$nv}
nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.log"
missing=$(ldd "$bin/trainer" | grep "not found" || true)
if [ -n "$missing" ]; then
  log "trainer cannot start, missing libraries:"; echo "$missing" | tee -a "$out/summary.log"
fi
"$bin/trainer" devices | tee "$out/devices.log"

# --- tests ------------------------------------------------------------------------------------
for t in unit_ops unit_core unit_data e2e; do
  log "test $t"
  (cd /tmp && "$tests/$t" --reporter compact) >"$out/test-$t.log" 2>&1
  rc=$?
  result=$(grep -E "^(Passed|Failed|All tests|No tests)" "$out/test-$t.log" | tail -1)
  echo "$result"
  row "tests $t" "${result:-no summary line (see test-$t.log)} (rc $rc)"
done
skips=$(grep -ho "cuda: skipped[^']*" "$out/test-unit_ops.log" | head -1)
[ -n "$skips" ] && row "CUDA op tests" "SKIPPED: $skips"

# --- data parallelism on one GPU: one-rank NCCL and the GPU listed twice match one device -------
smoke() {  # smoke <name> <args...>: final training loss of configs/smoke.yaml
  local name=$1; shift
  "$bin/trainer" run configs/smoke.yaml "$@" --run-dir "$out/dp-$name" >"$out/dp-$name.log" 2>&1 &&
    tail -1 "$out/dp-$name/metrics.csv" | cut -d, -f3
}
log "data parallel on GPU"
l1=$(smoke single --gpus 0)
ln=$(TRAINER_COMM=nccl smoke nccl1 --gpus 0)
l2=$(smoke twice --gpus 0,0 --set train.batch_size=16)
row "smoke loss: --gpus 0 / NCCL 1 rank / --gpus 0,0" "${l1:-failed} / ${ln:-failed} / ${l2:-failed} (logs dp-*.log)"

# --- checkpoints on the GPU: SIGINT mid-epoch, resume, compare with an uninterrupted run ---------
log "checkpoint resume on GPU"
"$bin/trainer" run configs/smoke.yaml --gpus 0 --run-dir "$out/ck-full" >"$out/ck-full.log" 2>&1
TRAINER_TEST_SIGINT_AT_STEP=40 "$bin/trainer" run configs/smoke.yaml --gpus 0 --run-dir "$out/ck-cut" >"$out/ck-cut.log" 2>&1
ck_cut=$?
"$bin/trainer" run --resume "$out/ck-cut" --gpus 0 --run-dir "$out/ck-res" >"$out/ck-res.log" 2>&1
ck_res=$?
if cmp -s "$out/ck-full/checkpoints/epoch-0003.safetensors" "$out/ck-res/checkpoints/epoch-0003.safetensors"; then
  ck="bit-identical"
else
  ck="differs: $(tail -1 "$out/ck-full/metrics.csv") vs $(tail -1 "$out/ck-res/metrics.csv")"
fi
row "SIGINT at step 40 + resume (smoke, GPU)" "rc $ck_cut then $ck_res; final weights $ck"
"$bin/trainer" eval "$out/ck-full" --gpus 0 >"$out/ck-eval.log" 2>&1
row "trainer eval on GPU" "rc $?; $(grep -o 'loss: .*' "$out/ck-eval.log" | tail -1)"
"$bin/trainer" devices >"$out/devices.log" 2>&1
row "trainer devices" "$(grep -c '^cuda:' "$out/devices.log") GPU line(s); $(grep -io 'nccl[^,;]*' "$out/devices.log" | head -1)"

# --- device parallelism: placement on gpu:0 + cpu, a shared LSTM over gpu:0/gpu:1 (both GPU 0) ----
log "device parallel on GPU"
"$bin/trainer" run configs/model_parallel.yaml --gpus 0 --set placement.a1=gpu:0 --set placement.b1=cpu \
  --set train.epochs=2 --run-dir "$out/mp-gpu-cpu" >"$out/mp-gpu-cpu.log" 2>&1
row "model_parallel.yaml on gpu:0 + cpu, 4 micro-batches" "rc $?; $(tail -1 "$out/mp-gpu-cpu/metrics.csv" 2>/dev/null)"
"$bin/trainer" run configs/shared_lstm.yaml --gpus 0,0 --set train.epochs=2 --run-dir "$out/lstm-gpu" >"$out/lstm-gpu.log" 2>&1
row "shared_lstm.yaml, branches on GPU 0 twice (--gpus 0,0), 2 epochs" "rc $?; $(tail -1 "$out/lstm-gpu/metrics.csv" 2>/dev/null)"
for m in 1 4; do
  o=$("$bin/trainer" bench configs/model_parallel.yaml --gpus 0 --set placement.a1=gpu:0 --set placement.b1=cpu \
        --set pipeline.microbatches=$m --steps 20 2>&1 | tail -1)
  row "bench model_parallel gpu:0 + cpu, M=$m" "$o"
done

# --- multi-process: one MPI process on the GPU (NCCL bootstrapped over MPI) ----------------------
log "mpirun on GPU"
mpirun -np 1 --allow-run-as-root "$bin/trainer" run configs/smoke.yaml --gpus 0 --run-dir "$out/mpi-gpu" >"$out/mpi-gpu.log" 2>&1
row "mpirun -np 1 trainer run smoke.yaml --gpus 0" "rc $?; $(tail -1 "$out/mpi-gpu/metrics.csv" 2>/dev/null)"

# --- throughput: MiniGoogLeNet, batch 256 -------------------------------------------------------
ips() { sed -nE 's/.*"images_per_(sec|s)": ([0-9.]+).*/\2/p' | tail -1; }
for prec in fp32 bf16; do
  log "bench trainer $prec"
  o=$("$bin/trainer" bench configs/minigooglenet.yaml --gpus 0 --steps 50 --warmup 10 \
        --set train.batch_size=256 $( [ $prec = bf16 ] && echo --set precision=bf16 ) 2>&1 | tee "$out/bench-trainer-$prec.log")
  mine=$(ips <<<"$o")
  amp=""; [ $prec = bf16 ] && amp="--amp bf16"
  log "bench pytorch eager $prec"
  eager=$(python3 "$peer" --device cuda --channels-last --batch 256 --steps 50 --warmup 10 $amp 2>&1 | tee "$out/bench-torch-eager-$prec.log" | ips)
  log "bench pytorch compile $prec"
  comp=$(python3 "$peer" --device cuda --channels-last --batch 256 --steps 50 --warmup 10 --compile $amp 2>&1 | tee "$out/bench-torch-compile-$prec.log" | ips)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
  row "MiniGoogLeNet $prec img/s: trainer" "${mine:-failed (see bench-trainer-$prec.log)}"
  row "MiniGoogLeNet $prec img/s: torch eager / compile" "${eager:-n/a} / ${comp:-n/a}"
  row "MiniGoogLeNet $prec ratio vs eager / vs compile" "$(ratio "${mine:-0}" "${eager:-0}") / $(ratio "${mine:-0}" "${comp:-0}")"
done

# --- one full CIFAR-10 epoch on the GPU ---------------------------------------------------------
data=${TRAINER_DATA:-../shared/data}
if [ -f "$data/cifar10-jpg-train.tar.gz" ]; then
  mkdir -p /tmp/cifar && [ -d /tmp/cifar/cifar10-jpg/train ] || { tar -xzf "$data/cifar10-jpg-train.tar.gz" -C /tmp/cifar && tar -xzf "$data/cifar10-jpg-test.tar.gz" -C /tmp/cifar; }
  log "CIFAR-10 epoch"
  start=$(date +%s.%N)
  "$bin/trainer" run configs/minigooglenet.yaml --gpus 0 --set train.epochs=1 --set data.train.path=/tmp/cifar/cifar10-jpg/train \
    --set data.val.path=/tmp/cifar/cifar10-jpg/test --run-dir "$out/cifar-epoch" >"$out/cifar-epoch.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  row "CIFAR-10 epoch (MiniGoogLeNet, batch 64)" "$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f s", b-a}') rc $rc; $(grep -o 'val_accuracy: [0-9.]*' "$out/cifar-epoch.log" | tail -1)"
else
  row "CIFAR-10 epoch" "skipped: no tarballs in $data"
fi

# --- MobileNetV2 on the real cats/dogs images (CIFAR-10's, upscaled to 224), a short schedule ----
if datasets/cats_vs_dogs/from-shared.sh "${TRAINER_DATA:-../shared/data}" >"$out/cats-dogs-unpack.log" 2>&1; then
  log "MobileNetV2 cats vs dogs"
  "$bin/trainer" run configs/mobilenetv2_cats_vs_dogs.yaml --gpus 0 --set data.train.path=datasets/cats_vs_dogs_cifar/train \
    --set data.val.path=datasets/cats_vs_dogs_cifar/val --set train.epochs=3 --run-dir "$out/mobilenetv2" \
    >"$out/mobilenetv2.log" 2>&1
  row "MobileNetV2 cats/dogs, 3 epochs" "rc $?; $(grep -o 'val_accuracy: [0-9.]*' "$out/mobilenetv2.log" | tail -1)"
else
  row "MobileNetV2 cats/dogs" "skipped: $(tail -1 "$out/cats-dogs-unpack.log")"
fi

echo
echo "gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), logs in $out)"
printf '%s\n' "${rows[@]}" | tee -a "$out/summary.log"
