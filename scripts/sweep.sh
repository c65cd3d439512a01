#!/usr/bin/env bash
# Grid sweep: trains every combination of the given config overrides, one run directory each,
# and writes one results.csv row per run.
#   scripts/sweep.sh [-j N] [--out DIR] CONFIG KEY=V1,V2,... [KEY=...]... [-- TRAINER_RUN_ARGS...]
#   scripts/sweep.sh configs/quickstart.yaml 'optimizer.lr=0.01,0.003' 'train.batch_size=32,64' -- --threads 1
# Runs go one after another, or N at a time with -j N (each trainer uses every core unless the
# arguments after -- say --threads). Each run is `trainer run CONFIG --set KEY=V... --run-dir
# SWEEP_DIR/<i>-<KEY=V_...> --json ARGS`, its console in SWEEP_DIR/<i>-<KEY=V_...>.log; values are
# split at commas (so a value cannot hold one) and passed as --set (parsed as YAML).
# SWEEP_DIR is --out DIR (new or empty) or runs/sweeps/<config name>-<YYYYmmdd-HHMMSS>.
# SWEEP_DIR/results.csv: index, one column per KEY, exit_code, run_dir, loss, accuracy, val_loss,
# val_accuracy, images_per_second, epochs (from the run's --json summary; empty when it has none).
# A failed run is a row with its exit code; the sweep goes on. Exit status: 0 when every run
# succeeded, 1 when any failed, 2 for a usage error, 130 when interrupted (no new runs start;
# running ones stop at their next step, as trainer does on SIGINT).
# Environment: TRAINER=path of the binary (default: build/trainer next to this script).
set -uo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
die() {
  echo "sweep: $*" >&2
  exit 2
}

jobs_n=1
out=""
while (($#)); do
  case $1 in
    -j) (($# >= 2)) || die "-j needs a number"; jobs_n=$2; shift 2 ;;
    -j*) jobs_n=${1#-j}; shift ;;
    --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; die "unknown option $1" ;;
    *) break ;;
  esac
done
[[ $jobs_n =~ ^[1-9][0-9]*$ ]] || die "-j wants a positive number, not '$jobs_n'"
(($#)) || { usage >&2; die "no CONFIG given"; }
config=$1
shift
[[ -f $config ]] || die "no config file $config"

# The grid: keys[k] takes count[k] values, found at vals[offset[k]...].
keys=() count=() offset=() vals=()
while (($#)) && [[ $1 != -- ]]; do
  [[ $1 =~ ^([A-Za-z0-9_.-]+)=(.*)$ ]] || die "'$1' is not KEY=V1,V2,..."
  key=${BASH_REMATCH[1]}
  IFS=, read -r -a list <<<"${BASH_REMATCH[2]},"  # the trailing comma keeps an empty last value visible
  ((${#list[@]})) || die "$key has no values"
  for v in "${list[@]}"; do [[ -n $v ]] || die "$key has an empty value in '$1'"; done
  keys+=("$key") count+=("${#list[@]}") offset+=("${#vals[@]}")
  vals+=("${list[@]}")
  shift
done
[[ ${1:-} == -- ]] && shift
extra=("$@")
((${#keys[@]})) || die "no KEY=V1,V2,... given"
total=1
for c in "${count[@]}"; do total=$((total * c)); done

trainer=${TRAINER:-$(dirname "$0")/../build/trainer}
[[ -x $trainer ]] || die "no trainer binary at $trainer (build it, or set TRAINER=path)"

if [[ -z $out ]]; then
  name=$(awk '/^name:/ { print $2; exit }' "$config")
  [[ -n $name ]] || name=$(basename "${config%.*}")
  base=runs/sweeps/$name-$(date +%Y%m%d-%H%M%S)
  out=$base
  for ((n = 2; ; ++n)); do [[ -e $out ]] || break; out=$base-$n; done
fi
[[ ! -e $out || -z $(ls -A "$out" 2>/dev/null) ]] || die "$out exists and is not empty"
mkdir -p "$out/.rows" || die "cannot create $out"

csv_cell() {  # quotes a cell holding a comma, a quote or a newline
  if [[ $1 == *[,\"$'\n']* ]]; then
    local q=${1//\"/\"\"}
    printf '"%s"' "$q"
  else
    printf '%s' "$1"
  fi
}

json_field() {  # json_field LINE KEY: the value of "KEY": in a one-line JSON object
  local re="\"$2\": ?(\"[^\"]*\"|[^,}]*)"
  [[ $1 =~ $re ]] || return 0
  local v=${BASH_REMATCH[1]}
  v=${v#\"}
  printf '%s' "${v%\"}"
}

metrics=(loss accuracy val_loss val_accuracy images_per_second epochs)
width=${#total}

run_one() {  # run_one INDEX: trains grid point INDEX, leaves its results row in .rows/INDEX
  local i=$1 rest=$1 k pairs=() sets=() cells=()
  for ((k = ${#keys[@]} - 1; k >= 0; --k)); do  # the last key varies fastest
    local v=${vals[offset[k] + rest % count[k]]}
    rest=$((rest / count[k]))
    pairs=("${keys[k]}=$v" "${pairs[@]}")
  done
  for ((k = 0; k < ${#pairs[@]}; ++k)); do
    sets+=(--set "${pairs[k]}")
    cells+=("$(csv_cell "${pairs[k]#*=}")")
  done
  local label
  label=$(IFS=_; printf '%s' "${pairs[*]}")
  label=${label//[^A-Za-z0-9._=+-]/_}
  local dir
  dir=$out/$(printf '%0*d' "$width" $((i + 1)))-${label:0:180}
  local start=$SECONDS
  "$trainer" run "$config" "${sets[@]}" --run-dir "$dir" --json "${extra[@]}" >"$dir.log" 2>&1 </dev/null
  local code=$?
  local summary
  summary=$(grep '^{"run_dir"' "$dir.log" | tail -n 1)
  local row
  row="$((i + 1)),$(IFS=,; printf '%s' "${cells[*]}"),$code,$(csv_cell "$dir")"
  for m in "${metrics[@]}"; do row+=",$(csv_cell "$(json_field "$summary" "$m")")"; done
  printf '%s\n' "$row" >"$out/.rows/$i"
  echo "$code" >"$out/.rows/$i.code"
  local what
  what="val_accuracy $(json_field "$summary" val_accuracy)"
  ((code == 0)) || what="$(grep -v '^{"run_dir"' "$dir.log" | tail -n 1)"
  echo "[$((i + 1))/$total] ${pairs[*]}: exit $code, $what ($((SECONDS - start)) s)"
}

stop=0
trap 'stop=1' INT TERM
echo "sweep: $total runs of $config, $jobs_n at a time, in $out"
for ((i = 0; i < total && !stop; ++i)); do
  if ((jobs_n == 1)); then
    run_one "$i"
  else
    while (($(jobs -rp | wc -l) >= jobs_n)) && ((!stop)); do wait -n; done
    ((stop)) || { run_one "$i" & }
  fi
done
while (($(jobs -rp | wc -l) > 0)); do wait; done

header="index"
for k in "${keys[@]}"; do header+=",$(csv_cell "$k")"; done
header+=",exit_code,run_dir,$(IFS=,; printf '%s' "${metrics[*]}")"
{
  echo "$header"
  for ((i = 0; i < total; ++i)); do [[ -f $out/.rows/$i ]] && cat "$out/.rows/$i"; done
} >"$out/results.csv"

done_runs=0 failed=0
for f in "$out"/.rows/*.code; do
  [[ -f $f ]] || continue
  done_runs=$((done_runs + 1))
  [[ $(<"$f") == 0 ]] || failed=$((failed + 1))
done
rm -rf "$out/.rows"
echo "sweep: $done_runs of $total runs, $failed failed; results in $out/results.csv"
((stop)) && exit 130
((failed == 0 && done_runs == total)) || exit 1
exit 0
