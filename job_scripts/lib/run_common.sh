# shellcheck shell=bash
# Shared logic of job_scripts/{dp,pp,hybrid}.slurm, local.sh, sweep.sh and interactive.sh.
# Sourced, never run. It defines functions only (and GPT2_ROOT); nothing happens until one is called.
#
#   gpt2_job MODE CONFIG [gpt2 train options]     one training run: MODE is dp | pp | hybrid
#
# gpt2_job reads the allocation (SLURM_NTASKS, or GPT2_NRANKS for local.sh), derives parallel.dp and
# parallel.pp from it, checks the resulting configuration with `gpt2 info` before starting any rank,
# launches `gpt2 train` with srun or mpiexec and leaves one run folder:
#
#   runs/<name>-<id>/          name and id: the Slurm job's (local.sh: local-<config>, a time stamp)
#     config.toml              copy of CONFIG as given
#     config.effective.toml    the resolved configuration, every --set applied (gpt2 info)
#     info.json                `gpt2 info --json` of it: grid, stage split, model, every key
#     job.txt                  what ran where: job, nodes, ranks, dp x pp, command, site, exit status
#                              (and the launcher's own: launcher_exit_code)
#     stdout.log               everything the job printed (also in Slurm's output file)
#     metrics.jsonl            one JSON object per step (--metrics-jsonl)
#     trace.h5                 HDF5 trace (trace.file)
#     plots/                   PNGs and report from analysis/*.py, made at the end (plots.log)
#     checkpoints/             checkpoints, in a Slurm job whose deck sets no checkpoint.dir
#     exit_code                the exit status of the training
#
# Stopping early: SIGUSR1 to the batch shell (the scripts' `#SBATCH --signal=B:USR1@N`, sent N
# seconds before the time limit), and outside Slurm SIGTERM or SIGUSR1 to this script, are passed
# to the launcher, which passes them to every rank: the run finishes its step, checkpoints and exits
# with status 4. A Slurm job stopped that way by SIGUSR1 requeues itself (scontrol requeue); the
# requeued run (same job id, same run folder) resumes with checkpoint.resume = "auto". So does a
# multi-node job submitted with --requeue that lost a node: Slurm ends it as NODE_FAIL and requeues
# it (when MPI noticed the loss first, the script names the node and waits for Slurm to do so).
# Environment (all optional; sbatch passes the submitting shell's environment to the job):
#   GPT2_ROOT        the repository (found automatically)
#   GPT2_SITE        env file in job_scripts/env/ to source (default: by hostname, see gpt2_load_site)
#   GPT2_BIN         the gpt2 executable (default: the site's, else $GPT2_ROOT/build/bin/gpt2)
#   GPT2_RUNS_DIR    parent of run folders (default: ./runs, i.e. the submit folder's runs/)
#   GPT2_RUN_DIR     exact run folder (overrides GPT2_RUNS_DIR and the name)
#   PP               hybrid only: pipeline stages (default 2); dp = tasks / PP
#   GPT2_LAUNCHER    srun | mpiexec (default: srun inside Slurm, mpiexec outside)
#   GPT2_SRUN_MPI    srun --mpi= plugin (default pmi2: MPICH; the site file may change it)
#   GPT2_LAUNCH_ARGS extra launcher arguments (word-split), e.g. "--cpu-bind=cores"
#   GPT2_BLAS_THREADS host threads per rank, Kokkos and BLAS (default: Slurm's cpus per task, else cores / ranks)
#   GPT2_PLOTS       0: make no plots at the end
#   GPT2_PYTHON      python with numpy, h5py, matplotlib (default: the first python3 that has them)
#   GPT2_REQUEUE     0: a Slurm job stopped by SIGUSR1 does not requeue itself (default 1)
# Exit status: that of `gpt2 train` (4: stopped by a signal, checkpoint written); 2 when the run was
# refused before launching (bad configuration, ranks that do not match the allocation, missing
# executable).

# ---- locating the repository ------------------------------------------------------------------
# A batch script runs from a copy in Slurm's spool folder, so its own path says nothing. This file
# is sourced by its real path, though, which gives the repository.
if [[ -z ${GPT2_ROOT:-} || ! -f $GPT2_ROOT/job_scripts/lib/run_common.sh ]]; then
  GPT2_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fi
export GPT2_ROOT

gpt2_log() { echo "[gpt2-job] $*"; }
gpt2_warn() { echo "[gpt2-job] WARNING: $*" >&2; }
gpt2_die() { # gpt2_die STATUS MESSAGE...
  local rc=$1
  shift
  echo "[gpt2-job] ERROR: $*" >&2
  gpt2_untee
  exit "$rc"
}

# While a job runs, its stdout and stderr also go to RUN_DIR/stdout.log through two tee processes.
# gpt2_untee puts the original streams back and waits for the tees to drain: Slurm ends a job's
# left-over processes as soon as the batch script exits, which would lose the last lines.
GPT2_TEE_PIDS=()
# The tees ignore SIGINT and SIGTERM, which reach the whole process group (Ctrl-C, a stop), so that
# the last lines of a stopped run still get written.
gpt2_tee() {
  exec 3>&1 4>&2
  exec 1> >(trap '' INT TERM; exec tee -a "$1" >&3)
  GPT2_TEE_PIDS+=($!)
  exec 2> >(trap '' INT TERM; exec tee -a "$1" >&4)
  GPT2_TEE_PIDS+=($!)
}
gpt2_untee() {
  ((${#GPT2_TEE_PIDS[@]})) || return 0
  exec 1>&3 2>&4 3>&- 4>&-
  local p
  for p in "${GPT2_TEE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  GPT2_TEE_PIDS=()
}

# Prints the usage text: the comment block at the top of FILE (after the shebang, up to the first
# #SBATCH or other line that is not a comment), without the '# '.
gpt2_usage() {
  awk 'NR == 1 && /^#!/ { next } /^#SBATCH/ { exit } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$1"
}

# ---- site environment ---------------------------------------------------------------------------
# Picks job_scripts/env/<site>: GPT2_SITE if set (a name there, or a path to a file); else a file
# named after the short hostname; else by the fully qualified hostname (*.bridges2.psc.edu ->
# psc-bridges2); else debian-cuda where an NVIDIA GPU answers, debian otherwise.
gpt2_pick_site() {
  local envdir=$GPT2_ROOT/job_scripts/env host fqdn
  if [[ -n ${GPT2_SITE:-} ]]; then
    echo "$GPT2_SITE"
    return
  fi
  host=$(hostname -s 2>/dev/null || hostname)
  fqdn=$(hostname 2>/dev/null)
  # (hostname -f asks the resolver: bounded, in case DNS is slow on a compute node)
  [[ $fqdn == *.* ]] || fqdn=$(timeout 3 hostname -f 2>/dev/null || echo "$fqdn")
  if [[ -f $envdir/$host ]]; then
    echo "$host"
  elif [[ $fqdn == *bridges2* || $fqdn == *.psc.edu ]]; then
    echo psc-bridges2
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo debian-cuda
  else
    echo debian
  fi
}

gpt2_load_site() {
  local site file
  site=$(gpt2_pick_site)
  if [[ $site == */* ]]; then file=$site; else file=$GPT2_ROOT/job_scripts/env/$site; fi
  [[ -f $file ]] || gpt2_die 2 "site environment '$site' not found ($file); set GPT2_SITE to one of: $(ls "$GPT2_ROOT/job_scripts/env" | paste -sd' ')"
  GPT2_SITE_FILE=$file
  # shellcheck disable=SC1090
  source "$file" || gpt2_die 2 "sourcing the site environment $file failed"
  : "${GPT2_BIN:=$GPT2_ROOT/build/bin/gpt2}"
  export GPT2_BIN
}

# ---- python for the analysis scripts -----------------------------------------------------------
# GPT2_PYTHON is used as given (it may be a wrapper on purpose). A python3 found on PATH is replaced
# by the interpreter it runs (sys.executable, when that is here), so that later calls skip a wrapper
# such as a pyenv shim (about 15 shell starts a call). The modules are looked up, not imported:
# importing matplotlib costs about half a CPU second.
gpt2_python() {
  local p exe
  for p in ${GPT2_PYTHON:-} python3 /usr/bin/python3; do
    command -v "$p" >/dev/null 2>&1 || continue
    exe=$("$p" -c '
import importlib.util, sys
if any(importlib.util.find_spec(m) is None for m in ("numpy", "h5py", "matplotlib")):
    sys.exit(1)
print(sys.executable)' 2>/dev/null) || continue
    if [[ $p != "${GPT2_PYTHON:-}" && -n $exe && -x $exe ]]; then echo "$exe"; else echo "$p"; fi
    return 0
  done
  return 1
}

# gpt2_script_takes SCRIPT OPTION: analysis/SCRIPT.py defines OPTION (an argparse add_argument line).
gpt2_script_takes() { grep -q -- "add_argument(\"$2\"" "$GPT2_ROOT/analysis/$1.py"; }

# gpt2_analyze OUTDIR SCRIPT... -- TRACE...: runs each analysis/SCRIPT.py that exists on the traces.
# A script that defines --out writes its files into OUTDIR; one without (report.py prints a table)
# has its output saved as OUTDIR/SCRIPT.txt and shown. (What a script takes is read from its
# argparse lines, not its --help: each python start with matplotlib costs about half a CPU second.)
# Extras when the script takes them:
# --peak-tflops $GPT2_PEAK_TFLOPS (MFU), --shards $GPT2_ANALYSIS_SHARDS (epoch size for scaling),
# --group-by ${GPT2_SCALING_GROUP_BY:-pp} (plot_scaling: one line per pipeline depth).
# A missing script or python is a note, a failing script a warning: never fatal.
gpt2_analyze() {
  local out=$1 py s scripts=() traces args
  shift
  while (($#)) && [[ $1 != -- ]]; do scripts+=("$1"); shift; done
  shift
  traces=("$@")
  ((${#traces[@]})) || { gpt2_log "no trace to analyse; plots skipped"; return 0; }
  if [[ ${GPT2_PLOTS:-1} == 0 ]]; then gpt2_log "GPT2_PLOTS=0: plots skipped"; return 0; fi
  if ! py=$(gpt2_python); then
    gpt2_log "note: no python3 with numpy, h5py and matplotlib (job_scripts/setup.sh installs them); plots skipped"
    return 0
  fi
  mkdir -p "$out"
  for s in "${scripts[@]}"; do
    if [[ ! -f $GPT2_ROOT/analysis/$s.py ]]; then
      gpt2_log "note: analysis/$s.py not found; skipped"
      continue
    fi
    args=()
    [[ -n ${GPT2_PEAK_TFLOPS:-} ]] && gpt2_script_takes "$s" --peak-tflops && args+=(--peak-tflops "$GPT2_PEAK_TFLOPS")
    [[ -n ${GPT2_ANALYSIS_SHARDS:-} ]] && gpt2_script_takes "$s" --shards && args+=(--shards "$GPT2_ANALYSIS_SHARDS")
    [[ $s == plot_scaling ]] && gpt2_script_takes "$s" --group-by && args+=(--group-by "${GPT2_SCALING_GROUP_BY:-pp}")
    if gpt2_script_takes "$s" --out; then
      if MPLBACKEND=Agg "$py" "$GPT2_ROOT/analysis/$s.py" "${traces[@]}" "${args[@]}" --out "$out" \
        >>"$out/plots.log" 2>&1 </dev/null; then
        gpt2_log "analysis/$s.py -> $out"
      else
        gpt2_warn "analysis/$s.py failed (status $?); see $out/plots.log"
      fi
    elif MPLBACKEND=Agg "$py" "$GPT2_ROOT/analysis/$s.py" "${traces[@]}" "${args[@]}" \
      >"$out/$s.txt" 2>>"$out/plots.log" </dev/null; then
      gpt2_log "analysis/$s.py -> $out/$s.txt"
      cat "$out/$s.txt"
    else
      gpt2_warn "analysis/$s.py failed (status $?); see $out/plots.log"
    fi
  done
}

# ---- helpers ------------------------------------------------------------------------------------
# Prints the value at each dotted PATH (e.g. config.parallel.dp, grid.world_size) of the JSON object
# `gpt2 info --json` printed, read from stdin, a line each (a list: its items joined by spaces; a
# missing PATH: an empty line). One python start for all of them: a job reads several. Only the
# standard library is needed, so the system's interpreter serves where there is one: it starts
# without a wrapper (a pyenv shim is about 15 shell starts a call).
gpt2_info_get() {
  local py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" -c '
import json, sys
v0 = json.load(sys.stdin)
for path in sys.argv[1:]:
    v = v0
    for k in path.split("."):
        v = v.get(k, "") if isinstance(v, dict) else ""
    print(" ".join(map(str, v)) if isinstance(v, list) else v)' "$@"
}

gpt2_is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# The sum of a Slurm per-node count list: "2(x3),1" -> 7; nothing for an empty or odd one.
gpt2_sum_per_node() {
  local sum=0 item n r
  [[ -n $1 ]] || return 0
  for item in ${1//,/ }; do
    if [[ $item =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
      n=${BASH_REMATCH[1]} r=${BASH_REMATCH[2]}
    elif [[ $item =~ ^[0-9]+$ ]]; then
      n=$item r=1
    else
      return 0
    fi
    sum=$((sum + n * r))
  done
  echo "$sum"
}

# Nodes of this job's allocation that Slurm sees as lost: not answering (sinfo's state ends in
# '*', slurmctld pings every SlurmdTimeout/3), DOWN or FAIL. Asks for up to 10 s (a node that just
# died is flagged at the next ping); prints them, or nothing.
gpt2_lost_nodes() {
  local i lost
  for i in $(seq 10); do
    lost=$(sinfo -h -N -n "${SLURM_JOB_NODELIST:-}" -o '%N %T' 2>/dev/null |
      awk '$2 ~ /[*]$/ || $2 ~ /^(down|fail)/ { print $1 }' | sort -u | paste -sd' ')
    [[ -n $lost ]] && { echo "$lost"; return 0; }
    sleep 1
  done
}

# ---- launching ----------------------------------------------------------------------------------
# gpt2_launch IN_SLURM CMD...: runs the launcher in the background and waits for it, so that this
# shell can pass signals on (bash runs a trap only between commands, never during a foreground
# one). SIGUSR1 goes to the launcher (Slurm's `--signal=B:USR1@N` reaches only the batch shell);
# outside Slurm SIGTERM does too. In a job Slurm signals the job steps itself (scancel, time limit),
# and srun answers a SIGTERM of its own by SIGKILL to every rank: not passed on there. SIGINT from
# a terminal reaches the launcher directly. Returns the launcher's exit status.
gpt2_launch() {
  local in_slurm=$1 pid rc
  shift
  # stdin from /dev/null: srun and mpiexec would forward the terminal's input to rank 0.
  "$@" </dev/null &
  pid=$!
  trap 'GPT2_STOP_SIGNAL=USR1; kill -USR1 '"$pid"' 2>/dev/null' USR1
  if ((in_slurm)); then
    trap 'GPT2_STOP_SIGNAL=TERM' TERM
  else
    trap 'GPT2_STOP_SIGNAL=TERM; kill -TERM '"$pid"' 2>/dev/null' TERM
  fi
  trap 'GPT2_STOP_SIGNAL=INT' INT
  while :; do
    rc=0
    wait "$pid" || rc=$?
    # A trapped signal ends `wait` early (status > 128) while the launcher still runs: wait again.
    ((rc > 128)) && kill -0 "$pid" 2>/dev/null && continue
    break
  done
  trap - TERM INT
  return "$rc"
}

# ---- the job --------------------------------------------------------------------------------------
gpt2_job() {
  local mode=$1
  shift
  local caller=${BASH_SOURCE[1]:-$0}
  # A time-limit warning (SIGUSR1) may come before the launch: remember it (its default would end
  # this shell).
  GPT2_STOP_SIGNAL=""
  trap 'GPT2_STOP_SIGNAL=USR1' USR1
  case ${1:-} in
    -h | --help) gpt2_usage "$caller"; exit 0 ;;
    '') gpt2_usage "$caller" >&2; gpt2_die 2 "no CONFIG given" ;;
  esac
  local config=$1
  shift
  local user_args=("$@")
  [[ -f $config ]] || gpt2_die 2 "config file '$config' not found (relative paths are taken from $PWD)"

  gpt2_load_site

  # -- the allocation
  # alloc / hint: how messages name the rank budget and the way to raise it
  local ntasks launcher in_slurm=0 alloc="local.sh -n" hint="run with -n"
  if [[ -n ${SLURM_JOB_ID:-} && -z ${GPT2_NRANKS:-} ]]; then
    in_slurm=1 alloc="the allocation" hint="submit with -n"
    # The tasks of the allocation as Slurm laid it out at launch (SLURM_TASKS_PER_NODE, "2(x3),1");
    # SLURM_NTASKS is the submission's, stale when a pending job was resized (a requeued job moved
    # to fewer nodes: scontrol update JobId=J NumNodes=1 NumTasks=2 NumCPUs=2).
    local laid_out
    laid_out=$(gpt2_sum_per_node "${SLURM_TASKS_PER_NODE:-}")
    ntasks=${laid_out:-${SLURM_NTASKS:-${SLURM_NPROCS:-}}}
    if [[ -n $laid_out && -n ${SLURM_NTASKS:-} && $laid_out != "$SLURM_NTASKS" ]]; then
      gpt2_log "the allocation has $laid_out task(s) (SLURM_TASKS_PER_NODE=$SLURM_TASKS_PER_NODE), not the $SLURM_NTASKS it was submitted with: the job was resized"
      export SLURM_NTASKS=$laid_out SLURM_NPROCS=$laid_out
    fi
    if [[ -z $ntasks && -n ${SLURM_NTASKS_PER_NODE:-} ]]; then
      local per_node=${SLURM_NTASKS_PER_NODE%%[(]*} # "2(x3)" -> 2
      ntasks=$((${SLURM_JOB_NUM_NODES:-1} * per_node))
    fi
    [[ -n $ntasks ]] || gpt2_die 2 "cannot tell the number of tasks of job $SLURM_JOB_ID (no SLURM_NTASKS); submit with -n or --ntasks-per-node"
    launcher=${GPT2_LAUNCHER:-srun}
  else
    ntasks=${GPT2_NRANKS:-1}
    launcher=${GPT2_LAUNCHER:-mpiexec}
  fi
  gpt2_is_uint "$ntasks" && ((ntasks > 0)) || gpt2_die 2 "bad number of tasks '$ntasks'"

  # -- dp x pp from the allocation
  local dp pp
  case $mode in
    dp) dp=$ntasks pp=1 ;;
    pp) dp=1 pp=$ntasks ;;
    hybrid)
      pp=${PP:-2}
      gpt2_is_uint "$pp" && ((pp > 0)) || gpt2_die 2 "hybrid: PP must be a positive integer, got '$pp'"
      ((pp <= ntasks)) ||
        gpt2_die 2 "hybrid: PP=$pp pipeline stages need at least $pp ranks, but $alloc gives $ntasks ($hint $pp or more, or lower PP)"
      ((ntasks % pp == 0)) ||
        gpt2_die 2 "hybrid: PP=$pp does not divide the $ntasks ranks that $alloc gives (dp = ranks / PP must be whole; use a multiple of $pp)"
      dp=$((ntasks / pp))
      ;;
    *) gpt2_die 2 "unknown mode '$mode' (dp | pp | hybrid)" ;;
  esac

  # -- the run folder
  local name id run_dir
  if ((in_slurm)); then
    name=${SLURM_JOB_NAME:-gpt2}
    id=$SLURM_JOB_ID${SLURM_ARRAY_TASK_ID:+_$SLURM_ARRAY_TASK_ID}
  else
    name=${GPT2_RUN_NAME:-local-$(basename "${config%.toml}")}
    id=$(date +%Y%m%d-%H%M%S)-$$
  fi
  run_dir=${GPT2_RUN_DIR:-${GPT2_RUNS_DIR:-$PWD/runs}/$name-$id}
  mkdir -p "$run_dir" || gpt2_die 2 "cannot create the run folder $run_dir"
  run_dir=$(cd "$run_dir" && pwd)
  GPT2_RUN_DIR=$run_dir

  # Everything printed from here on also goes to the run folder.
  gpt2_tee "$run_dir/stdout.log"
  cp "$config" "$run_dir/config.toml"

  # -- the arguments: ours first, so that the user's own --set / --metrics-jsonl win
  local sets=(--set "parallel.dp=$dp" --set "parallel.pp=$pp" --set "trace.file=$run_dir/trace.h5")
  # Host threads per rank, Kokkos' and the BLAS's alike (they take turns on the rank's cores): the
  # site's GPT2_BLAS_THREADS; else, in a batch job, the cores of
  # each task (--cpus-per-task; without it, the node's cores over its tasks); locally, the cores
  # (of this allocation, if any) over the ranks.
  local threads=${GPT2_BLAS_THREADS:-} cores per_node
  if [[ -z $threads ]]; then
    if ((in_slurm)) && [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
      threads=$SLURM_CPUS_PER_TASK
    elif ((in_slurm)); then
      per_node=${SLURM_NTASKS_PER_NODE%%[(]*}
      gpt2_is_uint "${per_node:-x}" || per_node=$(((ntasks + ${SLURM_JOB_NUM_NODES:-1} - 1) / ${SLURM_JOB_NUM_NODES:-1}))
      cores=${SLURM_CPUS_ON_NODE:-1}
      cores=${cores%%[(,]*}
      threads=$((cores / per_node))
    else
      cores=${SLURM_CPUS_PER_TASK:-$(nproc)}
      threads=$((cores / ntasks))
    fi
    ((threads > 0)) || threads=1
  fi
  sets+=(--set "parallel.host_threads=$threads" --set "parallel.blas_threads=$threads")
  export OPENBLAS_NUM_THREADS=$threads
  local user_sets=() metrics_given=0 i=0 a
  while ((i < ${#user_args[@]})); do
    a=${user_args[i]}
    case $a in
      --set=*) user_sets+=("$a") ;;
      --set)
        # CLI11 takes every following word that is not an option as another value.
        while ((i + 1 < ${#user_args[@]})) && [[ ${user_args[i + 1]} != -* ]]; do
          i=$((i + 1))
          user_sets+=(--set "${user_args[i]}")
        done
        ;;
      --metrics-jsonl | --metrics-jsonl=*) metrics_given=1 ;;
    esac
    i=$((i + 1))
  done
  local train_args

  # -- check before launching anything
  [[ -x $GPT2_BIN ]] ||
    gpt2_die 2 "gpt2 executable not found: $GPT2_BIN (build it: cmake --build build, or set GPT2_BIN)"
  local info n_sets=${#sets[@]}
  if ! info=$("$GPT2_BIN" info "$config" "${sets[@]}" "${user_sets[@]}" --json 2>&1); then
    echo "$info" >&2
    gpt2_die 2 "the configuration $config (with the options above) is not valid; nothing was launched"
  fi
  # In Slurm a deck without checkpoint.dir gets the run folder's, so that a stop before the time
  # limit saves; a requeued job (same id, same run folder) continues from its checkpoints.
  local restarts=${SLURM_RESTART_COUNT:-0}
  gpt2_is_uint "$restarts" || restarts=0
  if ((in_slurm)) && [[ -z $(gpt2_info_get config.checkpoint.dir <<<"$info") ]]; then
    sets+=(--set "checkpoint.dir=$run_dir/checkpoints")
  fi
  ((in_slurm && restarts > 0)) && sets+=(--set checkpoint.resume=auto)
  if ((${#sets[@]} != n_sets)) && ! info=$("$GPT2_BIN" info "$config" "${sets[@]}" "${user_sets[@]}" --json 2>&1); then
    echo "$info" >&2
    gpt2_die 2 "the configuration $config (with the options above) is not valid; nothing was launched"
  fi
  train_args=("${sets[@]}" "${user_args[@]}")
  ((metrics_given)) || train_args+=(--metrics-jsonl "$run_dir/metrics.jsonl")
  printf '%s\n' "$info" >"$run_dir/info.json"
  local eff_dp eff_pp eff_cp eff_tp trace nranks
  # (config_toml last: it spans lines, and the rest of the output is it; an older gpt2 has no cp)
  { read -r eff_dp && read -r eff_pp && read -r eff_cp && read -r eff_tp && IFS= read -r trace &&
    cat >"$run_dir/config.effective.toml"; } < <(gpt2_info_get grid.dp grid.pp grid.cp grid.tp \
    config.trace.file config_toml <<<"$info")
  gpt2_is_uint "$eff_dp" && gpt2_is_uint "$eff_pp" && gpt2_is_uint "$eff_tp" ||
    gpt2_die 2 "could not read the grid (parallel.dp / pp / tp) from \`gpt2 info --json\`"
  gpt2_is_uint "$eff_cp" || eff_cp=1
  nranks=$((eff_dp * eff_pp * eff_cp * eff_tp))
  local grid="parallel.dp=$eff_dp x parallel.pp=$eff_pp"
  ((eff_cp > 1)) && grid+=" x parallel.cp=$eff_cp"
  ((eff_tp > 1)) && grid+=" x parallel.tp=$eff_tp"
  if ((nranks > ntasks)); then
    gpt2_die 2 "the run asks for $nranks ranks ($grid) but $alloc gives only $ntasks; $hint $nranks, or drop the --set that changes the grid"
  elif ((nranks < ntasks)); then
    gpt2_warn "the run uses $nranks ranks ($grid) of the $ntasks that $alloc gives; the others stay idle"
  fi
  if [[ ${GPT2_DEVICE:-} == cuda && -n ${SLURM_GPUS_ON_NODE:-} && -n ${SLURM_NTASKS_PER_NODE:-} ]]; then
    local tpn=${SLURM_NTASKS_PER_NODE%%[(]*}
    gpt2_is_uint "$tpn" && ((tpn > SLURM_GPUS_ON_NODE)) &&
      gpt2_warn "$tpn tasks per node but $SLURM_GPUS_ON_NODE GPUs per node: ranks will share GPUs"
  fi

  # -- launch
  local cmd
  case $launcher in
    srun)
      cmd=(srun --mpi="${GPT2_SRUN_MPI:-pmi2}" --ntasks="$nranks" --kill-on-bad-exit=1)
      [[ -n ${SLURM_CPUS_PER_TASK:-} ]] && cmd+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
      ;;
    mpiexec | mpirun)
      cmd=("$launcher" -n "$nranks")
      ;;
    *) gpt2_die 2 "GPT2_LAUNCHER must be srun or mpiexec, got '$launcher'" ;;
  esac
  # shellcheck disable=SC2206
  cmd+=(${GPT2_LAUNCH_ARGS:-} "$GPT2_BIN" train "$config" "${train_args[@]}")

  {
    echo "job_name=$name"
    echo "job_id=$id"
    echo "mode=$mode"
    echo "site=$GPT2_SITE_FILE"
    echo "host=$(hostname)"
    echo "nodes=${SLURM_JOB_NUM_NODES:-1}"
    echo "nodelist=${SLURM_JOB_NODELIST:-$(hostname -s)}"
    echo "tasks=$ntasks"
    echo "ranks=$nranks"
    echo "dp=$eff_dp"
    echo "pp=$eff_pp"
    echo "cp=$eff_cp"
    echo "tp=$eff_tp"
    echo "gpus_on_node=${SLURM_GPUS_ON_NODE:-}"
    echo "cpus_per_task=${SLURM_CPUS_PER_TASK:-}"
    echo "host_threads=$threads"
    echo "blas_threads=$threads"
    echo "restarts=$restarts"
    echo "workdir=$PWD"
    echo "gpt2=$GPT2_BIN"
    echo "version=$("$GPT2_BIN" --version 2>/dev/null)"
    echo "command=${cmd[*]}"
    echo "start=$(date -Is)"
  } >"$run_dir/job.txt"

  gpt2_log "run folder: $run_dir"
  gpt2_log "$mode on $ntasks tasks (${SLURM_JOB_NUM_NODES:-1} node(s)): parallel.dp=$eff_dp parallel.pp=$eff_pp, site $(basename "$GPT2_SITE_FILE"), launcher $launcher"
  gpt2_log "${cmd[*]}"
  local rc=0 t0=$SECONDS log_at stopped_by="" i launcher_rc=""
  log_at=$(($(stat -c %s "$run_dir/stdout.log" 2>/dev/null || echo 0) + 1))
  if [[ $GPT2_STOP_SIGNAL == USR1 ]]; then
    gpt2_log "SIGUSR1 came before the launch: nothing ran"
    rc=4 stopped_by=SIGUSR1
  else
    gpt2_launch "$in_slurm" "${cmd[@]}" || rc=$?
    launcher_rc=$rc
    # How a stop ended, from the run's own last line (rank 0: "gpt2 train: stopped by SIGxxx ...";
    # the tee may still be writing it). srun and MPICH's mpiexec report the ranks' 4 themselves (under
    # mpiexec thanks to each rank's exit witness, see README "Reliability"); a launcher that says 0
    # for a run that printed that line (another MPI's, an older gpt2) is overruled, with a warning.
    for i in $(seq 20); do
      stopped_by=$(tail -c "+$log_at" "$run_dir/stdout.log" 2>/dev/null |
        sed -n 's/^gpt2 train: stopped by \(SIG[A-Z0-9]*\).*/\1/p' | tail -n1)
      [[ -n $stopped_by ]] && break
      ((rc == 4)) || [[ -n $GPT2_STOP_SIGNAL ]] || break  # only a stopped run has that line
      sleep 0.1
    done
    if ((rc == 0)) && [[ -n $stopped_by ]]; then
      rc=4
      gpt2_warn "$launcher said 0 for a run stopped by $stopped_by: status 4 (from the run's last line)"
    fi
  fi
  echo "$rc" >"$run_dir/exit_code"
  {
    echo "end=$(date -Is)"
    echo "seconds=$((SECONDS - t0))"
    echo "launcher_exit_code=$launcher_rc"
    echo "exit_code=$rc"
  } >>"$run_dir/job.txt"
  if ((rc == 0)); then
    gpt2_log "training finished in $((SECONDS - t0)) s"
  elif ((rc == 4)); then
    gpt2_log "training stopped by ${stopped_by:-a signal} after $((SECONDS - t0)) s (status 4; its last line says what it saved)"
  else
    gpt2_warn "training failed with status $rc after $((SECONDS - t0)) s"
  fi

  # -- a node lost: its ranks died with it. When MPI noticed the dead peers before Slurm noticed
  # the node, say so here, on a node that survived, and wait for Slurm: once the node is DOWN
  # (SlurmdTimeout) it ends the job as NODE_FAIL, this script included, and requeues a --requeue
  # job, which resumes from its newest checkpoint. (Requeueing it from here before the node is
  # DOWN made Slurm 22.05 start the requeued job without its GPUs.)
  if ((in_slurm && ${SLURM_JOB_NUM_NODES:-1} > 1)) && [[ ! $rc =~ ^(0|2|4|5)$ ]]; then
    local lost wait_s
    lost=$(gpt2_lost_nodes)
    if [[ -n $lost ]]; then
      gpt2_warn "node(s) $lost of this job stopped answering Slurm: a node was lost, and the run with it (status $rc)"
      wait_s=$(scontrol show config 2>/dev/null | sed -n 's/^SlurmdTimeout *= *\([0-9]*\).*/\1/p')
      wait_s=$((2 * ${wait_s:-300} + 30))
      gpt2_log "waiting up to $wait_s s for Slurm to set it DOWN and end the job (NODE_FAIL; requeued if submitted with --requeue)"
      sleep "$wait_s"
      gpt2_warn "Slurm did not end the job within $wait_s s: not requeued (resubmit; checkpoint.resume = \"auto\" continues)"
    fi
  fi

  # -- requeue: the time-limit warning stopped the run; the requeued job resumes from its checkpoint
  if ((rc == 4 && in_slurm)) && [[ $stopped_by == SIGUSR1 && ${GPT2_REQUEUE:-1} != 0 ]]; then
    gpt2_log "requeueing job $SLURM_JOB_ID (restart $((restarts + 1))): it will resume from its newest checkpoint"
    gpt2_untee
    scontrol requeue "$SLURM_JOB_ID" ||
      echo "[gpt2-job] WARNING: scontrol requeue $SLURM_JOB_ID failed (submit with --requeue; GPT2_REQUEUE=0 turns this off)" >&2
    return 4
  fi

  # -- plots
  if [[ -n $trace && -s $trace ]]; then
    gpt2_analyze "$run_dir/plots" plot_loss plot_pipeline report -- "$trace"
  else
    gpt2_log "no trace at '${trace:-}'; plots skipped"
  fi
  gpt2_log "done: $run_dir (status $rc)"

  gpt2_untee
  return "$rc"
}
