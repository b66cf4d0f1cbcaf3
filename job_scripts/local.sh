#!/usr/bin/env bash
# Runs gpt2 train with mpiexec on this machine (a workstation, or inside an interactive allocation),
# with the same run folder as the Slurm jobs: runs/local-<config>-<date>-<pid>/ (config copy,
# stdout.log, metrics.jsonl, trace.h5, plots/).
#
#   job_scripts/local.sh -n 2 CONFIG [gpt2 train options]           data parallel: dp=2
#   job_scripts/local.sh -n 2 --pp 2 CONFIG                          pipeline: pp=2
#   job_scripts/local.sh -n 4 --pp 2 CONFIG --set train.steps=10     hybrid: dp=2 x pp=2
#
# Options (before CONFIG):
#   -n, --ranks N   MPI ranks (default 1); one per GPU in a CUDA build, one per core otherwise
#   --pp P          pipeline stages (default 1); P must divide N, dp = N / P
#   --name NAME     run folder name prefix (default local-<config name>)
#   -h, --help      this text
# Environment: as the .slurm scripts (GPT2_BIN, GPT2_SITE, GPT2_RUNS_DIR, GPT2_RUN_DIR, ...;
# see job_scripts/README.md); GPT2_LAUNCHER=mpirun for Open MPI's launcher name.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/run_common.sh"

n=1 pp=1
while (($#)); do
  case $1 in
    -n | --ranks | -np) n=${2?}; shift 2 ;;
    -n[0-9]*) n=${1#-n}; shift ;;
    --pp) pp=${2?}; shift 2 ;;
    --name) export GPT2_RUN_NAME=${2?}; shift 2 ;;
    -h | --help) gpt2_usage "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
gpt2_is_uint "$n" && ((n > 0)) || gpt2_die 2 "-n needs a positive number of ranks, got '$n'"
gpt2_is_uint "$pp" && ((pp > 0)) || gpt2_die 2 "--pp needs a positive number of stages, got '$pp'"

export GPT2_NRANKS=$n PP=$pp
# MPICH's hydra: start the ranks here with fork, also inside a Slurm allocation (where it would
# otherwise launch through srun and compete with the allocation's own step).
if [[ -z ${GPT2_LAUNCH_ARGS+x} ]] && "${GPT2_LAUNCHER:-mpiexec}" --version 2>/dev/null | grep -qi hydra; then
  export GPT2_LAUNCH_ARGS="-launcher fork"
fi
if ((pp == 1)); then
  gpt2_job dp "$@"
elif ((pp == n)); then
  gpt2_job pp "$@"
else
  gpt2_job hybrid "$@"
fi
