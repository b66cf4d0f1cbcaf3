# shellcheck shell=bash
# Shared by the Slurm tests (test_slurm.sh: one node; test_multinode.sh: nodes in network
# namespaces): messages, the private cluster (job_scripts/local_cluster.sh), the test's token
# shards, and reading jobs. Sourced after setting TAG (message prefix), SRC (the repository) and
# D (the test's scratch folder; the cluster lives in $D/cluster).
# shellcheck disable=SC2034  # (variables used by the tests that source this)

T_START=$SECONDS
FAILURES=0
say() { echo "[$TAG $((SECONDS - T_START))s] $*"; }
ok() { echo "[$TAG] ok: $*"; }
fail() { echo "[$TAG] FAIL: $*"; FAILURES=$((FAILURES + 1)); }
skip() { echo "[$TAG] SKIP: $*"; exit 77; }

# Root, or sudo without a password (the daemons and namespaces need root); else skip.
SUDO=()
st_need_root() {
  [[ $(id -u) == 0 ]] && return 0
  command -v sudo >/dev/null 2>&1 || skip "not root and no sudo: the Slurm daemons must run as root"
  sudo -n true 2>/dev/null || skip "not root and sudo asks for a password: the Slurm daemons must run as root"
  SUDO=(sudo -n)
}

# ---- the cluster ----------------------------------------------------------------------------------
CLUSTER=$D/cluster
CONF=$CLUSTER/etc/slurm.conf
sl() { SLURM_CONF=$CONF "$@"; } # Slurm client commands; SLURM_CONF is not exported into the test's shell
# st_cluster_start [local_cluster.sh start options]: skips (77) where this machine cannot run it.
st_cluster_start() {
  local out rc=0
  out=$("${SUDO[@]}" "$SRC/job_scripts/local_cluster.sh" start --dir "$CLUSTER" "$@" 2>&1) || rc=$?
  echo "$out" | sed "s/^/[$TAG] /"
  ((rc == 3)) && skip "the cluster cannot run here: $(echo "$out" | grep ERROR | tail -n1)"
  ((rc == 0)) || { echo "[$TAG] FAIL: local_cluster.sh start failed (status $rc)"; exit 1; }
  export PATH=$PATH:/usr/sbin:/sbin
}
# Stops it, keeping its folder (the test removes $D). Fails when anything it made is left. It
# first notes what the cluster made (st_cluster_made), for st_nothing_left to check afterwards.
st_cluster_stop() {
  [[ -f $CLUSTER/cluster.env ]] || return 0
  st_cluster_made
  "${SUDO[@]}" "$SRC/job_scripts/local_cluster.sh" stop --dir "$CLUSTER" --keep 2>&1 | sed "s/^/[$TAG] /"
  return "${PIPESTATUS[0]}"
}
# What the cluster made, from its cluster.env (the daemons as COMM:PID, recorded as each started;
# namespaces; links) and its pid files: ST_PIDS, ST_NETNS, ST_LINKS.
ST_PIDS=() ST_NETNS=() ST_LINKS=()
# shellcheck disable=SC2153  # (SC_PIDS, SC_NETNS: cluster.env's)
st_cluster_made() {
  local f pid comm kind what
  ST_PIDS=() ST_NETNS=() ST_LINKS=()
  while read -r kind what; do
    case $kind in
      pid) ST_PIDS+=("$what") ;;
      netns) ST_NETNS+=("$what") ;;
      link) ST_LINKS+=("$what") ;;
    esac
  done < <(
    # shellcheck disable=SC1091
    source "$CLUSTER/cluster.env" || exit
    for what in ${SC_PIDS[@]+"${SC_PIDS[@]}"}; do echo "pid $what"; done
    for what in ${SC_NETNS[@]+"${SC_NETNS[@]}"}; do echo "netns $what"; done
    for what in ${SC_VETHS[@]+"${SC_VETHS[@]}"} ${SC_BRIDGE:-}; do echo "link $what"; done
  )
  for f in "$CLUSTER"/run/*.pid "$CLUSTER/munge/munged.pid"; do
    pid=$(tr -dc 0-9 <"$f" 2>/dev/null)
    [[ -n $pid ]] || continue
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || continue
    [[ $comm =~ ^(slurmd|slurmctld|munged)$ && " ${ST_PIDS[*]} " != *" $comm:$pid "* ]] && ST_PIDS+=("$comm:$pid")
  done
}
# After the stop: none of the cluster's daemons alive (an exited one that PID 1 has not reaped yet,
# a zombie, is gone), none of its namespaces or links, no process of its jobs (their environment
# names its slurm.conf). Says what is left and fails, or says what it checked.
st_nothing_left() {
  local e pid comm left=() ns l p
  ((${#ST_PIDS[@]} + ${#ST_NETNS[@]})) || return 0 # no cluster was started
  for e in "${ST_PIDS[@]}"; do
    pid=${e#*:} comm=${e%%:*}
    [[ -d /proc/$pid ]] || continue
    grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && continue
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] && left+=("$comm $pid")
  done
  for ns in "${ST_NETNS[@]}"; do
    ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qxF "$ns" && left+=("netns $ns")
  done
  for l in "${ST_LINKS[@]}"; do ip link show "$l" >/dev/null 2>&1 && left+=("link $l"); done
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$CONF" && left+=("job process ${p#/proc/} ($(cat "$p/comm" 2>/dev/null))")
  done
  if ((${#left[@]})); then
    echo "[$TAG] FAIL: left running after the cluster's stop: ${left[*]}"
    return 1
  fi
  echo "[$TAG] ok: nothing of the cluster left: daemons ${ST_PIDS[*]:-(none)} exited; namespaces ${ST_NETNS[*]:-(none)} and links ${ST_LINKS[*]:-(none)} gone"
}
st_dump_logs() {
  local f
  for f in "$CLUSTER"/log/*.log; do
    echo "----- $f (last 30 lines)"
    tail -n 30 "$f"
  done
}
die() { echo "[$TAG] FAIL: $*"; st_dump_logs; exit 1; }

# ---- data -----------------------------------------------------------------------------------------
# The tests' python: Debian's where there is one (a python3 found on PATH may be a wrapper, such as
# pyenv's shim, that starts a dozen shells a call), else the first python3.
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
# st_write_shards DIR: train_000.bin (4096 tokens) and val_000.bin (1024) of a learnable sequence.
st_write_shards() {
  $PY - "$1" <<'EOF'
import random, struct, sys
# llm.c token shard: 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
rng = random.Random(1234)
for name, n in (("train_000.bin", 4096), ("val_000.bin", 1024)):
    # a learnable sequence: a repeating pattern with a little noise
    toks = [(i * 7 + (rng.random() < 0.1) * rng.randrange(64)) % 64 for i in range(n)]
    header = [20240520, 1, n] + [0] * 253
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{n}H", *toks))
EOF
}

# ---- jobs -----------------------------------------------------------------------------------------
job_field() { sl scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
# submit EXPORTS SBATCH_ARGS... -> prints the job id; output files go to $D/out. EXPORTS is
# ALL,NAME=VALUE,...: the values go into sbatch's own environment, and the job gets --export=ALL.
# (Named in --export, they would make slurmd run the user's login shell, su - USER, at every job's
# start: root's profile here starts pyenv, about a CPU second a job.)
submit() {
  local exp=$1 vars=()
  shift
  [[ $exp == ALL* ]] || die "submit: EXPORTS must start with ALL: $exp"
  [[ $exp == ALL,* ]] && IFS=, read -ra vars <<<"${exp#ALL,}"
  sl env "${vars[@]}" sbatch --parsable --export=ALL -o "$D/out/%x-%j.out" "$@" | cut -d';' -f1
}
FINAL_STATES=" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY PREEMPTED BOOT_FAIL DEADLINE "
job_done() { # the job has ended (any final state)
  [[ $FINAL_STATES == *" $(job_field "$1" JobState) "* ]]
}
# jobs_pending JOB...: how many of the jobs have not ended, from one scontrol call for all of them
# (a call a job at every poll cost the 2-core box more CPU than the jobs' own start-up).
jobs_pending() {
  local -A state=()
  local id st j n=0
  while read -r id st; do state[$id]=$st; done < <(sl scontrol show job --oneliner 2>/dev/null |
    sed -n 's/^JobId=\([0-9]*\) .* JobState=\([A-Z_]*\) .*/\1 \2/p')
  for j in "$@"; do [[ $FINAL_STATES == *" ${state[$j]:-unknown} "* ]] || n=$((n + 1)); done
  echo "$n"
}
out_file() { ls "$D"/out/*-"$1".out 2>/dev/null | head -n1; }
run_dir() { ls -d "$D/runs/"*-"$1" 2>/dev/null | head -n1; }
show_job() {
  echo "----- job $1: $(job_field "$1" JobState) $(job_field "$1" ExitCode); output $(out_file "$1"):"
  tail -n 40 "$(out_file "$1")" 2>/dev/null
}
