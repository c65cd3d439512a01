#!/usr/bin/env bash
# Every GPU check of the project, in phases that each fit one call of the device tool (../shared/GPU.md).
#
#   scripts/gpu-check.sh pack          on the development machine: builds for sm_90 into build-gpu/ and packs
#                                      the binaries, the Debian shared libraries they need (PLplot's drivers
#                                      and data included) and the CIFAR-10 tarballs into .device-pack/
#                                      (ignored by git; < 64 MiB, carried to the GPU machine)
#   scripts/gpu-check.sh --plan        the phases, their time bounds, and which to run in one 10-minute command
#   scripts/gpu-check.sh [PHASE ...]   on the GPU machine, the phases in order (default: the first command's)
#   scripts/gpu-check.sh all           every phase (several commands' worth: see --plan)
#   scripts/gpu-check.sh --dry-run [PHASE ...|all]
#                                      walks the phases without a GPU: every row it would print, "skipped: no
#                                      GPU", after checking that the binaries, test lists, configs and peers
#                                      it needs are there (CI runs it: the script cannot rot). Without a
#                                      visible GPU every run is a dry run.
#
# Time: the device tool stops a command after 600 s and keeps only what is in $OUT. So every phase has a
# bound (<= 540 s, start-up included) and every step in it (a test case, a run, one process of a
# benchmark round) a timeout (<= 120 s); a phase stops starting
# steps when its bound is near and counts what it left as "not run (time bound)"; the whole command
# stops starting phases GPU_CHECK_BUDGET seconds (default 570) after it began. Rows go to
# $OUT/gpu-check-summary.log as they are made, the logs (written under /tmp/gpu-check, not $OUT: the
# device tool brings back at most 8 files) are archived into $OUT/gpu-check-logs.tar.gz
# after every phase and at exit (also on SIGTERM/SIGINT/SIGHUP), and the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
# The physical path: run through the /tmp/trainer-src link made below (the e2e tests do), a logical
# $PWD made that link point at itself, and every later test of the command found no file (GPU run of
# 2026-11-26, H200: 27 e2e cases).
root=$(pwd -P)
t0=$(date +%s)

# --- the phases: name, bound (s), per-step timeout (s), what it checks ----------------------------
phase_table=(
  "ops          210 120 unit_ops: every op test case in its own process (GPU vs float64, bf16/f16)"
  "core         180 120 unit_core likewise: GPU vs CPU, one GPU listed twice, mixed precision on the GPU"
  "engine       150 100 smoke on --gpus 0 / one-rank NCCL / --gpus 0,0; SIGINT + resume; eval; device parallel; mpirun"
  "memcheck     300 120 compute-sanitizer memcheck on every unit_ops case (no leak check: contexts live on purpose)"
  "racecheck     60  60 compute-sanitizer racecheck on the kernels with shared memory"
  "configs      300  60 quickstart, smoke, shared_lstm, model_parallel x (fp32, bf16) x (--gpus 0, 0,0); hybrid 2x2, accumulation, clipping, ema; predict GPU vs CPU"
  "graphs       150  60 trainer bench MiniGoogLeNet, batch 64 and 256, fp32 and bf16: the step as a CUDA graph vs launched"
  "step-graphs  360  45 MiniGoogLeNet b64 on --gpus 0 and 0,0: fp32, bf16, fp16 + loss scaling, clip_norm, accumulate 2; one-rank NCCL fp32, fp16; graph vs launched"
  "bench        360 110 MiniGoogLeNet batch 256, fp32 and bf16, against PyTorch eager and torch.compile"
  "configs-mgn  180 110 MiniGoogLeNet, one epoch of the shared CIFAR-10, fp32 and bf16, --gpus 0 and 0,0"
  "e2e          240 120 unit_data and the CLI tests, one process per case"
  "configs-mnv2 300 120 MobileNetV2 cats vs dogs, one epoch, batch 64 and 128, fp32 and bf16, --gpus 0 and 0,0"
  "bench-b64    240 100 MiniGoogLeNet batch 64 (the seed recipe's), fp32 and bf16, against PyTorch"
  "bench-mnv2   300 120 MobileNetV2 224x224 batch 64, fp32 and bf16, against PyTorch"
  "gpt          540 120 gpt_bytes one epoch (fp32, bf16); GPT-2 124M tokens/s (bench, fp32/bf16, bf16 attn_cudnn, bf16 -attn_gemm); vs PyTorch eager/compile, bf16 b4"
)
# One device-tool command each (sum of bounds <= 540, + 30 s start-up <= 570), most important first.
commands=("ops core engine" "graphs racecheck configs" "bench configs-mgn" "memcheck" "e2e configs-mnv2" "bench-b64 bench-mnv2"
          "step-graphs" "gpt")
declare -A bound step_timeout about
all=()
for r in "${phase_table[@]}"; do
  read -r n b s w <<<"$r"
  all+=("$n") bound[$n]=$b step_timeout[$n]=$s about[$n]=$w
done

if [ "${1:-}" = "--plan" ]; then
  printf 'gpu-check phases (bound: the most a phase takes, start-up included; step: the timeout of each case/run)\n\n'
  printf '  %-13s %6s %5s  %s\n' phase bound step "what it checks"
  for n in "${all[@]}"; do printf '  %-13s %5ss %4ss  %s\n' "$n" "${bound[$n]}" "${step_timeout[$n]}" "${about[$n]}"; done
  printf '\nOne device-tool command each (at most 600 s: bounds sum to <= 540, plus 30 s to start):\n\n'
  bad=0 i=0
  for c in "${commands[@]}"; do
    i=$((i + 1)) sum=0
    for n in $c; do sum=$((sum + ${bound[$n]})); ((${bound[$n]} <= 540)) || bad=1; done
    ((sum <= 540)) || bad=1
    printf '  %d. bash scripts/gpu-check.sh %-28s # bounds sum to %3d s\n' "$i" "$c" "$sum"
  done
  printf '\nPhases end well inside their bounds (an H200, 2026-11-27 evening: ops 20 s, memcheck 21 s, core 4 s,\n'
  printf 'engine 16 s, configs 116 s, e2e 62 s, bench 129 s, configs-mnv2 65 s, graphs 15 s, racecheck 48 s,\n'
  printf 'bench-b64 126 s; bench-mnv2 189 s in the morning run), and the command stops starting phases at\n'
  printf 'GPU_CHECK_BUDGET. With 15 minutes of device time (a start took ~35 s), two commands on the warm machine.\n'
  printf 'Correctness first, then what the last run left out (bench-mnv2 from its bf16 row on, configs-mgn):\n'
  printf '  GPU_CHECK_BUDGET=540 GPU_CHECK_JOBS=8 bash scripts/gpu-check.sh ops core engine bench-mnv2 e2e \\\n'
  printf '    configs-mgn\n'
  printf 'then, warm (~300 s left): GPU_CHECK_BUDGET=270 bash scripts/gpu-check.sh configs memcheck graphs. Each\n'
  printf 'command leaves $OUT/gpu-check-summary.log and $OUT/gpu-check-logs.tar.gz (2 files back). Build the\n'
  printf 'pack first: scripts/gpu-check.sh pack (7 min on 2 cores)\n'
  exit $bad
fi

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
  # The GPU machine has no fontconfig configuration: cairo's first text then printed "Fontconfig
  # error: Cannot load default config file" on stderr, which the one-line-on-stderr tests count (8
  # e2e cases, 2026-11-26). A configuration naming one travelling font (FONTCONFIG_FILE below).
  # configs/gpt_bytes.yaml's text (Debian's fortunes, 2.6 MB), for the gpt phase.
  mkdir -p "$stage/fortunes"
  cp -L /usr/share/games/fortunes/*.u8 "$stage/fortunes/"
  mkdir -p "$stage/fonts"
  cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$stage/fonts/"
  printf '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n  <dir>/tmp/trainer-gpu/fonts</dir>\n  <cachedir>/tmp/trainer-gpu/fonts/cache</cachedir>\n</fontconfig>\n' \
    >"$stage/fonts/fonts.conf"
  # Debian libraries the GPU machine lacks (not glibc itself, not the CUDA libraries), for the
  # binaries and the driver plugins.
  # (ldd of the binaries alone: build-gpu/tests/* also holds CMake's files, on which ldd exits 1,
  # and under pipefail that ended the pack here without a word.)
  ldd build-gpu/trainer build-gpu/tests/{unit_ops,unit_core,unit_data,e2e} "$drv"/cairo.so 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s)\.so|/usr/local/cuda|libcudnn|libcublas|libnccl' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  mkdir -p .device-pack
  tar -C "$(dirname "$stage")" -cJf .device-pack/trainer-gpu.tar.xz trainer-gpu
  mkdir -p .device-pack/data
  install -m 644 ../shared/data/cifar10-jpg-*.tar.gz .device-pack/data/
  du -sh .device-pack
  echo "pack: done; on the GPU machine with .device-pack carried: bash scripts/gpu-check.sh [PHASE ...] (see --plan)"
  exit 0
fi

dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
phases=("$@")
((${#phases[@]})) || phases=(${commands[0]})
[ "${phases[*]}" = all ] && phases=("${all[@]}")

out=${GPU_CHECK_LOGS:-/tmp/gpu-check}
archive=${OUT:-/tmp}/gpu-check-logs.tar.gz
summary=${OUT:-/tmp}/gpu-check-summary.log
mkdir -p "$(dirname "$archive")"
rm -f "$summary"
rm -rf "$out" && mkdir -p "$out"
budget=${GPU_CHECK_BUDGET:-570}
rows=()
row() {
  local r
  r=$(printf '%-58s %s' "$1" "$2")
  rows+=("$r")
  echo "$r" >>"$out/summary.log"
  echo "$r" >>"$summary"
}
log() { echo "== $(date -u +%H:%M:%S) +$(($(date +%s) - t0))s $*" | tee -a "$out/progress.log"; }
# Checkpoints stay out of the archive (MiniGoogLeNet's are ~14 MB each; a file over 16 MiB does not come back).
save() { tar -C "$(dirname "$out")" --exclude='*.safetensors' -czf "$archive.part" "$(basename "$out")" 2>/dev/null && mv -f "$archive.part" "$archive"; }
finished=0
finish() {
  ((finished)) && return
  finished=1
  save
  echo
  echo "gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - t0)) s, logs in $archive)"
  printf '%s\n' "${rows[@]}"
}
trap finish EXIT
trap 'row "interrupted" "by a signal after $(($(date +%s) - t0)) s"; exit 143' TERM INT HUP

# --- binaries, libraries, data --------------------------------------------------------------------
missing_parts=0
need() {  # need <path> <what>: a row and a non-zero exit status at the end when it is missing
  [ -e "$1" ] && return 0
  row "MISSING" "$2: $1"
  missing_parts=1
  return 1
}
if [ -f .device-pack/trainer-gpu.tar.xz ]; then
  # A warm machine may hold an older unpacked pack: unpack again whenever the pack's checksum changed.
  sum=$(sha256sum .device-pack/trainer-gpu.tar.xz | cut -d' ' -f1)
  if ((dry)) && [ -x /tmp/trainer-gpu/trainer ]; then
    # A dry run (the e2e phase runs one from its tests) leaves the binaries the other test
    # processes are running alone (unpacking over them, a run of the e2e phase here saw one
    # trainer die of SIGBUS).
    row "pack" "a dry run: /tmp/trainer-gpu left as it is"
  elif [ "$(cat /tmp/trainer-gpu/.pack-sha256 2>/dev/null)" != "$sum" ]; then
    rm -rf /tmp/trainer-gpu && tar -C /tmp -xJf .device-pack/trainer-gpu.tar.xz && echo "$sum" >/tmp/trainer-gpu/.pack-sha256
    row "pack" "unpacked ${sum:0:12} into /tmp/trainer-gpu"
  else
    row "pack" "${sum:0:12} already unpacked in /tmp/trainer-gpu"
  fi
  ln -sfn "$root" /tmp/trainer-src
  bin=/tmp/trainer-gpu
  tests=$bin/tests
  export LD_LIBRARY_PATH=$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PLPLOT_DRV_DIR=$bin/plplot/drivers PLPLOT_LIB=$bin/plplot/data
  [ -f "$bin/fonts/fonts.conf" ] && export FONTCONFIG_FILE=$bin/fonts/fonts.conf
  export TRAINER_DATA=$root/.device-pack/data
else
  build=${GPU_CHECK_BUILD:-$root/build}
  ((dry)) || [ -x "$build/trainer" ] || scripts/setup.sh
  bin=$build tests=$build/tests
fi
data=${TRAINER_DATA:-../shared/data}
T=$bin/trainer
need "$T" "the trainer binary"

# CUDA libraries: the toolkit's, then cuDNN and NCCL wherever Python environments keep them:
# PyTorch's wheels (<site-packages>/nvidia/*/lib) of the system python3, an active virtualenv or
# conda environment, and a conda prefix's own lib/ (conda's cudnn and nccl packages).
nv=$( { for py in python3 "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}"; do
          [ -n "$py" ] && command -v "$py" >/dev/null && "$py" - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
roots += glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages"))
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        print(d)
PY
        done
        for d in "${CONDA_PREFIX:-}" /opt/conda; do [ -n "$d" ] && [ -d "$d/lib" ] && echo "$d/lib"; done
      } | while read -r d; do ls "$d"/libcudnn*.so* "$d"/libnccl*.so* >/dev/null 2>&1 && echo "$d"; done | sort -u | paste -sd: -)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64${nv:+:$nv}
where() { ldconfig -p 2>/dev/null | grep -q "$1" && echo system && return; for d in ${LD_LIBRARY_PATH//:/ }; do ls "$d"/$1* >/dev/null 2>&1 && echo "$d" && return; done; echo "not found"; }
row "CUDA libraries" "cuDNN: $(where libcudnn.so); NCCL: $(where libnccl.so); cuBLAS: $(where libcublas.so)"

gpu=0
if ((!dry)) && nvidia-smi -L >"$out/nvidia-smi.log" 2>&1 && grep -q '^GPU ' "$out/nvidia-smi.log"; then gpu=1; fi
if ((gpu)); then
  missing=$(ldd "$T" | grep "not found" || true)
  [ -n "$missing" ] && row "trainer cannot start, missing libraries" "$(echo "$missing" | tr '\n' ' ')"
  timeout 60 "$T" devices >"$out/devices.log" 2>&1
  row "GPU" "$(head -1 "$out/nvidia-smi.log"); trainer devices: $(grep -c '^cuda:' "$out/devices.log") GPU line(s), $(grep -om1 'cuDNN [0-9.]*' "$out/devices.log" || echo 'cuDNN ?')"
elif ((dry)); then
  row "GPU" "not used: a dry run (--dry-run; every GPU step below: skipped: no GPU)"
else
  dry=1
  row "GPU" "none visible: a dry run (every GPU step below: skipped: no GPU)"
fi

# --- time bounds ----------------------------------------------------------------------------------
phase_deadline=0
left() { echo $((phase_deadline - $(date +%s))); }
# run_bounded <timeout> <cmd...>: the command under min(timeout, time left in the phase); 125 without
# running it when less than 10 s are left.
run_bounded() {
  local t=$1 l
  shift
  l=$(left)
  ((l < 10)) && return 125
  ((l < t)) && t=$l
  timeout --kill-after=5 "$t" "$@"
}
# skip <label> <what>: the row of a step that does not run.
skip() {
  if ((dry)); then row "$1" "skipped: no GPU${2:+ ($2)}"; else
    row "$1" "not run: under 10 s left before the phase's deadline (its bound of ${bound[$phase]} s, or GPU_CHECK_BUDGET)"
  fi
}
# bounded_row <label> <timeout> <log> <cmd...>: the command under run_bounded, its output in <log>, and
# a row with its last line, or why there is none ("not run", "timed out", the exit code): never an
# empty row (the H100 run of 2026-11-27 printed three, for steps the command's budget left out).
bounded_row() {
  local label=$1 t=$2 logf=$3 rc last
  shift 3
  run_bounded "$t" "$@" >"$logf" 2>&1
  rc=$?
  ((rc == 125)) && { skip "$label"; return $rc; }
  last=$(grep -v '^[[:space:]]*$' "$logf" | tail -1)
  case $rc in
    0) row "$label" "${last:-exit 0 without output}" ;;
    124 | 137) row "$label" "timed out (${t} s or the phase's deadline): ${last:-no output}" ;;
    *) row "$label" "exit $rc: ${last:-no output}" ;;
  esac
  return $rc
}

# bench_row <label> <log> <cmd...>: a `trainer bench --json` run (60 s at most) as one short row: img/s,
# the cores it kept busy, and each pipeline stage's busy time.
bench_row() {
  local label=$1 logf=$2 j
  shift 2
  run_bounded 60 "$@" >"$logf" 2>&1
  case $? in
    0) j=$(grep '^{' "$logf" | tail -1)
       row "$label" "$(sed -nE 's/.*"images_per_sec": ?([0-9.]+).*/\1 img\/s/p' <<<"$j"), cores $(sed -nE \
         's/.*"cpu_cores": ?([0-9.]+).*/\1/p' <<<"$j"), threads $(sed -nE 's/.*"threads": ?([0-9]+).*/\1/p' <<<"$j")$(grep -oE \
         '"device": ?"[^"]*", ?"busy_ms": ?[0-9.]+' <<<"$j" | sed -E 's/"device": ?"([^"]*)", ?"busy_ms": ?/, \1 busy /' |
         tr -d '\n')" ;;
    125) skip "$label" ;;
    *) row "$label" "failed: $(grep -v '^[[:space:]]*$' "$logf" | tail -1)" ;;
  esac
}

# --- the test suites, one process per case --------------------------------------------------------
isolated() {  # isolated <binary> <jobs> [run-isolated options]: a row with its counts
  local b=$1 jobs=$2
  shift 2
  need "$tests/$b" "test binary" || return
  if ((dry)); then  # the same selection, listed instead of run
    local n
    n=$("$root/scripts/run-isolated.sh" "$tests/$b" "$out/tests-$b${tag:-}" --list "$@" | cut -d' ' -f1)
    ((${n:-0} > 0)) || { row "MISSING" "$tests/$b lists no test cases${*:+ for $*}"; missing_parts=1; }
    skip "tests $b${tag:-} (one process per case)" "${n:-0} cases, each <= ${step_timeout[$phase]} s"
    return
  fi
  log "tests $b $*"
  (cd /tmp && "$root/scripts/run-isolated.sh" "$tests/$b" "$out/tests-$b${tag:-}" --jobs "$jobs" \
    --timeout "${step_timeout[$phase]}" --deadline "$phase_deadline" "$@") >"$out/tests-$b${tag:-}.log" 2>&1
  row "tests $b${tag:-} (one process per case)" "$(tail -1 "$out/tests-$b${tag:-}.log")"
  # (Loops fed by process substitution, not pipes: a row made in a pipe's subshell never reached
  # the summary printed last.)
  while read -r f; do row "  $b" "$f"; done < <(grep '^FAILED' "$out/tests-$b${tag:-}.log" | head -20)
  while read -r f; do row "  $b" "$f"; done < <(grep '^SKIPPED' "$out/tests-$b${tag:-}.log" | head -20)
  while read -r s; do row "  $b: CUDA SKIPPED" "$s"; done < <(grep -ho "SKIPPED (gpu)[^']*" "$out/tests-$b${tag:-}"/case-*.log 2>/dev/null | sort -u | head -1)
}

jobs=${GPU_CHECK_JOBS:-4}  # test processes at once on the one GPU (the machine has 16 cores)
phase_ops() { isolated unit_ops "$jobs"; }
phase_core() { isolated unit_core "$jobs"; }
phase_e2e() {
  isolated unit_data 8
  command -v mpirun >/dev/null || row "  e2e" "no mpirun on this machine: the mpi cases skip, saying so"
  isolated e2e 3
}
sanitizer() {  # sanitizer <tool> <jobs> [run-isolated options]
  local tool=$1 jobs=$2
  shift 2
  if ((!dry)) && ! command -v compute-sanitizer >/dev/null; then row "compute-sanitizer $tool" "not found: skipped"; return; fi
  tag=-$tool isolated unit_ops "$jobs" --wrap "compute-sanitizer --tool $tool --error-exitcode 97" "$@"
}
phase_memcheck() { sanitizer memcheck 8; }
phase_racecheck() { sanitizer racecheck 8 --filter "batchnorm|conv2d|dense|lstm|softmax|sigmoid_xent|pool|reduce"; }

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
  # validation, epoch_end, other), in ms.
  local parts
  parts=$(tail -1 "$dir/metrics.jsonl" 2>/dev/null | grep -oE '"time_[a-z_]+_s": *-?[0-9.e+-]+' |
    sed -E 's/"time_([a-z_]+)_s": *(.*)/\1 \2/' | awk '{printf "%s %.0f  ", $1, $2 * 1000}')
  [ -n "$parts" ] && row "  (ms of the last epoch)" "$parts"
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
    124 | 137) row "  $tag" "timed out after $((t1 - t0b)) s (the phase's deadline or GPU_CHECK_BUDGET): ${last:-no output yet}" ;;
    *) row "  $tag" "bench-vs-pytorch exit $rc: ${last:-no output}" ;;
  esac
}
# --- the step as one CUDA graph against the same step launched kernel by kernel ------------------
phase_graphs() {
  local b p g o
  for b in 64 256; do
    for p in fp32 bf16; do
      local label="graphs: minigooglenet b$b $p (ms/step on / off)"
      ((dry)) && { skip "$label" "trainer bench, devices.cuda_graphs true and false"; continue; }
      local r=()
      for g in true false; do
        o=$(run_bounded "${step_timeout[$phase]}" "$T" bench configs/minigooglenet.yaml --gpus 0 --steps 50 --warmup 10 \
              --set train.batch_size=$b --set precision=$p --set devices.cuda_graphs=$g 2>&1)
        echo "$o" >"$out/graphs-b$b-$p-$g.log"
        r+=("$(sed -nE 's/.*"ms_per_step": ?([0-9.]+).*/\1/p' <<<"$o" | tail -1)")
      done
      row "$label" "${r[0]:-failed} / ${r[1]:-failed}$(grep -h '^note:' "$out/graphs-b$b-$p-true.log" | head -1 | cut -c1-80)"
    done
  done
}
# --- issue 45: every strategy's step as a graph? ms/step with graphs allowed and not, and whether it was one -
phase_step_graphs() {
  local gpus v g o
  # "nccl": --gpus 0 over a one-rank NCCL communicator, its all-reduce and broadcast recorded in the graph.
  for gpus in 0 0,0 nccl; do
    for v in "fp32|" "bf16|--set precision=bf16" "fp16 + loss scale|--set precision=fp16" \
             "clip_norm 1|--set train.clip_norm=1" "accumulate 2|--set train.accumulate=2"; do
      [ "$gpus" = nccl ] && case "$v" in fp32*|fp16*) ;; *) continue ;; esac
      local shown="--gpus $gpus"
      [ "$gpus" = nccl ] && shown="--gpus 0 one-rank NCCL"
      local label="step-graphs: minigooglenet b64 $shown ${v%%|*} (ms/step graphs on / off; step_graph; host syncs/step)"
      ((dry)) && { skip "$label" "trainer bench, devices.cuda_graphs true and false"; continue; }
      local r=() k=() w=() comm="" devs=$gpus
      [ "$gpus" = nccl ] && comm=nccl devs=0
      for g in true false; do
        # shellcheck disable=SC2086
        o=$(TRAINER_COMM=$comm run_bounded "${step_timeout[$phase]}" "$T" bench configs/minigooglenet.yaml --gpus $devs --steps 40 \
              --warmup 10 --json --set train.batch_size=64 --set devices.cuda_graphs=$g ${v#*|} 2>&1)
        echo "$o" >"$out/step-graphs-$gpus-${v%%|*}-$g.log"
        r+=("$(sed -nE 's/.*"ms_per_step": ?([0-9.]+).*/\1/p' <<<"$o" | tail -1)")
        k+=("$(sed -nE 's/.*"step_graph": ?([a-z]+).*/\1/p' <<<"$o" | tail -1)")
        w+=("$(sed -nE 's/.*"host_syncs_per_step": ?([0-9.e+-]+).*/\1/p' <<<"$o" | tail -1)")
      done
      row "$label" "${r[0]:-failed} / ${r[1]:-failed}; ${k[0]:-?} / ${k[1]:-?}; ${w[0]:-?} / ${w[1]:-?}"
    done
  done
}
phase_bench() { for p in fp32 bf16; do referee minigooglenet 256 "$p" 1; done; }
# --- issue 47: the GPTs on the GPU -----------------------------------------------------------------
phase_gpt() {
  local p o
  for p in fp32 bf16; do
    config_run gpt_bytes "$p" 0 configs/gpt_bytes.yaml --set train.epochs=2 \
      --set data.train.path=/tmp/trainer-gpu/fortunes --set data.val.path=/tmp/trainer-gpu/fortunes
  done
  # GPT-2 small's shape on synthetic ids (llm.c's single-GPU batch, 4 x 1024): tokens/s = samples/s x 1024.
  # The third row: cuDNN's fused flash attention (attn_cudnn, off by default until this row and the
  # ops phase's test have run on a GPU; its log says, on stderr, any shape cuDNN refused and the
  # GEMM path took); the fourth: attention by its reference kernel (one block per query row), not
  # the attn_gemm fast path's batched GEMMs, to show what that path gains.
  local v fast
  for v in "fp32|default" "bf16|default" "bf16|attn_cudnn" "bf16|-attn_gemm"; do
    p=${v%%|*} fast=${v#*|}
    local suffix=""
    [ "$fast" = default ] || suffix=" $fast"
    local label="gpt2_124m b4 $p$suffix (ms, tokens/s, graph)"
    ((dry)) && { skip "$label" "trainer bench configs/gpt2_124m.yaml"; continue; }
    # cuDNN's warnings (why an engine refused a graph) beside the row's log, for the attn_cudnn row;
    # TRAINER_CUDNN_LOG=1: the log names each attention plan's engine (and each convolution's choice).
    local dbg=0
    [ "$fast" = attn_cudnn ] && dbg=2
    o=$(CUDNN_LOGLEVEL_DBG=$dbg CUDNN_LOGDEST_DBG="$out/gpt2-cudnn-warnings.log" TRAINER_CUDNN_LOG=1 TRAINER_FAST_PATHS=$fast \
          run_bounded "${step_timeout[$phase]}" "$T" bench configs/gpt2_124m.yaml --gpus 0 \
          --steps 20 --warmup 5 --json --set precision=$p 2>&1)
    echo "$o" >"$out/gpt2-$p${suffix// /}.log"
    local ms ips graph
    ms=$(sed -nE 's/.*"ms_per_step": ?([0-9.]+).*/\1/p' <<<"$o" | tail -1)
    ips=$(sed -nE 's/.*"images_per_sec": ?([0-9.]+).*/\1/p' <<<"$o" | tail -1)
    graph=$(sed -nE 's/.*"step_graph": ?(true|false).*/\1/p' <<<"$o" | tail -1)
    row "$label" "${ms:-failed} ms, $(awk -v s="${ips:-0}" 'BEGIN {printf "%.0f", s * 1024}') tokens/s, ${graph:-?}$( [ -n "$ms" ] || echo ": $(tail -1 <<<"$o" | cut -c1-90)")"
  done
  referee gpt2 4 bf16 1
}
phase_bench_b64() { for p in fp32 bf16; do referee minigooglenet 64 "$p" 1; done; }
phase_bench_mnv2() {
  local p
  for p in fp32 bf16; do referee mobilenetv2 64 "$p" 1; done
  # Where its step goes (it ran at 0.48x/0.65x PyTorch eager on an H200, 2026-11-26): every layer
  # timed, the step synchronised around each; one row per precision with the layer types' totals.
  # The third row: bf16 with the algorithms measured instead of guessed (TRAINER_CUDNN_FIND=1).
  for p in fp32 bf16 bf16-find; do
    local label="layers: mobilenetv2 b64 $p (fwd+bwd ms per type)"
    ((dry)) && { skip "$label" "trainer bench --layers"; continue; }
    TRAINER_CUDNN_FIND=$([ $p = bf16-find ] && echo 1 || echo 0) TRAINER_CUDNN_LOG=1 run_bounded 60 "$T" bench \
      configs/mobilenetv2_cats_vs_dogs.yaml --gpus 0 --steps 10 --warmup 3 --layers \
      --set train.batch_size=64 --set precision=${p%-find} >"$out/layers-mnv2-$p.log" 2>&1
    local rc=$?
    ((rc == 125)) && { skip "$label"; continue; }
    row "$label" "rc $rc; $(grep -E ' fwd +[0-9.]+ ms  bwd' "$out/layers-mnv2-$p.log" |
      awk '{t[$2] += $5 + $8} END {for (k in t) printf "%.2f %s\n", t[k], k}' | sort -rn | head -6 | paste -sd, -)$(
      grep -oE "outside the layers' bwd above: [0-9.]+ ms" "$out/layers-mnv2-$p.log" | sed 's/.*above: /; input-gradient sums /')"
    # bf16's 1x1 convolutions took ~0.3 ms forward whatever their size on the H100 (2026-11-27), fp32's
    # 0.07-0.15: which cuDNN algorithms and math types were chosen (TRAINER_CUDNN_LOG=1, one line each).
    row "cuDNN choices: mobilenetv2 b64 $p" "$(grep -c ': cuDNN ' "$out/layers-mnv2-$p.log") choices; $(grep -oE \
      '(forward|backward data|backward filter): cuDNN [a-z]+ algorithm [0-9]+ \(math [A-Z_]+' "$out/layers-mnv2-$p.log" |
      sed -E 's/: cuDNN ([a-z]+) algorithm ([0-9]+) \(math /:\1 \2:/' | sort | uniq -c |
      sort -rn | head -8 | awk '{$1=$1; print}' | paste -sd, -)"
  done
  # Whole bf16 steps, the algorithms guessed (cuDNN's heuristic, the default) vs measured.
  local f
  for p in bf16; do
    for f in 0 1; do
      local label="mobilenetv2 b64 $p step, TRAINER_CUDNN_FIND=$f"
      ((dry)) && { skip "$label" "trainer bench --json"; continue; }
      bench_row "$label" "$out/bench-mnv2-$p-find$f.log" env TRAINER_CUDNN_FIND=$f "$T" bench \
        configs/mobilenetv2_cats_vs_dogs.yaml --gpus 0 --steps 30 --warmup 5 --json --set train.batch_size=64 \
        --set precision=$p
    done
  done
}

for phase in "${phases[@]}"; do
  case " ${all[*]} " in
    *" $phase "*) ;;
    *) row "unknown phase" "$phase (phases: ${all[*]})"; missing_parts=1; continue ;;
  esac
  now=$(date +%s)
  phase_deadline=$((now + ${bound[$phase]}))
  end=$((t0 + budget - 15))  # 15 s to archive and print
  ((phase_deadline > end)) && phase_deadline=$end
  if ((!dry && phase_deadline - now < 30)); then
    row "phase $phase" "not run: the command's budget of $budget s is spent (GPU_CHECK_BUDGET)"
    continue
  fi
  log "phase $phase (bound ${bound[$phase]} s)"
  "phase_${phase//-/_}"
  row "phase $phase" "done in $(($(date +%s) - now)) s (bound ${bound[$phase]} s)"
  save
done
exit $missing_parts
