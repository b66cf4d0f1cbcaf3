#!/usr/bin/env bash
# ctest `slurm_jobs` (label slurm): the job scripts, submitted to a real Slurm.
#
#   tests/slurm/test_slurm.sh SOURCE_DIR GPT2_EXECUTABLE
#
# Starts a private one-node Slurm on 127.0.0.1 (job_scripts/local_cluster.sh start --loopback:
# munged, slurmctld, slurmd; 8 CPUs, 4 fake GPUs) with all its state in a scratch folder and its own
# free ports, makes a tiny token shard and input deck of its own, then submits
#   sbatch -N 1 -n 2 job_scripts/dp.slurm      -> COMPLETED, dp=2 x pp=1, trace, metrics, plots
#   sbatch -N 1 -n 2 job_scripts/pp.slurm      -> COMPLETED, dp=1 x pp=2, trace, metrics, plots
#   sbatch -N 1 -n 4 job_scripts/hybrid.slurm  -> COMPLETED, dp=2 x pp=2 (PP=2)
#   sbatch -n 2 dp.slurm ... --set parallel.dp=4       -> FAILED, "asks for 4 ranks ... only 2 tasks"
#   sbatch -n 2 hybrid.slurm with PP=4                 -> FAILED, "PP=4 ... need at least 4 ranks"
#   sbatch -n 64 dp.slurm                              -> refused by sbatch (more CPUs than the node)
#   sbatch -n 2 dp.slurm (a long run), then scancel --signal=TERM, --signal=INT (to the job's steps:
#   the ranks) or a plain scancel once it has logged 20 steps -> FAILED 4:0 (the plain scancel:
#   CANCELLED): srun's own status 4 (job.txt launcher_exit_code), the script's 4 (exit_code), one
#   "stopped by SIGxxx after step N" line, checkpoints/latest of step N, metrics steps 1..N
# and checks each job's state and exit code (scontrol show job; no accounting database needed),
# its output file and its run folder. Plots are required only for the analysis/*.py scripts present.
# Then a job whose time runs out: dp.slurm with --time=1 --signal=B:USR1@45 (the warning comes at
# slurmctld's next time-limit check, every 30 s; the test releases the job, submitted held, 15 s or
# more before a check, suspends it once it trains -- or, still starting 3 s before a check, through
# that check -- and resumes it 2 s before the next, so that the warning comes in the middle of its
# training whatever the load), so the job is warned, checkpoints, requeues itself and resumes; it
# must end COMPLETED with every step, and its losses equal to an uninterrupted run's (outside Slurm,
# afterwards, up to 200 steps past the resume) to 1e-5. (Slurm holds a requeued job back about two
# minutes, its BeginTime; the test moves that to now and gives the requeued run 3 minutes, so that
# it is not warned again at its first check.)
#
# Slurm comes from Debian (slurmctld, slurmd; apt-get when missing). Needs root, or sudo without a
# password; otherwise, or when the packages cannot be installed, it exits 77 (skipped) saying why.
# The daemons are always stopped at exit (trap: local_cluster.sh stop), by the PIDs recorded as they
# started (and their pid files), each checked against /proc/PID/comm, never by name; the stop waits
# until each has exited, and the test then checks that none of them is left (st_nothing_left).
# Helpers: tests/slurm/slurm_test_lib.sh.
# Environment: GPT2_SLURM_KEEP=1 keeps the scratch folder; GPT2_SLURM_TIMEOUT (seconds to wait for
# the jobs, default 240); TMPDIR (where the scratch folder goes).
set -uo pipefail

SRC=${1:?usage: test_slurm.sh SOURCE_DIR GPT2_EXECUTABLE}
BIN=${2:?usage: test_slurm.sh SOURCE_DIR GPT2_EXECUTABLE}
SRC=$(cd "$SRC" && pwd)
BIN=$(readlink -f "$BIN")
TIMEOUT=${GPT2_SLURM_TIMEOUT:-240}
TAG=slurm-test
D=$(mktemp -d "${TMPDIR:-/tmp}/gpt2-slurm.XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
chmod 755 "$D"
# shellcheck source=tests/slurm/slurm_test_lib.sh
source "$SRC/tests/slurm/slurm_test_lib.sh"

[[ -x $BIN ]] || { echo "[slurm-test] FAIL: gpt2 executable not found: $BIN"; rm -rf "$D"; exit 1; }
[[ -f $SRC/job_scripts/dp.slurm ]] || { echo "[slurm-test] FAIL: no job_scripts/dp.slurm in $SRC"; rm -rf "$D"; exit 1; }

# ---- stopping everything, whatever happens ----------------------------------------------------------
# local_cluster.sh stop: cancels the jobs, stops slurmd, slurmctld (and its slurmscriptd) and munged
# by their recorded PIDs (each checked against /proc/PID/comm; never by name) and the jobs' left-over
# processes, and returns once each has exited (SIGKILL after 20 s), or says what is left and fails.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if ! st_cluster_stop; then
    echo "[slurm-test] FAIL: the cluster left something behind (above)"
    ((rc == 0 || rc == 77)) && rc=1
  fi
  # and, checked on its own: none of its daemons, namespaces, links or job processes is left
  st_nothing_left || { ((rc == 0 || rc == 77)) && rc=1; }
  if [[ ${GPT2_SLURM_KEEP:-0} == 1 ]]; then
    echo "[slurm-test] kept $D"
  elif ((rc == 0 || rc == 77)); then
    "${SUDO[@]}" rm -rf "$D"
  else
    echo "[slurm-test] scratch folder kept for inspection: $D"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
st_need_root
command -v "$PY" >/dev/null 2>&1 || skip "python3 is needed to write the test's token shard"
mkdir -p "$D"/{data,runs,out,work}

# ---- the cluster: one node on 127.0.0.1, 8 CPUs, 4 fake GPUs (job_scripts/local_cluster.sh) ----------
st_cluster_start --loopback --cpus 8 --gpus 4
HOST=$(hostname -s)
say "cluster up: node $HOST idle ($(sl sinfo -h -o '%c CPUs, gres %G'))"

# ---- the test's own data and input deck ----------------------------------------------------------
st_write_shards "$D/data" || die "could not write the token shards"
MODEL_SECTION="[model]
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 64
block_size = 16
"
CONFIG=$D/work/tiny_slurm.toml
cat >"$CONFIG" <<EOF
# Tiny deck of tests/slurm/test_slurm.sh
$MODEL_SECTION
[data]
train = "$D/data/train_000.bin"
val = "$D/data/val_000.bin"
seq_len = 16

[train]
batch_size = 8
steps = 5
lr = 1e-3
eval_batches = 2

[parallel]
dp = 1
pp = 1
microbatches = 2
EOF

# Stop jobs: a run far longer than the test, stopped by scancel (no requeue: GPT2_REQUEUE=0,
# in case the time-limit warning came first); checkpoints go to the run folder.
STOP_DECK=$D/work/stop.toml
STOP_AFTER=20
cat >"$STOP_DECK" <<EOF
# Stop deck of tests/slurm/test_slurm.sh: the tiny model, stopped by scancel mid-run
$MODEL_SECTION
[data]
train = "$D/data/train_000.bin"
seq_len = 16
shuffle = true

[train]
batch_size = 8
steps = 1000000
lr = 1e-3
log_every = 1000

[parallel]
microbatches = 2
EOF

# ---- submitting -----------------------------------------------------------------------------------------
# From a folder outside the repository, by the scripts' absolute paths: the scripts must find the
# repository themselves. Run folders go to $D/runs, output files to $D/out.
cd "$D/work" || die "cd $D/work"
EXPORT="ALL,GPT2_BIN=$BIN,GPT2_RUNS_DIR=$D/runs"
JOB_DP=$(submit "$EXPORT" -N 1 -n 2 "$SRC/job_scripts/dp.slurm" "$CONFIG") || die "sbatch dp.slurm failed"
JOB_PP=$(submit "$EXPORT" -N 1 -n 2 "$SRC/job_scripts/pp.slurm" "$CONFIG") || die "sbatch pp.slurm failed"
JOB_HY=$(submit "$EXPORT,PP=2" -N 1 -n 4 --ntasks-per-node=4 --gpus-per-node=2 "$SRC/job_scripts/hybrid.slurm" "$CONFIG") ||
  die "sbatch hybrid.slurm failed"
JOB_BAD_DP=$(submit "$EXPORT" -N 1 -n 2 -J bad-dp "$SRC/job_scripts/dp.slurm" "$CONFIG" --set parallel.dp=4) ||
  die "sbatch of the over-asking dp job failed"
JOB_BAD_PP=$(submit "$EXPORT,PP=4" -N 1 -n 2 --ntasks-per-node=2 --gpus-per-node=2 -J bad-hybrid "$SRC/job_scripts/hybrid.slurm" "$CONFIG") ||
  die "sbatch of the over-asking hybrid job failed"
STOP_JOBS=() # JOB:SIGNAL:HOW, HOW = steps (scancel --signal=SIGNAL) or cancel (scancel: SIGTERM)
for how in TERM:steps INT:steps TERM:cancel; do
  j=$(submit "$EXPORT,GPT2_PLOTS=0,GPT2_REQUEUE=0" -N 1 -n 2 -J "stop-${how/:/-}" --time=5 "$SRC/job_scripts/dp.slurm" "$STOP_DECK") ||
    die "sbatch of the stop job ($how) failed"
  STOP_JOBS+=("$j:$how")
done
declare -A STOP_SENT=()
say "submitted dp=$JOB_DP pp=$JOB_PP hybrid=$JOB_HY bad-dp=$JOB_BAD_DP bad-hybrid=$JOB_BAD_PP stop: ${STOP_JOBS[*]}"

# A small sweep: dp at 1 and 2 ranks, pp at 2, and the analysis job that depends on them.
SWEEP=$D/sweep
sl env GPT2_BIN="$BIN" "$SRC/job_scripts/sweep.sh" --ranks "1 2" --pp 2 --tasks-per-node 2 --gpus-per-node 2 \
  --name sw --dir "$SWEEP" "$CONFIG" >"$D/out/sweep.log" 2>&1 || { cat "$D/out/sweep.log"; die "sweep.sh failed"; }
[[ -s $SWEEP/jobs.txt ]] || { cat "$D/out/sweep.log"; die "sweep.sh wrote no $SWEEP/jobs.txt"; }
mapfile -t SWEEP_JOBS <"$SWEEP/jobs.txt"
SWEEP_ANALYSIS=${SWEEP_JOBS[-1]}
((${#SWEEP_JOBS[@]} == 4)) || fail "sweep.sh submitted ${#SWEEP_JOBS[@]} jobs, expected 4 (dp1 dp2 pp2 + analysis)"
dep=$(job_field "$SWEEP_ANALYSIS" Dependency)
[[ $dep == afterany:* ]] && ok "sweep: analysis job $SWEEP_ANALYSIS waits: Dependency=$dep" ||
  fail "sweep: analysis job $SWEEP_ANALYSIS has Dependency=$dep, expected afterany:..."
say "sweep: jobs ${SWEEP_JOBS[*]} (analysis $SWEEP_ANALYSIS)"

# A job that asks for more than the node has is refused at submission (EnforcePartLimits=ALL).
if out=$(sl sbatch --parsable --export="$EXPORT" -o "$D/out/%x-%j.out" -N 1 -n 64 --ntasks-per-node=64 \
  "$SRC/job_scripts/dp.slurm" "$CONFIG" 2>&1); then
  fail "sbatch -n 64 on a 4-CPU node was accepted (job $out)"
else
  ok "sbatch -n 64 refused at submission: $(echo "$out" | tail -n1)"
fi

# ---- waiting ------------------------------------------------------------------------------------------------
ALL_JOBS=("$JOB_DP" "$JOB_PP" "$JOB_HY" "$JOB_BAD_DP" "$JOB_BAD_PP" "${SWEEP_JOBS[@]}" "${STOP_JOBS[@]%%:*}")
# logged_steps FILE: lines with a training loss in a metrics file (0 when there is none yet)
logged_steps() { grep -c '"loss"' "$1" 2>/dev/null || true; }
# Bounded well inside ctest's TIMEOUT (600 s), so that the EXIT trap always gets to stop the daemons.
deadline=$((SECONDS + TIMEOUT))
((deadline > T_START + 360)) && deadline=$((T_START + 360))
while :; do
  pending=$(jobs_pending "${ALL_JOBS[@]}")
  # A stop job that has logged STOP_AFTER steps gets its signal (scancel --signal: to the job's
  # steps, i.e. the ranks, not the batch shell; a plain scancel: SIGTERM to all, then the job ends).
  for js in "${STOP_JOBS[@]}"; do
    IFS=: read -r j sig how <<<"$js"
    [[ -n ${STOP_SENT[$j]:-} ]] && continue
    for m in "$D/runs/"*-"$j"/metrics.jsonl; do break; done # (a glob: no process a poll)
    if [[ -f $m ]] && (($(logged_steps "$m") >= STOP_AFTER)); then
      if [[ $how == cancel ]]; then sc=(scancel "$j"); else sc=(scancel --signal="$sig" "$j"); fi
      sl "${sc[@]}" || fail "${sc[*]} failed"
      STOP_SENT[$j]=1
      say "${sc[*]} (it had logged $(logged_steps "$m") steps)"
    fi
  done
  ((pending)) || break
  if ((SECONDS > deadline)); then
    sl squeue
    die "jobs still not finished after ${TIMEOUT} s"
  fi
  sleep 1
done
say "all jobs finished"

# ---- checks -------------------------------------------------------------------------------------------------

# check_good JOB DP PP: COMPLETED with 0:0, and a complete run folder.
check_good() {
  local j=$1 dp=$2 pp=$3 st ec run f n pngs s
  st=$(job_field "$j" JobState)
  ec=$(job_field "$j" ExitCode)
  local name
  name=$(job_field "$j" JobName)
  if [[ $st != COMPLETED || $ec != 0:0 ]]; then
    fail "job $j ($name): $st, exit code $ec"
    show_job "$j"
    return
  fi
  ok "job $j ($name): COMPLETED 0:0"
  run=$(ls -d "$D/runs/"*-"$j" 2>/dev/null | head -n1)
  [[ -n $run ]] || { fail "job $j: no run folder $D/runs/*-$j"; show_job "$j"; return; }
  for f in config.toml config.effective.toml job.txt stdout.log metrics.jsonl trace.h5 exit_code; do
    [[ -s $run/$f ]] || fail "job $j: $run/$f missing or empty"
  done
  grep -qx "dp = $dp" "$run/config.effective.toml" && grep -qx "pp = $pp" "$run/config.effective.toml" ||
    fail "job $j: effective config is not dp=$dp pp=$pp: $(grep -E '^(dp|pp) =' "$run/config.effective.toml" | paste -sd' ')"
  grep -qx "ranks=$((dp * pp))" "$run/job.txt" || fail "job $j: job.txt does not say ranks=$((dp * pp))"
  [[ $(cat "$run/exit_code" 2>/dev/null) == 0 ]] || fail "job $j: exit_code file is not 0"
  n=$(grep -c '"loss"' "$run/metrics.jsonl" 2>/dev/null)
  ((n == 5)) || fail "job $j: metrics.jsonl has $n lines with a training loss, expected 5 (one per step)"
  [[ $(head -c 4 "$run/trace.h5" | od -An -c | tr -d ' ') == '211HDF' ]] || fail "job $j: trace.h5 is not an HDF5 file"
  grep -q "training finished" "$(out_file "$j")" || fail "job $j: its output file lacks 'training finished'"
  cmp -s "$CONFIG" "$run/config.toml" || fail "job $j: config.toml is not a copy of the deck"
  # plots: required for each analysis script that exists
  local want=()
  for s in plot_loss plot_pipeline report; do [[ -f $SRC/analysis/$s.py ]] && want+=("$s"); done
  if ((${#want[@]} == 0)); then
    echo "[slurm-test] note: no analysis/plot_loss.py, plot_pipeline.py, report.py yet; plot check skipped"
  else
    for s in "${want[@]}"; do
      grep -q "analysis/$s.py -> " "$run/stdout.log" || fail "job $j: analysis/$s.py did not run cleanly: $(grep "$s" "$run/stdout.log" | tail -n1)"
    done
    pngs=$(ls "$run/plots/"*.png 2>/dev/null | wc -l)
    ((pngs > 0)) || fail "job $j: no PNG in $run/plots (analysis: ${want[*]})"
    ok "job $j: $pngs plot(s) from ${want[*]}"
  fi
  ok "job $j: run folder $(basename "$run"): $(ls "$run" | paste -sd' ')"
}

# check_bad JOB MESSAGE...: FAILED with exit code 2, the message in its output, nothing launched.
check_bad() {
  local j=$1 st ec msg f
  shift
  st=$(job_field "$j" JobState)
  ec=$(job_field "$j" ExitCode)
  f=$(out_file "$j")
  if [[ $st != FAILED || $ec != 2:0 ]]; then
    fail "over-asking job $j: $st, exit code $ec (expected FAILED 2:0)"
    show_job "$j"
    return
  fi
  for msg in "$@"; do
    grep -qF -- "$msg" "$f" || { fail "over-asking job $j: output lacks '$msg'"; show_job "$j"; return; }
  done
  grep -q "gpt2 train\|srun --mpi" "$f" && fail "over-asking job $j launched ranks anyway"
  ok "over-asking job $j: FAILED 2:0: $(grep ERROR "$f" | head -n1)"
}

# check_stopped JOB SIG HOW: scancel (--signal=SIG) stopped it after step N: FAILED 4:0 (a plain
# scancel: CANCELLED), srun's own status 4, one "stopped by SIGxxx after step N" line,
# checkpoints/latest of step N, metrics steps 1..N.
check_stopped() {
  local j=$1 sig=$2 how=$3 st ec f run n latest what=scancel
  st=$(job_field "$j" JobState)
  ec=$(job_field "$j" ExitCode)
  f=$(out_file "$j")
  run=$(ls -d "$D/runs/"*-"$j" 2>/dev/null | head -n1)
  [[ $how == steps ]] && what="scancel --signal=$sig"
  if [[ $how == steps && ($st != FAILED || $ec != 4:0) || $how == cancel && $st != CANCELLED ]]; then
    fail "stop job $j ($what): $st, exit code $ec (expected $([[ $how == steps ]] && echo "FAILED 4:0" || echo CANCELLED))"
    show_job "$j"
    return
  fi
  if (($(grep -c "^gpt2 train: stopped by" "$f") != 1)); then
    fail "stop job $j: expected one 'gpt2 train: stopped by SIG$sig' line: $(grep "stopped by" "$f" | paste -sd';')"
    show_job "$j"
    return
  fi
  n=$(sed -n "s/^gpt2 train: stopped by SIG$sig after step \([0-9]*\):.*/\1/p" "$f")
  [[ -n $n ]] || { fail "stop job $j: not stopped by SIG$sig: $(grep "stopped by" "$f")"; return; }
  grep -qx "launcher_exit_code=4" "$run/job.txt" ||
    fail "stop job $j: srun's own exit status was not 4: $(grep launcher_exit_code "$run/job.txt")"
  [[ $(cat "$run/exit_code" 2>/dev/null) == 4 ]] || fail "stop job $j: exit_code file is not 4"
  latest=$(cat "$run/checkpoints/latest" 2>/dev/null)
  [[ $latest == "$(printf 'ckpt_%08d.h5' "$n")" && -s $run/checkpoints/$latest ]] ||
    fail "stop job $j: checkpoints/latest is '$latest', expected the checkpoint of step $n"
  $PY - "$run/metrics.jsonl" "$n" <<'PYEOF' || fail "stop job $j: metrics.jsonl does not hold steps 1..$n"
import json, sys
steps = [m["step"] for m in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "loss" in m]
sys.exit(0 if steps == list(range(1, int(sys.argv[2]) + 1)) else f"metrics steps {steps[:3]}..{steps[-3:]}")
PYEOF
  [[ $(job_field "$j" Restarts) == 0 ]] || fail "stop job $j was requeued"
  ok "stop job $j: $what after step $n: $st $ec, srun and the script said 4, checkpoint of step $n"
}

check_good "$JOB_DP" 2 1
check_good "$JOB_PP" 1 2
check_good "$JOB_HY" 2 2
check_bad "$JOB_BAD_DP" "asks for 4 ranks" "the allocation gives only 2"
check_bad "$JOB_BAD_PP" "PP=4" "at least 4 ranks"
for js in "${STOP_JOBS[@]}"; do
  IFS=: read -r j sig how <<<"$js"
  [[ -n ${STOP_SENT[$j]:-} ]] || fail "stop job $j never logged $STOP_AFTER steps, so it got no signal"
  check_stopped "$j" "$sig" "$how"
done

# The sweep: every job COMPLETED, a summary of the 3 runs, scaling plots if plot_scaling.py exists.
for j in "${SWEEP_JOBS[@]}"; do
  st=$(job_field "$j" JobState)
  [[ $st == COMPLETED && $(job_field "$j" ExitCode) == 0:0 ]] ||
    { fail "sweep job $j ($(job_field "$j" JobName)): $st $(job_field "$j" ExitCode)"; cat "$SWEEP"/*-"$j".out 2>/dev/null | tail -n 20; }
done
n=$(grep -c '^sw-' "$SWEEP/summary.txt" 2>/dev/null)
((n == 3)) || fail "sweep: summary.txt lists $n runs, expected 3: $(cat "$SWEEP/summary.txt" 2>/dev/null)"
if [[ -f $SRC/analysis/plot_scaling.py ]]; then
  if ls "$SWEEP"/plots/scaling*.png >/dev/null 2>&1; then
    pngs=("$SWEEP"/plots/*.png)
    ok "sweep: ${pngs[*]##*/}"
  else
    fail "sweep: no scaling plot in $SWEEP/plots: $(tail -n 5 "$SWEEP/plots/plots.log" 2>/dev/null)"
  fi
else
  echo "[slurm-test] note: no analysis/plot_scaling.py yet; scaling plot check skipped"
fi
((n == 3)) && ok "sweep: 3 runs + analysis job COMPLETED (dependency afterany)"

# ---- a job whose time runs out: warned, checkpointed, requeued, resumed ------------------------------
RQ_DECK=$D/work/requeue.toml
RQ_STEPS=5000
cat >"$RQ_DECK" <<EOF
# Requeue deck of tests/slurm/test_slurm.sh: the tiny model, long enough to be warned mid-run
$MODEL_SECTION
[data]
train = "$D/data/train_000.bin"
seq_len = 16
shuffle = true

[train]
batch_size = 8
steps = $RQ_STEPS
lr = 1e-3
log_every = 500

[checkpoint]
dir = "$D/work/requeue_checkpoints"

[parallel]
microbatches = 2
EOF
# slurmctld checks time limits (and sends --signal warnings) every 30 s. Times here are milliseconds
# from bash's own clock, and the waits sleep until the moment they wait for rather than poll: a poll
# of date, bc and grep ten times a second cost the 2-core box more CPU than the job it waited on.
now_ms() { local t=${EPOCHREALTIME//[!0-9]/}; NOW_MS=$((10#$t / 1000)); }
sleep_ms() { local s; ((${1} > 0)) || return 0; printf -v s '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); sleep "$s"; }
# last_check: LC_NEW becomes the time of the last check in slurmctld's log (empty: none yet).
LC_TS="" LC_NEW=""
last_check() {
  local ts
  ts=$(sed -n 's/^\[\([^]]*\)\].*Testing job time limits.*/\1/p' "$CLUSTER/log/slurmctld.log" | tail -n1)
  [[ $ts == "$LC_TS" ]] && return 0
  LC_TS=$ts LC_NEW=""
  [[ -n $ts ]] && LC_NEW=$(date -d "$ts" +%s%3N)
}
# until_check: UNTIL_MS becomes the milliseconds to the check after the one at lc; UNTIL_S says them.
until_check() { now_ms; UNTIL_MS=$((lc + 30000 - NOW_MS)); printf -v UNTIL_S '%.1f' "${UNTIL_MS}e-3"; }
# wait_check_after T: waits for a check later than T (ms; empty: any) to show in the log, sleeping
# until shortly before it is due; lc becomes its time. Returns 1 when none came in 40 s.
wait_check_after() {
  local after=$1
  [[ -n $after ]] && { now_ms; sleep_ms $((after + 30000 - 300 - NOW_MS)); }
  for _ in $(seq 400); do
    last_check
    [[ -n $LC_NEW && $LC_NEW != "$after" ]] && { lc=$LC_NEW; return 0; }
    sleep 0.1
  done
  return 1
}
warned() { grep -q "warning signal 10 to JobId=$JOB_RQ\$" "$CLUSTER/log/slurmctld.log"; }
# The warning must come while the job trains. Its time is not predicted (a reference run's duration
# said nothing about the job's once the load changed: on a busy box the job trained faster than the
# reference and ended before the check, unwarned, 0 restarts): the job is released when the next
# check is 15 s or more away (time to start), else just after that check; once it trains it is
# suspended (scontrol suspend: a suspended job is not checked, and its time stops) and resumed 2 s
# before the next check, which warns it with most of its steps ahead.
JOB_RQ=$(submit "$EXPORT,GPT2_PLOTS=0" --hold -N 1 -n 2 -J requeue --time=1 --signal=B:USR1@45 \
  "$SRC/job_scripts/dp.slurm" "$RQ_DECK") || die "sbatch of the requeue job failed"
last_check
lc=$LC_NEW
[[ -n $lc ]] && until_check
if [[ -z $lc ]] || ((UNTIL_MS < 15000)); then
  wait_check_after "$lc" || die "no time-limit check in slurmctld's log for 40 s"
fi
sl scontrol release "$JOB_RQ" || die "scontrol release $JOB_RQ failed"
until_check
say "requeue: job $JOB_RQ released $UNTIL_S s before slurmctld's next time-limit check"
rq_steps() { local n; n=$(grep -c '"loss"' "$(run_dir "$JOB_RQ")/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }
rq_trains() { grep -qs '"loss"' "$D/runs/"*-"$JOB_RQ"/metrics.jsonl; } # the job has logged a step
for _ in 1 2 3; do
  # Training, before the next check comes near.
  until_check
  while ! rq_trains && ((UNTIL_MS > 3000)); do sleep 0.1; until_check; done
  job_done "$JOB_RQ" && break
  sl scontrol suspend "$JOB_RQ" || die "scontrol suspend $JOB_RQ failed"
  until_check
  if ! rq_trains; then
    # Still starting (a busy box can take longer than a period): kept suspended through this check,
    # then let go on towards the next, so that the warning comes while it trains.
    say "requeue: job $JOB_RQ still starting $UNTIL_S s before the next check: suspended through it"
    wait_check_after "$lc"
    sl scontrol resume "$JOB_RQ" || die "scontrol resume $JOB_RQ failed"
    continue
  fi
  say "requeue: job $JOB_RQ suspended at step $(rq_steps), $UNTIL_S s before the next check"
  sleep_ms $((UNTIL_MS - 2000))
  sl scontrol resume "$JOB_RQ" || die "scontrol resume $JOB_RQ failed"
  # The check comes (a little late on a busy box): warned? If the check found it still suspended (a
  # slow resume), suspend it again for the next one.
  wait_check_after "$lc"
  for _ in $(seq 20); do warned && break; sleep 0.1; done
  warned && break
  say "requeue: the check at $(date -d "@$((lc / 1000))" +%T) did not warn job $JOB_RQ ($(job_field "$JOB_RQ" JobState)); again"
done
if warned; then
  say "requeue: slurmctld warned job $JOB_RQ at step $(rq_steps)"
fi
# The requeued run need only go 200 steps past the checkpoint it resumes from, which the warned run
# said in its last line ("stopped by SIGUSR1 after step N"): the deck is cut to that before the run
# starts again (it reads the deck anew; the learning rate is constant, so only the end moves).
RQ_FINAL=$RQ_STEPS
shorten_requeued_run() {
  local n
  ((RQ_FINAL == RQ_STEPS)) || return 0
  n=$(sed -n 's/^gpt2 train: stopped by SIGUSR1 after step \([0-9]*\):.*/\1/p' "$(out_file "$JOB_RQ")" | tail -n1)
  [[ -n $n ]] && ((n > 0 && n + 200 < RQ_STEPS)) || return 0
  RQ_FINAL=$((n + 200))
  sed -i "s/^steps = $RQ_STEPS\$/steps = $RQ_FINAL/" "$RQ_DECK"
  say "requeue: job $JOB_RQ stopped after step $n; the deck's steps cut to $RQ_FINAL for the requeued run"
}
deadline=$((SECONDS + 150))
((deadline > T_START + 560)) && deadline=$((T_START + 560))  # inside ctest's TIMEOUT (600 s)
while :; do
  rec=" $(sl scontrol show job --oneliner "$JOB_RQ" 2>/dev/null) " # one call for the three fields
  [[ $rec =~ \ JobState=([A-Z_]+)\  ]] && st=${BASH_REMATCH[1]} || st=unknown
  case $st in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
  # Requeued: start it soon, with 3 minutes (with 1, slurmctld would warn it again at its first check).
  # Not in the second of the requeue: slurmd revoked the job's first credential then, and refuses
  # ("credential revoked", the job FAILED) a launch whose credential is not from a later second.
  if [[ $st == PENDING && $rec != *" Restarts=0 "* && $rec == *" Reason=BeginTime "* ]]; then
    [[ -n ${requeued_at:-} ]] || { requeued_at=$SECONDS; shorten_requeued_run; }
    if ((SECONDS - requeued_at >= 3)); then sl scontrol update JobId="$JOB_RQ" StartTime=now TimeLimit=3; fi
  else
    requeued_at=""
  fi
  ((SECONDS > deadline)) && { sl squeue; die "requeue job $JOB_RQ not finished in time"; }
  sleep 0.5
done
f=$(out_file "$JOB_RQ")
# The uninterrupted run, outside Slurm, on the same 2 ranks (its own checkpoint folder), up to 200
# steps past the last step the job resumed from: the resumed steps are the ones that can differ. The
# same layout, not one rank: over 5000 steps a layout's last-bit differences from one rank grow past
# 1e-5 (a one-rank reference differed by 0.016 at the end; 1.4e-7 after 1000 steps).
resumed=$(sed -n "s|^resuming from $D/work/requeue_checkpoints/ckpt_0*\([0-9][0-9]*\).*|\1|p" "$f" | sort -n | tail -n1)
REF_STEPS=$((${resumed:-0} + 200))
((REF_STEPS > RQ_FINAL)) && REF_STEPS=$RQ_FINAL
OPENBLAS_NUM_THREADS=1 mpiexec -n 2 "$BIN" train "$RQ_DECK" --set parallel.dp=2 --set parallel.pp=1 -q \
  --stop-at "$REF_STEPS" --set checkpoint.dir="$D/work/requeue_reference_checkpoints" \
  --metrics-jsonl "$D/out/requeue_reference.jsonl" >"$D/out/requeue_reference.log" 2>&1 ||
  { cat "$D/out/requeue_reference.log"; die "the uninterrupted reference run failed"; }
run=$(ls -d "$D/runs/"*-"$JOB_RQ" 2>/dev/null | head -n1)
restarts=$(job_field "$JOB_RQ" Restarts)
# (a stop "after step 0" did no step: a busy box started it late; nothing was saved to resume from)
stops=$(grep -c "^gpt2 train: stopped by SIGUSR1 after step [1-9]" "$f")
if [[ $st != COMPLETED || $(job_field "$JOB_RQ" ExitCode) != 0:0 ]] || ((restarts < 1)); then
  fail "requeue job $JOB_RQ: $st $(job_field "$JOB_RQ" ExitCode), $restarts restart(s)"
  show_job "$JOB_RQ"
else
  ok "requeue job $JOB_RQ: COMPLETED 0:0 after $restarts restart(s); stopped: $(grep "^gpt2 train: stopped by" "$f" | cut -c1-60 | paste -sd';')"
  grep -q "requeueing job $JOB_RQ" "$f" || fail "requeue job $JOB_RQ: its output does not say it requeued itself"
  grep -q "said 0 for a run stopped" "$f" && fail "requeue job $JOB_RQ: srun said 0 for the stopped run (not 4)"
  if ((stops == 0)); then
    echo "[slurm-test] note: the warning came before the first step ended (nothing to save); the requeued run did every step"
  else
    grep -q "^resuming from $D/work/requeue_checkpoints/ckpt_" "$f" || fail "requeue job $JOB_RQ: no run resumed from its checkpoint"
  fi
  $PY - "$D/out/requeue_reference.jsonl" "$run/metrics.jsonl" "$RQ_FINAL" "$REF_STEPS" <<'PYEOF' || fail "requeue job $JOB_RQ: losses differ from the uninterrupted run's"
import json, sys
ref, got = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
a = {m["step"]: m["loss"] for m in ref if "loss" in m}
b = {m["step"]: m["loss"] for m in got if "loss" in m}
n, k = int(sys.argv[3]), int(sys.argv[4])
assert sorted(a) == list(range(1, k + 1)), f"reference steps {min(a)}..{max(a)}, expected 1..{k}"
if sorted(b) != list(range(1, n + 1)):
    sys.exit(f"the requeued job's metrics hold {len(b)} steps, expected 1..{n}")
diff = max(abs(a[s] - b[s]) for s in a)
print(f"[slurm-test] requeue: the first {k} of {n} losses, largest difference from the uninterrupted run {diff:g}")
sys.exit(0 if diff <= 1e-5 else 1)
PYEOF
fi

say "done: $FAILURES failure(s)"
if ((FAILURES)); then
  st_dump_logs
  exit 1
fi
echo "[slurm-test] PASS"
exit 0
