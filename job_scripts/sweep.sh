#!/usr/bin/env bash
# Scaling sweep: submits the same CONFIG at 1, 2, 4, ... ranks (job_scripts/dp.slurm), pipeline
# variants (pp.slurm at P ranks, hybrid.slurm with PP=P at the larger rank counts P divides), and
# one analysis job that starts when all of them have ended (--dependency=afterany) and makes the
# scaling figures from every trace.
#
#   job_scripts/sweep.sh [options] CONFIG [gpt2 train options]
#   job_scripts/sweep.sh --ranks "1 2 4 8" --pp "2 4" --tasks-per-node 4 inputs/tiny.toml --set train.steps=100
#   job_scripts/sweep.sh --dry-run --ranks "1 2 4 8 16" --tasks-per-node 8 \
#       --sbatch-args "-p GPU -A myacct" --analysis-sbatch-args "-p RM-shared" CONFIG
#
# Options:
#   --ranks LIST        rank counts for the data-parallel runs (default "1 2 4")
#   --pp LIST           pipeline depths P: pp.slurm at P ranks, hybrid.slurm (PP=P) at each rank
#                       count N > P with N % P == 0 (default "2"; "" for none)
#   --no-hybrid         no hybrid runs (only dp and pp)
#   --tasks-per-node N  ranks per node = GPUs per node (default 4); a job of R ranks gets
#                       ceil(R / N) nodes
#   --gpus-per-node G   GPUs to ask per node (default: the tasks per node, at most the job's ranks;
#                       0 on a CPU-only cluster)
#   --name NAME         sweep name: job names NAME-dp4, NAME-pp2, NAME-dp2pp2, NAME-analysis
#                       (default sweep-<config name>)
#   --dir DIR           sweep folder (default runs/NAME-<date-time>): the jobs' run folders,
#                       their Slurm output, plots/ and summary.txt of the analysis
#   --sbatch-args ARGS  extra sbatch options for every job (word-split), e.g. "-p GPU -t 1:00:00"
#   --analysis-sbatch-args ARGS   extra sbatch options for the analysis job only
#   --dry-run           print the sbatch commands, submit nothing
#   -h, --help          this text
# Internal: sweep.sh --analyze DIR is what the analysis job runs (or run it by hand afterwards).
set -euo pipefail

if [[ ${1:-} == --analyze ]]; then
  # Running as the analysis job: Slurm runs a copy of this script, so the repository comes from
  # GPT2_ROOT (exported by the submitting sweep).
  source "${GPT2_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}/job_scripts/lib/run_common.sh"
  dir=${2:?usage: sweep.sh --analyze SWEEP_DIR}
  cd "$dir"
  gpt2_load_site
  traces=()
  {
    printf '%-28s %6s %4s %4s %6s %8s %s\n' run ranks dp pp nodes seconds exit
    for job in */job.txt; do
      [[ -f $job ]] || continue
      run=$(dirname "$job")
      get() { sed -n "s/^$1=//p" "$job" | tail -n1; }
      printf '%-28s %6s %4s %4s %6s %8s %s\n' "$run" "$(get ranks)" "$(get dp)" "$(get pp)" \
        "$(get nodes)" "$(get seconds)" "$(get exit_code)"
    done
  } | tee summary.txt
  # The plots label each run by its trace's file name: link every run's trace.h5 as traces/<run>.h5.
  mkdir -p traces
  for t in */trace.h5; do
    [[ -s $t ]] || continue
    ln -sfn "../$t" "traces/$(dirname "$t").h5"
    traces+=("$PWD/traces/$(dirname "$t").h5")
  done
  # Epoch size for the scaling plot: the training shards of the runs' (common) configuration.
  if [[ -z ${GPT2_ANALYSIS_SHARDS:-} ]]; then
    for job in */job.txt; do
      [[ -f $job ]] || continue
      shards=$(gpt2_info_get config.data.train <"$(dirname "$job")/info.json")
      [[ -n $shards && $shards != /* ]] && shards=$(sed -n 's/^workdir=//p' "$job")/$shards
      [[ -n $shards ]] && export GPT2_ANALYSIS_SHARDS=$shards && break
    done
  fi
  gpt2_log "${#traces[@]} trace(s) in $PWD"
  gpt2_analyze "$PWD/plots" plot_scaling plot_loss report -- "${traces[@]}"
  exit 0
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; }
die() { echo "sweep: ERROR: $*" >&2; exit 2; }

ranks="1 2 4" pps="2" hybrid=1 tpn=4 gpn="" name="" dir="" sbatch_args="" analysis_args="" dry=0
while (($#)); do
  case $1 in
    --ranks) ranks=${2?}; shift 2 ;;
    --pp) pps=${2?}; shift 2 ;;
    --no-hybrid) hybrid=0; shift ;;
    --tasks-per-node) tpn=${2?}; shift 2 ;;
    --gpus-per-node) gpn=${2?}; shift 2 ;;
    --name) name=${2?}; shift 2 ;;
    --dir) dir=${2?}; shift 2 ;;
    --sbatch-args) sbatch_args=${2?}; shift 2 ;;
    --analysis-sbatch-args) analysis_args=${2?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option '$1' (try --help)" ;;
    *) break ;;
  esac
done
(($#)) || { usage >&2; die "no CONFIG given"; }
config=$1
shift
[[ -f $config ]] || die "config file '$config' not found"
for n in $ranks $pps $tpn ${gpn:-}; do [[ $n =~ ^[0-9]+$ ]] || die "not a whole number: '$n'"; done
((tpn > 0)) || die "--tasks-per-node must be positive"
name=${name:-sweep-$(basename "${config%.toml}")}
dir=${dir:-runs/$name-$(date +%Y%m%d-%H%M%S)}
if ((dry)); then
  dir_abs=$dir
  [[ $dir_abs == /* ]] || dir_abs=$PWD/$dir
else
  mkdir -p "$dir"
  dir_abs=$(cd "$dir" && pwd)
  cp "$config" "$dir_abs/config.toml"
fi

# The jobs' variables travel in sbatch's own environment with --export=ALL. (Named in --export,
# ALL,NAME=VALUE, they make slurmd run a login shell of the user on the node, su - USER, for every
# job, to merge the login environment beneath them: the user's profile at each job start.)
ids=()
# submit JOBNAME RANKS SCRIPT VAR=VALUE|"" [gpt2 train options]: one training job
submit() {
  local jobname=$1 n=$2 script=$3 extra_env=$4 nodes per gpus cmd id
  shift 4
  nodes=$(((n + tpn - 1) / tpn))
  per=$((n < tpn ? n : tpn))
  gpus=${gpn:-$tpn}
  ((gpus > per)) && gpus=$per
  cmd=(env "GPT2_ROOT=$ROOT" "GPT2_RUNS_DIR=$dir_abs" ${extra_env:+"$extra_env"})
  cmd+=(sbatch --parsable -J "$name-$jobname" -N "$nodes" -n "$n" --ntasks-per-node="$per")
  cmd+=(--gpus-per-node="$gpus" -o "$dir_abs/%x-%j.out" --export=ALL)
  # shellcheck disable=SC2206
  cmd+=($sbatch_args "$ROOT/job_scripts/$script" "$config" "$@")
  if ((dry)); then
    echo "${cmd[*]}"
    ids+=("DRYRUN_$jobname")
  else
    id=$("${cmd[@]}") || die "sbatch failed for $jobname: ${cmd[*]}"
    id=${id%%;*}
    ids+=("$id")
    echo "sweep: submitted $name-$jobname: job $id ($n ranks on $nodes node(s))"
  fi
}

shift_args=("$@")
for n in $ranks; do
  ((n > 0)) || continue
  submit "dp$n" "$n" dp.slurm "" "${shift_args[@]}"
done
for p in $pps; do
  ((p > 1)) || continue
  submit "pp$p" "$p" pp.slurm "" "${shift_args[@]}"
  ((hybrid)) || continue
  for n in $ranks; do
    ((n > p && n % p == 0)) && submit "dp$((n / p))pp$p" "$n" hybrid.slurm "PP=$p" "${shift_args[@]}"
  done
done
((${#ids[@]})) || die "nothing to submit (--ranks '$ranks', --pp '$pps')"

dep=$(IFS=:; echo "afterany:${ids[*]}")
cmd=(env "GPT2_ROOT=$ROOT" sbatch --parsable -J "$name-analysis" -N 1 -n 1 -t 00:15:00 --dependency="$dep"
  -o "$dir_abs/%x-%j.out" --export=ALL)
# shellcheck disable=SC2206
cmd+=($analysis_args "$ROOT/job_scripts/sweep.sh" --analyze "$dir_abs")
if ((dry)); then
  echo "${cmd[*]}"
  exit 0
fi
id=$("${cmd[@]}") || die "sbatch of the analysis job failed: ${cmd[*]}"
id=${id%%;*}
echo "sweep: analysis job $id runs after ${ids[*]}"
echo "sweep: results in $dir_abs (plots/, summary.txt); watch with: squeue -j $(IFS=,; echo "${ids[*]},$id")"
printf '%s\n' "${ids[@]}" "$id" >"$dir_abs/jobs.txt"
