#!/usr/bin/env bash
# Every GPU check of the project, in phases that each fit one call of the device tool (../shared/GPU.md); the
# phases of the configs, the engine, the step graphs and the benchmarks live in gpu-check-phases.sh (sourced).
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
# every 20 s, after every phase and at exit (also on SIGTERM/SIGINT/SIGHUP), and the summary is printed
# last. The pack records the sources it was built from; a run stops (exit 3) when they are not this
# tree's, unless GPU_CHECK_STALE_OK=1.
set -uo pipefail
cd "$(dirname "$0")/.."
# The physical path: run through the /tmp/trainer-src link made below (the e2e tests do), a logical
# $PWD made that link point at itself, and every later test of the command found no file (GPU run of
# 2026-11-26, H200: 27 e2e cases).
root=$(pwd -P)
t0=$(date +%s)

# --- the sources the binaries are built from --------------------------------------------------------
# source_hash: one sha256 over the list "sha256  path" (sorted by path, LC_ALL=C) of the files that go
# into the binaries. In the git checkout (the development machine) git names them: tracked and
# untracked-not-ignored. The GPU machine's copy has no .git but holds exactly those files plus the
# ignored paths carried to it, so find names them there; of .gitignore's patterns only __pycache__/
# (the e2e tests' Python peers) can occur under these four paths, the others are anchored at the root.
# `pack` records it as trainer-gpu/SOURCE and a run compares it with its tree's, so that no device time
# goes to binaries built from other sources than the ones the command is meant to check.
source_hash() {
  local srcs=(core cmd tests CMakeLists.txt)
  if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
    # (git lists a tracked file deleted from the tree; the copy has no such file.)
    git ls-files -co --exclude-standard -z "${srcs[@]}" | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done
  else
    find "${srcs[@]}" -name __pycache__ -prune -o ! -type d -print0
  fi | LC_ALL=C sort -zu | xargs -0r sha256sum | sha256sum | cut -d' ' -f1
}
# stale <recorded SOURCE>: true, printing why, when the pack was not built from this tree's sources.
stale() {
  local here from=${1:0:12}
  here=$(source_hash)
  [ -n "$1" ] && [ "$1" = "$here" ] && return 1
  echo "STALE — built from ${from:-(none recorded: a pack made before SOURCE)}, this tree is ${here:0:12}: rebuild with scripts/gpu-check.sh pack"
}

# --- the phases: name, bound (s), per-step timeout (s), what it checks ----------------------------
phase_table=(
  "ops          210 120 unit_ops: every op test case in its own process (GPU vs float64, bf16/f16)"
  "core         180 120 unit_core likewise: GPU vs CPU, one GPU listed twice, mixed precision on the GPU"
  "engine       150 100 smoke on --gpus 0 / one-rank NCCL / --gpus 0,0; SIGINT + resume; eval; device parallel; mpirun"
  "memcheck     300 120 compute-sanitizer memcheck on every unit_ops case (no leak check: contexts live on purpose)"
  "racecheck     90  60 compute-sanitizer racecheck on the kernels with shared memory"
  "configs      300  60 quickstart, smoke, shared_lstm, model_parallel x (fp32, bf16) x (--gpus 0, 0,0); hybrid 2x2, accumulation, clipping, ema; predict GPU vs CPU"
  "graphs       150  60 trainer bench MiniGoogLeNet, batch 64 and 256, fp32 and bf16: the step as a CUDA graph vs launched"
  "step-graphs  360  45 MiniGoogLeNet b64 on --gpus 0 and 0,0: fp32, bf16, fp16 + loss scaling, clip_norm, accumulate 2 (0,0 also sync_bn); one-rank NCCL fp32, fp16; model_parallel on two GPU stages (also accumulation, fp16, clipping, EMA); hybrid 2x2 (fp32, fp16, EMA); shared_lstm on GPU stages; graph vs launched"
  "bench        360 110 MiniGoogLeNet batch 256, fp32 and bf16, against PyTorch eager and torch.compile"
  "configs-mgn  180 110 MiniGoogLeNet, one epoch of the shared CIFAR-10, fp32 and bf16, --gpus 0 and 0,0"
  "e2e          240 120 unit_data and the CLI tests, one process per case"
  "configs-mnv2 300 120 MobileNetV2 cats vs dogs, one epoch, batch 64 and 128, fp32 and bf16, --gpus 0 and 0,0"
  "bench-b64    240 100 MiniGoogLeNet batch 64 (the seed recipe's), fp32 and bf16, against PyTorch"
  "bench-mnv2   300 120 MobileNetV2 224x224 batch 64, fp32 and bf16, against PyTorch"
  "gpt          540 120 GPT-2 124M tokens/s (bench, fp32/bf16 (attn_cudnn), bf16 -attn_cudnn, bf16 reference attention); bf16 per layer + memory; gpt_bytes one epoch (fp32, bf16); vs PyTorch eager/compile, bf16 b4"
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
  printf '\nPhases end well inside their bounds (an H200, 2026-11-30: ops 52 s, core 28 s, engine 16 s, e2e 70 s,\n'
  printf 'step-graphs 48 s, configs-mgn 30 s, gpt 139 s, memcheck 50 s, racecheck 64 s, bench-b64 216 s; 2026-11-27:\n'
  printf 'configs 116 s, bench 129 s, configs-mnv2 65 s, graphs 15 s, bench-mnv2 189 s), and the command stops\n'
  printf 'starting phases at GPU_CHECK_BUDGET. With 15 minutes of device time (a start took ~35 s), two commands\n'
  printf 'on the warm machine. First what the 2026-11-30 run found and was fixed blind (docs/gpu-runs/\n'
  printf '2026-11-30-h200.md: the AMX bf16 convolution in ops, the recorded-step counts in core, model_parallel\n'
  printf 'with accumulation in step-graphs) and written since without a GPU (step-graphs: hybrid copies, EMA and\n'
  printf 'shared_lstm as the stages'"'"' programs, 2026-12-01; ops and core: dense on bf16/f16 activations through\n'
  printf 'cublasGemmEx, and attention on bf16/f16 q, k, v (cuDNN in place, the other paths widened), the mixed\n'
  printf 'transformer block, 2026-12-01; ops: the dw_tiled and conv_1x1_gemm fast paths against their reference\n'
  printf 'paths, depthwise_tiled_test and conv_1x1_gemm_test, 2026-12-01), then configs (not run since 2026-11-27)\n'
  printf 'and gpt (attn_cudnn now the default; its new row times every layer of the bf16 step and prints the\n'
  printf 'arena beside the device'"'"'s peak):\n'
  printf '  GPU_CHECK_BUDGET=540 GPU_CHECK_JOBS=8 bash scripts/gpu-check.sh ops core engine step-graphs configs \\\n'
  printf '    gpt\n'
  printf 'then, warm: GPU_CHECK_BUDGET=B bash scripts/gpu-check.sh bench-mnv2 configs-mgn memcheck bench, with B\n'
  printf 'the device tool'"'"'s status budget_left_s minus ~45 s, and the tool'"'"'s timeout_s a little above B (B + 20)\n'
  printf '(issue 46: MobileNetV2 first with and without dw_tiled and conv_1x1_gemm, off by default until these\n'
  printf 'rows, then against PyTorch, never measured in bf16; the seed epoch'"'"'s breakdown). Each command\n'
  printf 'leaves $OUT/gpu-check-summary.log and $OUT/gpu-check-logs.tar.gz (2 files back). Build the pack\n'
  printf 'first: scripts/gpu-check.sh pack (7-12 min on 2 cores)\n'
  # The pack must hold binaries built from this tree (see source_hash): say so here, before device time goes.
  if [ ! -f .device-pack/trainer-gpu.tar.xz ]; then
    printf '\nWARNING: no pack (.device-pack/trainer-gpu.tar.xz): build it with scripts/gpu-check.sh pack\n'
  elif why=$(stale "$(tar -xJOf .device-pack/trainer-gpu.tar.xz trainer-gpu/SOURCE 2>/dev/null)"); then
    printf '\nWARNING: the pack is %s\n' "$why"
  fi
  exit $bad
fi

if [ "${1:-}" = "pack" ]; then
  set -e
  # The sources as the build starts (a file edited during it makes the pack stale: rebuilt, not trusted).
  sources=$(source_hash)
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTRAINER_NATIVE=OFF -DTRAINER_TEST_ROOT=/tmp/trainer-src -DTRAINER_TEST_BINARY=/tmp/trainer-gpu/trainer >/dev/null
  cmake --build build-gpu --parallel
  stage=$(mktemp -d)/trainer-gpu
  mkdir -p "$stage/lib" "$stage/tests" "$stage/plplot/drivers" "$stage/plplot/data"
  echo "$sources" >"$stage/SOURCE"
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
  rm -rf "$(dirname "$stage")"
  mkdir -p .device-pack/data
  install -m 644 ../shared/data/cifar10-jpg-*.tar.gz .device-pack/data/
  du -sh .device-pack
  echo "pack: done (sources ${sources:0:12}); on the GPU machine with .device-pack carried: bash scripts/gpu-check.sh [PHASE ...] (see --plan)"
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
# Each archive goes to a name of its own, then into place: the saver below and a phase's end may archive
# at once, and a command killed mid-write keeps the last whole archive. tar's exit 1 ("file changed as
# we read it": a log being written) still made a whole archive.
save() {
  local part
  part=$(mktemp --suffix=.part "$archive.XXXXXX") || return
  tar -C "$(dirname "$out")" --exclude='*.safetensors' -czf "$part" "$(basename "$out")" 2>/dev/null
  # (mktemp's file is private; the archive was readable by all before.)
  if (($? <= 1)); then chmod 644 "$part" && mv -f "$part" "$archive"; else rm -f "$part"; fi
}
# A command the device tool ends at its limit may never reach the exit path (a kill it cannot catch),
# and only $OUT comes back: the archive then held the logs up to the last phase that ended. So the logs
# are archived every 20 s too, by a background saver started before the first phase and stopped at
# exit (its trap ends the sleep at once; a save under way finishes first), or when this shell ($$, in
# the saver too) is gone without an exit path.
saver() {
  local nap
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while kill -0 $$ 2>/dev/null; do
    sleep 20 &
    nap=$!
    wait "$nap"
    save
  done
}
saver_pid=""
finished=0
finish() {
  ((finished)) && return
  finished=1
  [ -n "$saver_pid" ] && kill "$saver_pid" 2>/dev/null && wait "$saver_pid" 2>/dev/null
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
  # Binaries built from other sources than this tree's would spend the command on code it does not
  # hold: stop (exit 3) unless GPU_CHECK_STALE_OK=1. A dry run reads the pack's record (it may have
  # left an older /tmp/trainer-gpu as it is) and only says so.
  if ((dry)); then
    if why=$(stale "$(tar -xJOf .device-pack/trainer-gpu.tar.xz trainer-gpu/SOURCE 2>/dev/null)"); then
      row "pack" "$why"
    else
      row "pack" "built from this tree's sources ($(source_hash | cut -c1-12))"
    fi
  elif why=$(stale "$(cat /tmp/trainer-gpu/SOURCE 2>/dev/null)"); then
    row "pack" "$why"
    [ "${GPU_CHECK_STALE_OK:-0}" = 1 ] || exit 3
    row "pack" "GPU_CHECK_STALE_OK=1: running the stale pack"
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
# (grep reads all of ldconfig's list: grep -q stopped early, ldconfig died of SIGPIPE, and under
# pipefail the row flipped between "system" and a directory from run to run.)
where() { ldconfig -p 2>/dev/null | grep "$1" >/dev/null && echo system && return; for d in ${LD_LIBRARY_PATH//:/ }; do ls "$d"/$1* >/dev/null 2>&1 && echo "$d" && return; done; echo "not found"; }
row "CUDA libraries" "cuDNN: $(where libcudnn.so); NCCL: $(where libnccl.so); cuBLAS: $(where libcublas.so)"

gpu=0
# (A driver in a bad state can hang nvidia-smi: 30 s at most.)
if ((!dry)) && timeout 30 nvidia-smi -L >"$out/nvidia-smi.log" 2>&1 && grep -q '^GPU ' "$out/nvidia-smi.log"; then gpu=1; fi
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
# running it when less than 10 s are left. GNU timeout runs its command in a process group of its own,
# so this timeout ending a script does not reach the `timeout ... process` the script runs: the command
# gets the moment it ends as GPU_CHECK_DEADLINE (date +%s) to bound its own timeouts by
# (scripts/bench-vs-pytorch.sh does).
run_bounded() {
  local t=$1 l
  shift
  l=$(left)
  ((l < 10)) && return 125
  ((l < t)) && t=$l
  GPU_CHECK_DEADLINE=$(($(date +%s) + t)) timeout --kill-after=5 "$t" "$@"
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
  # The tests' peers and readers (the Keras peer on the GPU above all) with this machine's python3
  # where it has PyTorch and numpy (its /usr/bin/python3 has neither: 28 skips on 2026-11-30).
  local py
  py=$(command -v python3 || true)
  if ((!dry)) && [ -n "$py" ] && "$py" -c 'import torch, numpy' >/dev/null 2>&1; then
    export TRAINER_PYTHON=$py
    row "  e2e" "TRAINER_PYTHON=$py ($("$py" -c 'import torch; print("PyTorch", torch.__version__)' 2>&1 | tail -1))"
  fi
  isolated e2e 3
}
sanitizer() {  # sanitizer <tool> <jobs> [run-isolated options]
  local tool=$1 jobs=$2
  shift 2
  if ((!dry)) && ! command -v compute-sanitizer >/dev/null; then row "compute-sanitizer $tool" "not found: skipped"; return; fi
  tag=-$tool isolated unit_ops "$jobs" --wrap "compute-sanitizer --tool $tool --error-exitcode 97" "$@"
}
phase_memcheck() { sanitizer memcheck 8; }
phase_racecheck() {
  # Racecheck runs kernels ~100x slower: the random-shape cases take 10 shapes each (the attention
  # ones ran past their 60 s with the default count, 2026-11-30).
  TRAINER_FUZZ_CASES=${TRAINER_FUZZ_CASES:-10} sanitizer racecheck 8 --filter "batchnorm|conv2d|dense|lstm|softmax|sigmoid_xent|pool|reduce|attention|layer_norm|optim_update|embedding"
}

# The phases of the shipped configs, the engine, the step graphs and the benchmarks.
source "$root/scripts/gpu-check-phases.sh"

saver </dev/null >/dev/null 2>&1 &
saver_pid=$!
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
