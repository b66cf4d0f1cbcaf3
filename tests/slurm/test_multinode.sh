#!/usr/bin/env bash
# ctest `slurm_multinode` (labels multinode, slurm): the job scripts on two Slurm nodes.
#
#   tests/slurm/test_multinode.sh SOURCE_DIR GPT2_EXECUTABLE
#
# Starts job_scripts/local_cluster.sh's two-node cluster (each node a network namespace with its
# own address on a private bridge, its own hostname and boot id; 4 CPUs and 4 fake GPUs a node;
# MPICH between the nodes over TCP), writes a tiny model's deck and data, and checks:
#  1. dp.slurm, pp.slurm and hybrid.slurm submitted with -N 2 as written (dp 4; pp 4; dp 4 x pp 2),
#     and hybrid.slurm with dp 1 x pp 2 x cp 2 x tp 2, end COMPLETED with every step's loss equal
#     to a one-rank run's (1e-5); MPI's traffic crossed the bridge (its links' byte counters);
#  2. placement, from each trace's /meta: every rank's host and local rank are where Slurm's block
#     distribution put it (NodeList, tasks per node); tensor-, context- and pipeline-parallel groups
#     whose ranks fit in a node are on one host; pipelines that do not fit cross the node boundary
#     (pp.slurm: stages 1 -> 2; the cp x tp job: stage 0 on one node, stage 1 on the other);
#     gpt2 simulate and gpt2 plan --calibrate with the dp job's trace take its node size (2 ranks
#     a host) over the hardware file's;
#  3. a checkpoint written from two nodes (the cp x tp job's step 4: every rank its part of one HDF5
#     file) resumed on one node (dp.slurm -N 1: dp 2) and on one rank (gpt2 train): steps 5..8
#     equal the one-rank run's losses;
#  4. a node lost: dp.slurm -N 2 --requeue on a long run; once it has checkpointed, node gpt2n2's
#     slurmd, job step and ranks are SIGKILLed (local_cluster.sh kill-node): the run must stop
#     within 60 s with a node-failure message in the job's output (written on gpt2n1), nothing
#     left running, every checkpoint on disk verifies (gpt2 info --checkpoint); Slurm requeues the
#     job (NODE_FAIL, --requeue); the test moves it to the surviving node (scontrol update
#     NumNodes=1 NumTasks=2 NumCPUs=2), where it resumes from the checkpoint the lost run published
#     (checkpoints/latest) and completes with every step's loss equal to the unbroken one-rank
#     run's (1e-5).
# Then it stops the cluster (local_cluster.sh stop returns once each daemon it signalled has exited
# and each namespace and link is gone) and checks on its own that no namespace, link, daemon or job
# process is left (st_nothing_left), before it exits.
# Needs root (or sudo without a password) and network namespaces: otherwise it exits 77 (skipped),
# saying why. Environment: GPT2_SLURM_KEEP=1 keeps the scratch folder; TMPDIR.
set -uo pipefail

SRC=${1:?usage: test_multinode.sh SOURCE_DIR GPT2_EXECUTABLE}
BIN=${2:?usage: test_multinode.sh SOURCE_DIR GPT2_EXECUTABLE}
SRC=$(cd "$SRC" && pwd)
BIN=$(readlink -f "$BIN")
TAG=multinode
D=$(mktemp -d "${TMPDIR:-/tmp}/gpt2-multinode.XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
chmod 755 "$D"
# shellcheck source=tests/slurm/slurm_test_lib.sh
source "$SRC/tests/slurm/slurm_test_lib.sh"
[[ -x $BIN ]] || die "gpt2 executable not found: $BIN"
$PY -c 'import h5py, numpy' 2>/dev/null || PY=python3
$PY -c 'import h5py, numpy' 2>/dev/null || { rm -rf "$D"; skip "python3 with h5py and numpy is needed to read the traces"; }

cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  set +e
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if ! st_cluster_stop; then
    echo "[$TAG] FAIL: the cluster left something behind (above)"
    ((rc == 0 || rc == 77)) && rc=1
  fi
  # and, checked on its own: none of its daemons, namespaces, links or job processes is left
  st_nothing_left || { ((rc == 0 || rc == 77)) && rc=1; }
  if [[ ${GPT2_SLURM_KEEP:-0} == 1 ]]; then
    echo "[$TAG] kept $D"
  elif ((rc == 0 || rc == 77)); then
    "${SUDO[@]}" rm -rf "$D"
  else
    echo "[$TAG] scratch folder kept for inspection: $D"
  fi
  exit "$rc"
}
BG_PIDS=()
trap cleanup EXIT
trap 'exit 130' INT TERM
st_need_root
mkdir -p "$D"/{data,runs,out,work}
st_write_shards "$D/data" || die "could not write the token shards"

# ---- decks ----------------------------------------------------------------------------------------
MODEL="[model]
n_layer = 4
n_head = 2
n_embd = 32
vocab_size = 64
block_size = 16"
DECK=$D/work/tiny.toml # batch 16 in 4 microbatches: dp 4, pp 4, dp 4 x pp 2 and cp x tp all divide it
cat >"$DECK" <<EOF
# Deck of tests/slurm/test_multinode.sh
$MODEL

[data]
train = "$D/data/train_000.bin"
val = "$D/data/val_000.bin"
seq_len = 16

[train]
batch_size = 16
steps = 8
lr = 1e-3
eval_batches = 2

[checkpoint]
every = 4

[parallel]
microbatches = 4
EOF
LOST_STEPS=1200  # ~10 ms a step: seconds of run left after step 40 even when the box is busy
LOST=$D/work/lost.toml # long enough to lose a node in the middle
cat >"$LOST" <<EOF
# Node-loss deck of tests/slurm/test_multinode.sh
$MODEL

[data]
train = "$D/data/train_000.bin"
seq_len = 16

[train]
batch_size = 8
steps = $LOST_STEPS
lr = 1e-3
log_every = 100

[checkpoint]
every = 20

[parallel]
microbatches = 2
EOF

# ---- the cluster ------------------------------------------------------------------------------------
st_cluster_start --nodes 2 --cpus 8 --gpus 8
say "cluster up"

# The one-rank references, beside the jobs.
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$BIN" train "$DECK" -q --metrics-jsonl "$D/out/ref_tiny.jsonl" \
  >"$D/out/ref_tiny.log" 2>&1 &
BG_PIDS+=($!)
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$BIN" train "$LOST" -q --metrics-jsonl "$D/out/ref_lost.jsonl" \
  >"$D/out/ref_lost.log" 2>&1 &
BG_PIDS+=($!)
# shellcheck disable=SC1091
source "$CLUSTER/cluster.env" # SC_VETHS: the bridge's end of each node's link
link_bytes() { local v s=0; for v in "${SC_VETHS[@]}"; do s=$((s + $(cat "/sys/class/net/$v/statistics/rx_bytes"))); done; echo "$s"; }
BYTES0=$(link_bytes)

# From a folder outside the repository, by the scripts' absolute paths (as test_slurm.sh does).
cd "$D/work" || die "cd $D/work"
# (Every network device for UCX: ctest's environment names the loopback alone.)
EXPORT="ALL,GPT2_BIN=$BIN,GPT2_RUNS_DIR=$D/runs,GPT2_PLOTS=0,UCX_NET_DEVICES=all"
JOB_DP=$(submit "$EXPORT" -N 2 "$SRC/job_scripts/dp.slurm" "$DECK") || die "sbatch dp.slurm failed"
JOB_PP=$(submit "$EXPORT" -N 2 "$SRC/job_scripts/pp.slurm" "$DECK") || die "sbatch pp.slurm failed"
JOB_HY=$(submit "$EXPORT" -N 2 "$SRC/job_scripts/hybrid.slurm" "$DECK") || die "sbatch hybrid.slurm failed"
JOB_TC=$(submit "$EXPORT,PP=2" -N 2 -J gpt2-cptp "$SRC/job_scripts/hybrid.slurm" "$DECK" \
  --set parallel.dp=1 --set parallel.cp=2 --set parallel.tp=2) || die "sbatch hybrid.slurm (cp x tp) failed"
say "submitted dp=$JOB_DP pp=$JOB_PP hybrid=$JOB_HY cp-x-tp=$JOB_TC"

wait_jobs() { # wait_jobs SECONDS JOB...
  local limit=$1 j pending
  shift
  local deadline=$((SECONDS + limit))
  while :; do
    pending=$(jobs_pending "$@")
    ((pending)) || return 0
    if ((SECONDS > deadline)); then
      sl squeue
      die "jobs $* not finished after $limit s"
    fi
    sleep 0.5
  done
}
wait_jobs 150 "$JOB_DP" "$JOB_PP" "$JOB_HY" "$JOB_TC"
say "the four jobs ended"
BYTES1=$(link_bytes)
for p in "${BG_PIDS[@]}"; do wait "$p" || { cat "$D"/out/ref_*.log; die "a one-rank reference run failed"; }; done
BG_PIDS=()

# ---- checks ---------------------------------------------------------------------------------------------
# compare_losses REFERENCE METRICS FIRST LAST: every step FIRST..LAST of METRICS (its last line for
# a step) has the reference's loss to 1e-5.
compare_losses() {
  $PY - "$@" <<'EOF'
import json, sys
ref_path, got_path, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def losses(p):
    out = {}
    for line in open(p):
        if line.strip():
            m = json.loads(line)
            if "loss" in m:
                out[m["step"]] = m["loss"]
    return out
a, b = losses(ref_path), losses(got_path)
want = list(range(first, last + 1))
missing = [s for s in want if s not in a or s not in b]
if missing:
    sys.exit(f"steps missing: {missing[:5]} (reference has {len(a)}, run has {len(b)})")
diff = max(abs(a[s] - b[s]) for s in want)
print(f"steps {first}..{last}: largest difference from the one-rank run {diff:.2g}")
sys.exit(0 if diff <= 1e-5 else 1)
EOF
}

# check_trace TRACE NODELIST TASKS_PER_NODE: hosts and local ranks as Slurm's block distribution
# puts them; tp, cp and pp groups that fit in a node on one host; pipelines that do not, across.
check_trace() {
  $PY - "$@" <<'EOF'
import sys
import h5py
path, nodes, per_node = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
m = h5py.File(path, "r")["meta"].attrs
n = int(m["world_size"])
host = [h.decode() if isinstance(h, bytes) else str(h) for h in m["host"]]
local = [int(x) for x in m["local_rank"]]
grid = {a: int(m[a]) for a in ("dp", "pp", "cp", "tp")}
coord = {a: [int(x) for x in m[a + "_rank"]] for a in grid}
bad = []
for r in range(n):
    want = (nodes[r // per_node], r % per_node)
    if (host[r], local[r]) != want:
        bad.append(f"rank {r} on {host[r]} local {local[r]}, expected {want[0]} local {want[1]}")
notes = [f"hosts {','.join(host)}; local ranks {','.join(map(str, local))}"]
for axis in ("tp", "cp", "pp"):
    if grid[axis] == 1:
        continue
    groups = {}
    for r in range(n):
        key = tuple(coord[a][r] for a in grid if a != axis)
        groups.setdefault(key, []).append(r)
    inside = crossing = 0
    for ranks in groups.values():
        ranks.sort(key=lambda r: coord[axis][r])
        hosts = {host[r] for r in ranks}
        if max(ranks) - min(ranks) + 1 <= per_node:  # fits in a node: must not span two
            if len(hosts) != 1:
                bad.append(f"{axis} group {ranks} fits in a node but spans {sorted(hosts)}")
            inside += 1
        else:
            cross = sum(host[a] != host[b] for a, b in zip(ranks, ranks[1:]))
            if axis == "pp" and cross == 0:
                bad.append(f"pipeline {ranks} does not fit in a node yet no neighbours cross")
            crossing += 1
            if axis == "pp":
                notes.append(f"pipeline {ranks}: neighbours across nodes at stages "
                             + ",".join(str(coord['pp'][a]) + "->" + str(coord['pp'][b])
                                        for a, b in zip(ranks, ranks[1:]) if host[a] != host[b]))
    notes.append(f"{axis}: {inside} group(s) inside one node, {crossing} spanning nodes")
print("; ".join(notes))
if bad:
    sys.exit("\n".join(bad))
EOF
}

# check_job JOB NAME RANKS: COMPLETED, the one-rank losses, its trace's placement.
check_job() {
  local j=$1 name=$2 ranks=$3 run nodes tpn out
  if [[ $(job_field "$j" JobState) != COMPLETED || $(job_field "$j" ExitCode) != 0:0 ]]; then
    fail "$name job $j: $(job_field "$j" JobState) $(job_field "$j" ExitCode)"
    show_job "$j"
    return
  fi
  run=$(run_dir "$j")
  nodes=$(sl scontrol show hostnames "$(job_field "$j" NodeList)" | paste -sd,)
  tpn=$(grep -o '^tasks=[0-9]*' "$run/job.txt" | cut -d= -f2)
  tpn=$((tpn / $(tr ',' '\n' <<<"$nodes" | wc -l)))
  grep -qx "ranks=$ranks" "$run/job.txt" || fail "$name job $j: job.txt does not say ranks=$ranks"
  grep -qx "nodes=2" "$run/job.txt" || fail "$name job $j: job.txt does not say nodes=2"
  if out=$(compare_losses "$D/out/ref_tiny.jsonl" "$run/metrics.jsonl" 1 8 2>&1); then
    ok "$name job $j: COMPLETED on $nodes, $ranks ranks; $out"
  else
    fail "$name job $j: losses differ from the one-rank run: $out"
  fi
  if out=$(check_trace "$run/trace.h5" "$nodes" "$tpn" 2>&1); then
    ok "$name job $j: placement: $out"
  else
    fail "$name job $j: placement: $out"
  fi
}
check_job "$JOB_DP" dp.slurm 4
check_job "$JOB_PP" pp.slurm 4
check_job "$JOB_HY" hybrid.slurm 8
check_job "$JOB_TC" "hybrid.slurm cp 2 x tp 2" 8
# The performance model takes the node size from a trace's hosts (2 ranks on each of 2 hosts here),
# over the hardware file's (h100.toml: 8 a node).
TRACE_DP=$(run_dir "$JOB_DP")/trace.h5
if out=$("$BIN" simulate "$DECK" --hardware "$SRC/inputs/hardware/h100.toml" --calibrate "$TRACE_DP" 2>&1) &&
  grep -q "^node size: 2 ranks per node" <<<"$out" &&
  [[ $("$BIN" simulate "$DECK" --hardware "$SRC/inputs/hardware/h100.toml" --calibrate "$TRACE_DP" --json 2>/dev/null |
    $PY -c 'import json, sys; print(json.load(sys.stdin)["devices_per_node"])') == 2 ]]; then
  ok "gpt2 simulate --calibrate: $(grep '^node size' <<<"$out")"
else
  fail "gpt2 simulate --calibrate did not take the node size (2) from the trace: $(head -n 3 <<<"$out")"
fi
n=$("$BIN" plan "$DECK" --hardware "$SRC/inputs/hardware/h100.toml" --gpus 16 --calibrate "$TRACE_DP" --json 2>&1 |
  $PY -c 'import json, sys; print(json.load(sys.stdin)["devices_per_node"])' 2>&1)
[[ $n == 2 ]] && ok "gpt2 plan --calibrate: devices_per_node 2 from the trace" ||
  fail "gpt2 plan --calibrate did not take the node size (2) from the trace: $n"
# MPI between the nodes went over the bridge (TCP), not through shared memory.
moved=$((BYTES1 - BYTES0))
((moved > 2000000)) && ok "the nodes' links carried $((moved / 1000)) kB during those jobs (MPI over TCP)" ||
  fail "the nodes' links carried only $moved bytes during the jobs: MPI did not go over the network"

# ---- a checkpoint from two nodes, resumed on one node and on one rank ---------------------------------
CKPT=$(run_dir "$JOB_TC")/checkpoints/ckpt_00000004.h5
[[ -s $CKPT ]] || die "the cp x tp job wrote no $CKPT"
mkdir -p "$D/work/resume_node" "$D/work/resume_rank"
cp "$CKPT" "$D/work/resume_node/" && cp "$CKPT" "$D/work/resume_rank/" || die "cannot copy $CKPT"
JOB_RES=$(submit "$EXPORT" -N 1 -J gpt2-resume "$SRC/job_scripts/dp.slurm" "$DECK" \
  --set checkpoint.dir="$D/work/resume_node" --set checkpoint.resume=true) || die "sbatch of the resume job failed"

# ---- a node lost ----------------------------------------------------------------------------------------------
JOB_LOST=$(submit "$EXPORT" -N 2 -J gpt2-lost "$SRC/job_scripts/dp.slurm" "$LOST") || die "sbatch of the node-loss job failed"
say "submitted resume (one node)=$JOB_RES node-loss=$JOB_LOST"
# one rank, outside Slurm, meanwhile
if out=$(OPENBLAS_NUM_THREADS=1 "$BIN" train "$DECK" --set checkpoint.dir="$D/work/resume_rank" \
  --set checkpoint.resume=true -q --metrics-jsonl "$D/out/resume_rank.jsonl" 2>&1); then
  grep -q "resuming from $D/work/resume_rank/ckpt_00000004.h5" <<<"$out" || fail "one-rank resume: no 'resuming from ...ckpt_00000004.h5' line"
  if res=$(compare_losses "$D/out/ref_tiny.jsonl" "$D/out/resume_rank.jsonl" 5 8 2>&1); then
    ok "the two-node checkpoint of step 4 resumed on one rank: $res"
  else
    fail "the two-node checkpoint resumed on one rank: $res"
  fi
else
  fail "the one-rank resume failed: $(tail -n 5 <<<"$out")"
fi

# Kill gpt2n2 once the run has checkpointed (step 20) and logged 40 steps.
deadline=$((SECONDS + 60))
lost_metrics=""
while :; do
  lost_run=$(run_dir "$JOB_LOST")
  [[ -n $lost_run ]] && lost_metrics=$lost_run/metrics.jsonl
  if [[ -n $lost_run && -s $lost_run/checkpoints/ckpt_00000020.h5 ]] &&
    (($(grep -c '"loss"' "$lost_metrics" 2>/dev/null) >= 40)); then
    break
  fi
  job_done "$JOB_LOST" && { show_job "$JOB_LOST"; die "the node-loss job ended before the node could be killed"; }
  ((SECONDS > deadline)) && { sl squeue; die "the node-loss job did not reach step 40 in 60 s"; }
  sleep 0.2
done
steps_before=$(grep -c '"loss"' "$lost_metrics")
T_KILL=$SECONDS
"${SUDO[@]}" "$SRC/job_scripts/local_cluster.sh" kill-node gpt2n2 --dir "$CLUSTER" | sed "s/^/[$TAG] /"
say "killed gpt2n2 at step $steps_before of job $JOB_LOST"
# The run stops: the job leaves RUNNING (Slurm requeues it: PENDING, Restarts=1).
while [[ $(job_field "$JOB_LOST" JobState) == RUNNING ]] && ((SECONDS - T_KILL <= 90)); do sleep 0.5; done
T_END=$((SECONDS - T_KILL))
touch "$D/left_running"  # (what the requeued run may write later is newer than this)
# The checkpoint the lost run last published (checkpoints/latest): the one to resume from. A newer
# file may lie beside it, complete, when the kill came between a checkpoint's write and its
# publication; the trainer takes a checkpoint newer than latest for another run's, and so does this.
published=$(cat "$lost_run/checkpoints/latest" 2>/dev/null)
lost_state=$(job_field "$JOB_LOST" JobState)
if ((T_END <= 60)); then
  ok "node-loss job $JOB_LOST left RUNNING $T_END s after the kill (now $lost_state, restarts $(job_field "$JOB_LOST" Restarts))"
else
  fail "node-loss job $JOB_LOST still $lost_state $T_END s after gpt2n2 was killed"
fi
# Either Slurm noticed first (NODE_FAIL: it ends the job and requeues it) or MPI did (the ranks
# abort; the job script asks Slurm which node is gone, says so and waits for Slurm's NODE_FAIL).
for _ in $(seq 40); do
  msg=$(grep -m1 -E "Node failure on|node\(s\) .* stopped answering" "$(out_file "$JOB_LOST")")
  [[ -n $msg ]] && break
  sleep 0.5
done
[[ -n $msg ]] && ok "its output (from gpt2n1) says: $msg" || { fail "the node-loss job's output has no node-failure message"; show_job "$JOB_LOST"; }
# Nothing of the first run is left: no rank on gpt2n1 either (Slurm gives them KillWait, 5 s).
for _ in $(seq 30); do
  lost_left=$(pgrep -f -- "train $LOST" || true)
  [[ -z $lost_left ]] && break
  sleep 0.5
done
[[ -z $lost_left ]] && ok "no rank of the lost run is left running" || fail "processes of the lost run still run: $(ps -o pid,args -p "$(paste -sd, <<<"$lost_left")" | tail -n +2)"
# The checkpoints on disk verify; the published one is the lost run's (Slurm may already have
# started the requeued run, whose own checkpoints are newer than the stop).
newest=""
for f in "$lost_run"/checkpoints/ckpt_*.h5; do
  if ! "$BIN" info --checkpoint "$f" 2>&1 | grep -q "checksums verified"; then fail "checkpoint $f does not verify"
  elif [[ $f == */"$published" && ! $f -nt $D/left_running ]]; then newest=$f; fi
done
[[ -n $newest ]] && ok "checkpoints on disk verify: $(cd "$lost_run/checkpoints" && ls ckpt_*.h5 | paste -sd' '); published: $published" ||
  fail "the lost run published no checkpoint that verifies (latest: '$published')"

# The requeued job: onto the surviving node, two ranks there.
deadline=$((SECONDS + 60))
while [[ ! ($(job_field "$JOB_LOST" JobState) == PENDING && $(job_field "$JOB_LOST" Restarts) -ge 1) ]]; do
  ((SECONDS > deadline)) && { show_job "$JOB_LOST"; die "job $JOB_LOST was not requeued after the node failure"; }
  sleep 0.5
done
ok "Slurm requeued job $JOB_LOST after the node failure (restarts $(job_field "$JOB_LOST" Restarts), reason $(job_field "$JOB_LOST" Reason))"
sl scontrol update JobId="$JOB_LOST" NumNodes=1 NumTasks=2 NumCPUs=2 StartTime=now || fail "scontrol update of job $JOB_LOST failed"
wait_jobs 150 "$JOB_LOST" "$JOB_RES"
say "the requeued and the resume jobs ended"
f=$(out_file "$JOB_LOST")
if [[ $(job_field "$JOB_LOST" JobState) == COMPLETED && $(job_field "$JOB_LOST" ExitCode) == 0:0 ]]; then
  resumed=$(grep -o "^resuming from [^ ]*" "$f" | tail -n1 | sed 's/^resuming from //')
  [[ $resumed == "$newest" ]] && ok "requeued job $JOB_LOST resumed on $(job_field "$JOB_LOST" NodeList) from the published checkpoint $(basename "$newest")" ||
    fail "requeued job $JOB_LOST resumed from '$resumed', not the published checkpoint $newest"
  if out=$(compare_losses "$D/out/ref_lost.jsonl" "$lost_run/metrics.jsonl" 1 "$LOST_STEPS" 2>&1); then
    ok "the requeued run's losses: $out"
  else
    fail "the requeued run's losses differ from the unbroken run's: $out"
  fi
else
  fail "requeued job $JOB_LOST: $(job_field "$JOB_LOST" JobState) $(job_field "$JOB_LOST" ExitCode)"
  show_job "$JOB_LOST"
fi
if [[ $(job_field "$JOB_RES" JobState) == COMPLETED && $(job_field "$JOB_RES" ExitCode) == 0:0 ]]; then
  run=$(run_dir "$JOB_RES")
  grep -q "resuming from $D/work/resume_node/ckpt_00000004.h5" "$(out_file "$JOB_RES")" || fail "one-node resume: no 'resuming from ...ckpt_00000004.h5' line"
  if out=$(compare_losses "$D/out/ref_tiny.jsonl" "$run/metrics.jsonl" 5 8 2>&1); then
    ok "the two-node checkpoint of step 4 resumed on one node ($(grep '^ranks=' "$run/job.txt")): $out"
  else
    fail "the two-node checkpoint resumed on one node: $out"
  fi
else
  fail "one-node resume job $JOB_RES: $(job_field "$JOB_RES" JobState) $(job_field "$JOB_RES" ExitCode)"
  show_job "$JOB_RES"
fi

say "done: $FAILURES failure(s)"
((FAILURES)) && { st_dump_logs; exit 1; }
echo "[$TAG] PASS"
exit 0
