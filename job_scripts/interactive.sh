#!/usr/bin/env bash
# Interactive GPU session: allocates GPUs on a compute node with `srun --pty`, then, on that node,
# loads the site environment (job_scripts/env/), builds gpt2 for it, optionally trains CONFIG once on
# all the allocated GPUs (job_scripts/local.sh: one rank per GPU) and leaves you in a shell there.
#
#   job_scripts/interactive.sh [options] [CONFIG [gpt2 train options]]
#   job_scripts/interactive.sh -p GPU-shared -g 2 -t 1:00:00
#   job_scripts/interactive.sh -p GPU-shared -g 4 --pp 2 inputs/tiny.toml --set train.steps=20
#
# What it runs, e.g. on PSC Bridges-2:
#   srun --partition=GPU-shared --gres=gpu:2 --time=1:00:00 --nodes=1 --ntasks=1 --cpus-per-task=2 \
#        --pty bash job_scripts/interactive.sh --inside ...
# In the shell on the node: job_scripts/local.sh -n $GPT2_GPUS CONFIG [options] (run folders in
# runs/), nvidia-smi, and the build in $GPT2_BUILD_DIR. `exit` ends the allocation.
#
# Options:
#   -p, --partition P     partition (default $GPT2_PARTITION, else the cluster's default)
#   -g, --gpus N          GPUs = ranks (default 2)
#   --gres SPEC           GPU request as the site spells it (default gpu:N; Bridges-2: gpu:v100-32:N)
#   -t, --time T          time limit (default 1:00:00)
#   -c, --cpus-per-gpu C  CPU cores per GPU (default 1)
#   -A, --account A       account to charge
#   --pp P                pipeline stages for the CONFIG run (as local.sh --pp; default 1)
#   --no-build            do not build (use the existing GPT2_BIN)
#   --srun-args ARGS      extra srun options (word-split)
#   --dry-run             print the srun command instead of running it
#   -h, --help            this text
# Inside an allocation already (SLURM_JOB_ID set), it skips srun and does the rest right there.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/job_scripts/interactive.sh
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$SELF"; }

inside=0 partition=${GPT2_PARTITION:-} gpus=2 gres="" time=1:00:00 cpg=1 account="" pp=1 build=1
srun_args="" dry=0
while (($#)); do
  case $1 in
    --inside) inside=1; shift ;;
    -p | --partition) partition=${2?}; shift 2 ;;
    -g | --gpus) gpus=${2?}; shift 2 ;;
    --gres) gres=${2?}; shift 2 ;;
    -t | --time) time=${2?}; shift 2 ;;
    -c | --cpus-per-gpu) cpg=${2?}; shift 2 ;;
    -A | --account) account=${2?}; shift 2 ;;
    --pp) pp=${2?}; shift 2 ;;
    --no-build) build=0; shift ;;
    --srun-args) srun_args=${2?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "interactive: unknown option '$1' (try --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
for n in "$gpus" "$cpg" "$pp"; do
  [[ $n =~ ^[0-9]+$ ]] && ((n > 0)) || { echo "interactive: not a positive number: '$n'" >&2; exit 2; }
done

# ---- on the login node: allocate and come back here with --inside ----------------------------------
if ((!inside)) && [[ -z ${SLURM_JOB_ID:-} ]]; then
  cmd=(srun ${partition:+--partition="$partition"} --gres="${gres:-gpu:$gpus}" --time="$time"
    --nodes=1 --ntasks=1 --cpus-per-task=$((gpus * cpg)) ${account:+--account="$account"}
    --job-name=gpt2-interactive)
  # shellcheck disable=SC2206
  cmd+=($srun_args --pty bash "$SELF" --inside --gpus "$gpus" --pp "$pp")
  ((build)) || cmd+=(--no-build)
  cmd+=("$@")
  if ((dry)); then
    echo "${cmd[*]}"
    exit 0
  fi
  command -v srun >/dev/null || { echo "interactive: no srun here (not a Slurm login node?); on a workstation use job_scripts/local.sh" >&2; exit 2; }
  echo "interactive: ${cmd[*]}"
  export GPT2_ROOT=$ROOT
  exec "${cmd[@]}"
fi

# ---- on the compute node ----------------------------------------------------------------------------
source "$ROOT/job_scripts/lib/run_common.sh"
cd "$ROOT"
gpt2_load_site
export GPT2_GPUS=$gpus
# Further srun calls from this shell share the allocation with the shell's own step.
export SLURM_OVERLAP=1
gpt2_log "node $(hostname -s), job ${SLURM_JOB_ID:-none}, GPUs ${CUDA_VISIBLE_DEVICES:-${SLURM_STEP_GPUS:-?}}, site $(basename "$GPT2_SITE_FILE")"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null || true

if ((build)); then
  jobs=${SLURM_CPUS_PER_TASK:-2}
  if [[ ${GPT2_DEVICE:-cpu} == cuda ]]; then
    gpt2_log "building the CUDA version into $GPT2_BUILD_DIR (job_scripts/build_cuda.sh)"
    JOBS=$jobs "$ROOT/job_scripts/build_cuda.sh" "$GPT2_BUILD_DIR"
  else
    gpt2_log "building into $GPT2_BUILD_DIR"
    [[ -f $GPT2_BUILD_DIR/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$GPT2_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
    cmake --build "$GPT2_BUILD_DIR" -j "$jobs" --target gpt2
  fi
fi

if (($#)); then
  gpt2_log "training on $gpus rank(s): job_scripts/local.sh -n $gpus --pp $pp $*"
  "$ROOT/job_scripts/local.sh" -n "$gpus" --pp "$pp" "$@" || gpt2_warn "the run failed (status $?)"
fi

if [[ -t 0 ]]; then
  gpt2_log "shell on $(hostname -s) with the site environment; try: job_scripts/local.sh -n \$GPT2_GPUS inputs/tiny.toml; exit ends the allocation"
  exec bash -i
fi
