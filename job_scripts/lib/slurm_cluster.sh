# shellcheck shell=bash
# A private Slurm cluster on this machine: the logic of job_scripts/local_cluster.sh (and through it
# of the Slurm tests, tests/slurm/). Sourced, never run; it defines functions only.
#
#   sc_start DIR NODES CPUS GPUS LOOPBACK    start one (LOOPBACK 1: one node on 127.0.0.1)
#   sc_stop DIR [KEEP]                        stop it and remove everything it made
#   sc_status DIR                             what runs, and the nodes as Slurm sees them
#   sc_kill_node DIR NODE                     "power off" one node: SIGKILL its slurmd and every
#                                             process in its network namespace
#
# Two kinds:
#  - loopback: one node named after this host on 127.0.0.1 (munged, slurmctld, slurmd), as the
#    one-node Slurm test has always used;
#  - nodes (the default): N nodes, each a network namespace with its own address on a private bridge
#    (10.77.X.0/24, an X no address or route here uses; the controller is X.254 on the bridge, node
#    i X.i), its own hostname (UTS namespace: gpt2n1, gpt2n2, ...), its own /etc/hosts naming every
#    node, and its own kernel boot id (mount namespace: a file bound over
#    /proc/sys/kernel/random/boot_id). The boot id is how UCX, MPICH's transport, tells whether two
#    processes share a machine: with one id per node it keeps its shared-memory transports inside a
#    node and goes over TCP between nodes, as between real machines; without it the "nodes" would
#    talk through shared memory. MPICH needs no setting for it (UCX picks TCP on the node's eth0).
#    slurmctld and munged run in this machine's own namespace (the controller answers on the
#    bridge address); one munge key serves all.
# Every node has CPUS CPUs (more than the machine's cores is fine: SlurmdParameters=config_overrides)
# and GPUS fake GPUs (gres with /dev/null symlinks: jobs asking for GPUs run, CUDA_VISIBLE_DEVICES
# set). All state (config, logs, spool, pid files, munge key) lives under DIR; DIR/cluster.env
# records every namespace, link and daemon as it is made, so that sc_stop removes exactly those,
# also after a start that failed half way.
# Needs root. Status 3 from sc_start: this machine cannot run it (message says why); 1: it failed.

sc_log() { echo "[local-cluster] $*"; }
sc_err() { echo "[local-cluster] ERROR: $*" >&2; }

# ---- packages ---------------------------------------------------------------------------------
sc_have_slurm() {
  local c
  for c in slurmctld slurmd munged mungekey sbatch srun scontrol squeue scancel sinfo; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$c" >/dev/null 2>&1 || return 1
  done
}

# sc_install_packages LOG LOOPBACK: what the cluster needs and this machine lacks, from Debian with apt-get:
# slurmctld and slurmd (they pull munge and the clients), without recommended packages; for the
# nodes kind also iproute2 (ip) and util-linux (nsenter, unshare). apt-get update only when the
# first try fails. Returns 1 when impossible.
sc_install_packages() {
  local log=$1 loopback=$2 pkgs=()
  sc_have_slurm || pkgs+=(slurmctld slurmd)
  if ((!loopback)); then
    command -v ip >/dev/null 2>&1 || pkgs+=(iproute2)
    command -v nsenter >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 || pkgs+=(util-linux)
  fi
  ((${#pkgs[@]})) || return 0
  command -v apt-get >/dev/null 2>&1 || { sc_err "${pkgs[*]} missing and there is no apt-get to install them"; return 1; }
  sc_log "installing ${pkgs[*]} (apt-get, no recommends; log $log)"
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
    -o DPkg::Lock::Timeout=600 "${pkgs[@]}")
  if ! "${install[@]}" >"$log" 2>&1; then
    apt-get update -q -o DPkg::Lock::Timeout=600 >>"$log" 2>&1
    "${install[@]}" >>"$log" 2>&1 || { tail -n 5 "$log" >&2; sc_err "could not install ${pkgs[*]} with apt-get (log: $log)"; return 1; }
  fi
  sc_have_slurm || { sc_err "slurmctld/slurmd installed but their commands are missing"; return 1; }
}

# ---- ports, processes -------------------------------------------------------------------------
# Ports nobody listens on here (from /proc/net/tcp*: no ss/netstat needed), picked at random.
sc_listening_ports() {
  local hex
  for hex in $(awk 'FNR > 1 && $4 == "0A" { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    echo $((16#$hex))
  done
}
sc_pick_port() { # sc_pick_port [PORTS TO AVOID...]
  local used p i
  used=" $(sc_listening_ports | tr '\n' ' ') $* "
  for i in $(seq 200); do
    p=$((20000 + RANDOM % 30000))
    [[ $used != *" $p "* ]] && { echo "$p"; return 0; }
  done
  return 1
}

# A zombie counts as gone: the sandbox this runs in may reap exited processes a second or two late.
sc_alive() { [[ -d /proc/$1 ]] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# sc_is PID COMM: PID is alive and is still a COMM (not a reused PID): nothing is signalled otherwise.
sc_is() { sc_alive "$1" && [[ $(cat "/proc/$1/comm" 2>/dev/null) == "$2" ]]; }
sc_pid_alive() { # sc_pid_alive PIDFILE COMM
  local pid
  [[ -s $1 ]] || return 1
  pid=$(tr -dc 0-9 <"$1")
  [[ -n $pid ]] && sc_is "$pid" "$2"
}

# The cluster's daemons as COMM:PID entries: recorded in SC_PIDS as each one starts (the daemons
# delete their pid files as they exit, so these stay checkable until the end), and whatever their
# pid files name (a start that failed half way may not have recorded one).
sc_pidfiles() { # sc_pidfiles COMM: the pid files of COMM daemons
  case $1 in
    slurmd) ls "$SC_DIR"/run/slurmd-*.pid 2>/dev/null ;;
    slurmctld) echo "$SC_DIR/run/slurmctld.pid" ;;
    munged) echo "$SC_DIR/munge/munged.pid" ;;
  esac
}
sc_daemons() { # sc_daemons COMM...: COMM:PID of every one recorded or in a pid file, each once
  local comm e f pid out=()
  for comm in "$@"; do
    for e in "${SC_PIDS[@]}"; do [[ ${e%%:*} == "$comm" && " ${out[*]} " != *" $e "* ]] && out+=("$e"); done
    for f in $(sc_pidfiles "$comm"); do
      [[ -s $f ]] || continue
      pid=$(tr -dc 0-9 <"$f")
      [[ -n $pid && " ${out[*]} " != *" $comm:$pid "* ]] && out+=("$comm:$pid")
    done
  done
  echo "${out[*]}"
}
# sc_children PID COMM: COMM:CHILD of PID's children named COMM (slurmctld's slurmscriptd).
sc_children() {
  local p s ppid
  for p in /proc/[0-9]*; do
    s=$(cat "$p/stat" 2>/dev/null) || continue
    read -r _ ppid _ <<<"${s##*) }" # after "PID (comm) ": state, ppid
    [[ $ppid == "$1" && $(cat "$p/comm" 2>/dev/null) == "$2" ]] && echo "$2:${p#/proc/}"
  done
}
# sc_record COMM PIDFILE [SECONDS]: waits (default 10 s) for PIDFILE to name a live COMM and adds
# it to SC_PIDS (saved at once, so that a stop after a failed start finds it too).
sc_record() {
  local comm=$1 file=$2 i pid
  for ((i = 0; i < ${3:-10} * 10; i++)); do
    pid=$(tr -dc 0-9 <"$file" 2>/dev/null)
    if [[ -n $pid ]] && sc_is "$pid" "$comm"; then
      [[ " ${SC_PIDS[*]} " == *" $comm:$pid "* ]] || SC_PIDS+=("$comm:$pid")
      sc_save
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# sc_wait_gone SECONDS COMM:PID...: waits until none of them is alive (a zombie is gone); SC_STILL
# holds those still alive. Returns 1 when some are.
SC_STILL=()
sc_wait_gone() {
  local limit=$1 i e
  shift
  for ((i = 0; ; i++)); do
    SC_STILL=()
    for e in "$@"; do sc_is "${e#*:}" "${e%%:*}" && SC_STILL+=("$e"); done
    ((${#SC_STILL[@]})) || return 0
    ((i >= limit * 10)) && return 1
    sleep 0.1
  done
}
# sc_stop_procs COMM:PID...: SIGTERM each that still is that COMM (never a process by name), waits
# up to 20 s for all to exit (a loaded machine: slurmctld saves its state first), SIGKILLs those
# left and waits up to 5 s more. Returns 1, saying which, when any is still alive then.
sc_stop_procs() {
  local e sent=()
  for e in "$@"; do
    sc_is "${e#*:}" "${e%%:*}" || continue
    kill -TERM "${e#*:}" 2>/dev/null
    sent+=("$e")
  done
  ((${#sent[@]})) || return 0
  sc_wait_gone 20 "${sent[@]}" && return 0
  for e in "${SC_STILL[@]}"; do
    sc_log "${e%%:*} (${e#*:}) still running 20 s after SIGTERM: SIGKILL"
    sc_is "${e#*:}" "${e%%:*}" && kill -KILL "${e#*:}" 2>/dev/null
  done
  sc_wait_gone 5 "${SC_STILL[@]}" && return 0
  sc_err "still running after SIGKILL: ${SC_STILL[*]/:/ }"
  return 1
}

# Processes of the cluster's jobs that outlive their slurmd: job steps and the tasks they run carry
# SLURM_CONF=<this cluster's slurm.conf> (and the tasks SLURM_JOB_ID) in their environment, which
# nothing else has (a user's shell with SLURM_CONF set has no SLURM_JOB_ID and is left alone).
# (A zombie's environment reads empty: job processes that have exited are not listed.)
sc_stragglers() {
  local conf=$1 p env comm
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$p/environ") || continue
    grep -qxF "SLURM_CONF=$conf" <<<"$env" || continue
    comm=$(cat "/proc/$p/comm" 2>/dev/null)
    if [[ $comm == slurmstepd ]] || grep -q '^SLURM_JOB_ID=' <<<"$env"; then echo "$p"; fi
  done
}
# sc_kill_all LISTING_COMMAND...: TERM what the command lists, waits up to 5 s for the listing to be
# empty, then KILL and up to 5 s more. Returns 1, saying what is left, when it is not empty then.
sc_kill_all() {
  local sig p i
  for sig in TERM KILL; do
    for p in $("$@"); do kill -"$sig" "$p" 2>/dev/null; done
    for i in $(seq 10); do
      [[ -z $("$@") ]] && return 0
      sleep 0.5
    done
  done
  sc_err "still running after SIGKILL ($*): $("$@" | paste -sd' ')"
  return 1
}

# ---- state --------------------------------------------------------------------------------------
# DIR/cluster.env: shell assignments, rewritten after every namespace, link or daemon made.
sc_save() {
  {
    echo "# made by job_scripts/local_cluster.sh; read by its stop and status"
    # (declare -g: sc_load sources this inside a function)
    declare -p SC_MODE SC_ID SC_NODES SC_ADDRS SC_NETNS SC_VETHS SC_BRIDGE SC_CTL_ADDR SC_CTLD_PORT SC_SLURMD_PORT SC_OWN_DIR \
      SC_PIDS 2>/dev/null |
      sed -e 's/^declare -- /declare -g /;t' -e 's/^declare -\([a-zA-Z]*\) /declare -g\1 /'
  } >"$SC_DIR/cluster.env.tmp" && mv "$SC_DIR/cluster.env.tmp" "$SC_DIR/cluster.env"
}
sc_load() { # sc_load DIR
  SC_DIR=$1
  SC_MODE="" SC_ID="" SC_NODES=() SC_ADDRS=() SC_NETNS=() SC_VETHS=() SC_BRIDGE="" SC_CTL_ADDR=""
  SC_CTLD_PORT="" SC_SLURMD_PORT="" SC_OWN_DIR=0 SC_PIDS=()
  [[ -f $SC_DIR/cluster.env ]] || return 1
  # shellcheck disable=SC1091
  source "$SC_DIR/cluster.env"
}
sc_conf() { echo "$SC_DIR/etc/slurm.conf"; }
sc_sl() { SLURM_CONF=$(sc_conf) "$@"; } # a Slurm client command against this cluster

# ---- checks -------------------------------------------------------------------------------------
# Prints why this machine cannot run the nodes kind (returns 1): no namespaces or bridge; or nothing.
sc_cannot_run() {
  local loopback=$1 probe
  ((loopback)) && return 0
  local c
  for c in ip nsenter unshare mount; do
    command -v "$c" >/dev/null 2>&1 || { echo "no '$c' command (iproute2, util-linux)"; return 1; }
  done
  probe=g2probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "cannot create network namespaces here (ip netns add failed)"
    return 1
  fi
  if ! nsenter --net="/run/netns/$probe" -- unshare --uts --mount -- true 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create UTS and mount namespaces here (unshare --uts --mount failed)"
    return 1
  fi
  if ! ip link add "${probe}b" type bridge 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create a bridge here (ip link add type bridge failed)"
    return 1
  fi
  ip link del "${probe}b" 2>/dev/null
  ip netns del "$probe" 2>/dev/null
  return 0
}

# A third octet for 10.77.X.0/24 that no address or route here uses.
sc_pick_subnet() {
  local used x i
  used=$(ip -o -4 addr 2>/dev/null; ip -4 route 2>/dev/null)
  for i in $(seq 250); do
    x=$(((RANDOM + i) % 250 + 1))
    [[ $used == *"10.77.$x."* ]] || { echo "$x"; return 0; }
  done
  return 1
}

# ---- configuration --------------------------------------------------------------------------------
sc_write_conf() { # sc_write_conf CPUS GPUS CTL_HOST
  local cpus=$1 gpus=$2 ctl_host=$3 conf i n
  conf=$(sc_conf)
  {
    echo "# Private Slurm cluster of job_scripts/local_cluster.sh ($SC_MODE, ${#SC_NODES[@]} node(s))"
    echo "ClusterName=gpt2local"
    echo "SlurmctldHost=$ctl_host($SC_CTL_ADDR)"
    echo "SlurmctldPort=$SC_CTLD_PORT"
    echo "SlurmdPort=$SC_SLURMD_PORT"
    cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SC_DIR/munge/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=pmi2
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
MailProg=/bin/true
MinJobAge=600
KillWait=5
InactiveLimit=0
# A node that stops answering is DOWN after 10 s (slurmctld pings every SlurmdTimeout/3): its jobs
# end as NODE_FAIL and requeue (JobRequeue=1: batch jobs submitted with --requeue).
SlurmdTimeout=10
JobRequeue=1
StateSaveLocation=$SC_DIR/state
SlurmdSpoolDir=$SC_DIR/spool/%n
SlurmctldPidFile=$SC_DIR/run/slurmctld.pid
SlurmdPidFile=$SC_DIR/run/slurmd-%n.pid
SlurmctldLogFile=$SC_DIR/log/slurmctld.log
SlurmdLogFile=$SC_DIR/log/slurmd-%n.log
SlurmctldDebug=debug2
SlurmdDebug=info
GresTypes=gpu
EOF
    for i in "${!SC_NODES[@]}"; do
      echo "NodeName=${SC_NODES[i]} NodeAddr=${SC_ADDRS[i]} CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=2000 Gres=gpu:$gpus State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${SC_NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$conf"
  {
    echo "AutoDetect=off"
    for n in "${SC_NODES[@]}"; do
      mkdir -p "$SC_DIR/fakegpu/$n" "$SC_DIR/spool/$n"
      for ((i = 0; i < gpus; i++)); do ln -sfn /dev/null "$SC_DIR/fakegpu/$n/nvidia$i"; done
      ((gpus > 0)) && echo "NodeName=$n Name=gpu File=$SC_DIR/fakegpu/$n/nvidia[0-$((gpus - 1))]"
    done
  } >"$SC_DIR/etc/gres.conf"
}

# ---- the network (nodes kind) -------------------------------------------------------------------
sc_make_network() {
  local x i ns veth
  x=$(sc_pick_subnet) || { sc_err "no free 10.77.X.0/24 subnet"; return 1; }
  SC_CTL_ADDR=10.77.$x.254
  SC_BRIDGE=${SC_ID}br
  SC_ADDRS=()
  for i in "${!SC_NODES[@]}"; do SC_ADDRS+=("10.77.$x.$((i + 1))"); done
  sc_save
  ip link add "$SC_BRIDGE" type bridge || { sc_err "ip link add $SC_BRIDGE type bridge failed"; return 1; }
  ip addr add "$SC_CTL_ADDR/24" dev "$SC_BRIDGE" && ip link set "$SC_BRIDGE" up ||
    { sc_err "cannot bring up $SC_BRIDGE with $SC_CTL_ADDR"; return 1; }
  for i in "${!SC_NODES[@]}"; do
    ns=$SC_ID-n$((i + 1)) veth=${SC_ID}v$((i + 1))
    SC_NETNS+=("$ns")
    sc_save
    ip netns add "$ns" || { sc_err "ip netns add $ns failed"; return 1; }
    SC_VETHS+=("$veth")
    sc_save
    # the node's end is its eth0
    ip link add "$veth" type veth peer name eth0 netns "$ns" &&
      ip link set "$veth" master "$SC_BRIDGE" up &&
      ip -n "$ns" addr add "${SC_ADDRS[i]}/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$ns" link set lo up || { sc_err "cannot wire node ${SC_NODES[i]} ($ns, ${SC_ADDRS[i]})"; return 1; }
  done
  # Each node's /etc/hosts and boot id (bound over the real ones inside its mount namespace).
  {
    echo "127.0.0.1 localhost"
    echo "$SC_CTL_ADDR $(hostname -s)"
    for i in "${!SC_NODES[@]}"; do echo "${SC_ADDRS[i]} ${SC_NODES[i]}"; done
  } >"$SC_DIR/etc/hosts"
  for n in "${SC_NODES[@]}"; do cat /proc/sys/kernel/random/uuid >"$SC_DIR/etc/boot_id.$n"; done
}

# sc_in_node I CMD...: runs CMD as node I (its network, hostname, /etc/hosts, boot id). Daemons it
# starts stay in those namespaces; the mount namespace ends with its last process.
sc_in_node() {
  local i=$1
  shift
  nsenter --net="/run/netns/${SC_NETNS[i]}" -- unshare --uts --mount --propagation private -- \
    /bin/sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /proc/sys/kernel/random/boot_id &&
      shift 3 && exec "$@"' sh "${SC_NODES[i]}" "$SC_DIR/etc/hosts" "$SC_DIR/etc/boot_id.${SC_NODES[i]}" "$@"
}

# ---- start --------------------------------------------------------------------------------------------
# sc_start DIR NODES CPUS GPUS LOOPBACK: the caller cleans up (sc_stop) when this fails.
sc_start() {
  local nodes=$2 cpus=$3 gpus=$4 loopback=$5 why i state
  SC_DIR=$1
  [[ $(id -u) == 0 ]] || { sc_err "needs root (the Slurm daemons, namespaces)"; return 3; }
  export PATH=$PATH:/usr/sbin:/sbin
  sc_install_packages "${TMPDIR:-/tmp}/gpt2-cluster-apt.log" "$loopback" || return 3
  if why=$(sc_cannot_run "$loopback"); then :; else sc_err "$why"; return 3; fi
  if [[ -f $SC_DIR/cluster.env ]] && sc_load "$SC_DIR" && sc_pid_alive "$SC_DIR/run/slurmctld.pid" slurmctld; then
    sc_err "a cluster already runs from $SC_DIR (stop it first: local_cluster.sh stop --dir $SC_DIR)"
    return 1
  fi
  SC_OWN_DIR=0
  [[ -e $SC_DIR ]] || SC_OWN_DIR=1
  mkdir -p "$SC_DIR"/{etc,state,spool,run,log} || return 1
  chmod 755 "$SC_DIR"
  install -d -m 755 "$SC_DIR/munge"  # (munged refuses a socket folder others cannot reach)
  SC_DIR=$(cd "$SC_DIR" && pwd)
  SC_MODE="" SC_NODES=() SC_ADDRS=() SC_NETNS=() SC_VETHS=() SC_BRIDGE="" SC_ID="" SC_CTL_ADDR=""
  SC_CTLD_PORT="" SC_SLURMD_PORT="" SC_PIDS=()
  sc_save
  SC_CTLD_PORT=$(sc_pick_port) && SC_SLURMD_PORT=$(sc_pick_port "$SC_CTLD_PORT") || { sc_err "no free port"; return 1; }
  local ctl_host
  ctl_host=$(hostname -s)
  if ((loopback)); then
    SC_MODE=loopback
    SC_NODES=("$ctl_host") SC_ADDRS=(127.0.0.1) SC_CTL_ADDR=127.0.0.1
    sc_save
  else
    SC_MODE=nodes
    # g2c + 4 hex digits: namespace and link names no other cluster here uses (names <= 15 chars)
    for i in $(seq 50); do
      SC_ID=g2c$(printf '%04x' $((RANDOM % 65536)))
      [[ -z $(ip netns list 2>/dev/null | grep "^$SC_ID") && -z $(ip -o link 2>/dev/null | grep "$SC_ID") ]] && break
    done
    for ((i = 1; i <= nodes; i++)); do SC_NODES+=("gpt2n$i"); done
    sc_save
    sc_make_network || return 1
  fi
  sc_write_conf "$cpus" "$gpus" "$ctl_host"
  sc_save
  local conf
  conf=$(sc_conf)

  # munge: one key, one daemon for every node (they share this machine's file system)
  mungekey -c -b 1024 -k "$SC_DIR/munge/munge.key" || { sc_err "mungekey failed"; return 1; }
  munged --key-file="$SC_DIR/munge/munge.key" --socket="$SC_DIR/munge/munge.socket" \
    --pid-file="$SC_DIR/munge/munged.pid" --log-file="$SC_DIR/log/munged.log" \
    --seed-file="$SC_DIR/munge/munged.seed" || { sc_err "munged did not start"; return 1; }
  for i in $(seq 50); do [[ -S $SC_DIR/munge/munge.socket ]] && break; sleep 0.1; done
  [[ -S $SC_DIR/munge/munge.socket ]] || { sc_err "munged made no socket"; return 1; }
  sc_record munged "$SC_DIR/munge/munged.pid" || { sc_err "munged wrote no pid file"; return 1; }

  env SLURM_CONF="$conf" slurmctld -c -f "$conf" || { sc_err "slurmctld did not start"; return 1; }
  sc_record slurmctld "$SC_DIR/run/slurmctld.pid" || { sc_err "slurmctld wrote no pid file"; return 1; }
  for i in "${!SC_NODES[@]}"; do
    if ((loopback)); then
      env SLURM_CONF="$conf" slurmd -f "$conf" || { sc_err "slurmd did not start"; return 1; }
    else
      sc_in_node "$i" env SLURM_CONF="$conf" slurmd -f "$conf" -N "${SC_NODES[i]}" ||
        { sc_err "slurmd of ${SC_NODES[i]} did not start"; return 1; }
    fi
    sc_record slurmd "$SC_DIR/run/slurmd-${SC_NODES[i]}.pid" || { sc_err "slurmd of ${SC_NODES[i]} wrote no pid file"; return 1; }
  done
  # every node idle
  for i in $(seq 150); do
    state=$(sc_sl sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | wc -l)
    ((state == ${#SC_NODES[@]})) && break
    sleep 0.2
  done
  if ((state != ${#SC_NODES[@]})); then
    sc_err "nodes not idle after 30 s: $(sc_sl sinfo -h -N -o '%N=%T' 2>/dev/null | paste -sd' ')"
    tail -n 5 "$SC_DIR"/log/slurmd*.log "$SC_DIR/log/slurmctld.log" >&2
    return 1
  fi
  # slurmctld's helper for scripts, forked at its start: a daemon of this cluster too
  local c e
  for c in $(sc_daemons slurmctld); do
    for e in $(sc_children "${c#*:}" slurmscriptd); do SC_PIDS+=("$e"); done
  done
  sc_save
  return 0
}

# ---- stop ---------------------------------------------------------------------------------------------
sc_ns_pids() { [[ -e /run/netns/$1 ]] && ip netns pids "$1" 2>/dev/null; }

# sc_stop DIR [KEEP]: cancels the jobs, stops the daemons, kills what is left of the jobs, removes
# the namespaces, links and bridge, and DIR itself when start made it (KEEP=1: leaves DIR).
# It returns only when every daemon it signalled has exited and every namespace and link is gone
# (bounded waits; SIGKILL after SIGTERM); when something is still there it says what and returns 1.
# Safe to run twice, and on a half-started cluster.
sc_stop() {
  local keep=${2:-0} i n jobs ns conf ok=1 c e ctld scriptd=() all
  sc_load "$1" || { sc_log "no cluster in $1 (no cluster.env)"; return 0; }
  export PATH=$PATH:/usr/sbin:/sbin
  conf=$(sc_conf)
  if sc_pid_alive "$SC_DIR/run/slurmctld.pid" slurmctld; then
    jobs=$(sc_sl squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [[ -n ${jobs// /} ]]; then
      # shellcheck disable=SC2086
      sc_sl scancel $jobs 2>/dev/null
      for i in $(seq 50); do [[ -z $(sc_sl squeue -h -t R,CG -o %i 2>/dev/null) ]] && break; sleep 0.2; done
    fi
  fi
  # Every daemon, looked up now (pid files go as the daemons exit): checked again at the end.
  all=$(sc_daemons slurmd slurmctld slurmscriptd munged)
  ctld=$(sc_daemons slurmctld)
  for e in $(sc_daemons slurmscriptd); do scriptd+=("$e"); done
  for c in $ctld; do
    for e in $(sc_children "${c#*:}" slurmscriptd); do [[ " ${scriptd[*]} " == *" $e "* ]] || scriptd+=("$e"); done
  done
  all+=" ${scriptd[*]}"
  # shellcheck disable=SC2046
  sc_stop_procs $(sc_daemons slurmd) || ok=0
  for ns in "${SC_NETNS[@]}"; do sc_kill_all sc_ns_pids "$ns" || ok=0; done
  sc_kill_all sc_stragglers "$conf" || ok=0
  # shellcheck disable=SC2086
  sc_stop_procs $ctld || ok=0
  # slurmctld ends its slurmscriptd as it exits; one that outlives it is stopped here
  sc_wait_gone 5 "${scriptd[@]}" || sc_stop_procs "${scriptd[@]}" || ok=0
  # shellcheck disable=SC2046
  sc_stop_procs $(sc_daemons munged) || ok=0
  for n in "${SC_VETHS[@]}"; do ip link del "$n" 2>/dev/null; done
  for ns in "${SC_NETNS[@]}"; do [[ -e /run/netns/$ns ]] && ip netns del "$ns"; done
  [[ -n $SC_BRIDGE ]] && ip link del "$SC_BRIDGE" 2>/dev/null
  # a namespace's links go away a moment after the namespace (the kernel cleans up in the background)
  local left
  for i in $(seq 50); do
    # shellcheck disable=SC2086
    left=$(sc_leftovers $all)
    [[ -z $left ]] && break
    sleep 0.1
  done
  [[ -n $left ]] && sc_err "left behind: $left"
  # The daemons have exited; give PID 1 (here a sandbox's, slow to reap) a moment to reap them, so
  # that a process listing right after this shows none of them, not even as a zombie.
  for i in $(seq 50); do
    n=0
    for e in $all; do [[ -d /proc/${e#*:} && $(cat "/proc/${e#*:}/comm" 2>/dev/null) == "${e%%:*}" ]] && n=1; done
    ((n)) || break
    sleep 0.1
  done
  if ((keep)); then
    sc_log "kept $SC_DIR"
  elif ((SC_OWN_DIR)); then
    rm -rf "$SC_DIR"
  else
    rm -f "$SC_DIR/cluster.env"
  fi
  ((ok)) && [[ -z $left ]]
}

# sc_leftovers [COMM:PID...]: what of this cluster still exists (namespaces, links, daemons: those
# given and those recorded or in pid files, job processes), one line; "" if none.
sc_leftovers() {
  local out=() ns n e
  for ns in "${SC_NETNS[@]}"; do [[ -e /run/netns/$ns ]] && out+=("netns $ns"); done
  if [[ -n $SC_ID ]]; then
    for n in $(ip -o link 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1 | grep "^$SC_ID"); do out+=("link $n"); done
  fi
  for e in "$@" $(sc_daemons slurmd slurmctld slurmscriptd munged); do
    sc_is "${e#*:}" "${e%%:*}" && [[ " ${out[*]} " != *" ${e%%:*} ${e#*:} "* ]] && out+=("${e%%:*} ${e#*:}")
  done
  local p
  for p in $(sc_stragglers "$(sc_conf)"); do out+=("job process $p"); done
  echo "${out[*]}"
}

# ---- status, kill-node -------------------------------------------------------------------------------
sc_status() {
  sc_load "$1" || { echo "no cluster in $1"; return 1; }
  local i n up=0
  echo "cluster: $SC_MODE, ${#SC_NODES[@]} node(s), state in $SC_DIR"
  echo "export SLURM_CONF=$(sc_conf)"
  sc_pid_alive "$SC_DIR/munge/munged.pid" munged && echo "munged: running" || echo "munged: NOT running"
  if sc_pid_alive "$SC_DIR/run/slurmctld.pid" slurmctld; then
    echo "slurmctld: running on $SC_CTL_ADDR:$SC_CTLD_PORT"
    up=1
  else
    echo "slurmctld: NOT running"
  fi
  for i in "${!SC_NODES[@]}"; do
    n=${SC_NODES[i]}
    printf 'node %s: %s%s, slurmd %s\n' "$n" "${SC_ADDRS[i]}" "${SC_NETNS[i]:+ (netns ${SC_NETNS[i]})}" \
      "$(sc_pid_alive "$SC_DIR/run/slurmd-$n.pid" slurmd && echo running || echo 'NOT running')"
  done
  if ((up)); then
    sc_sl sinfo -N -o '%N %T %c CPUs, gres %G'
    sc_sl squeue
  fi
}

# sc_kill_node DIR NODE: a node lost: SIGKILL its slurmd and every process in its network
# namespace (job steps, ranks), at once. Its network stays, as a crashed machine's NIC might.
sc_kill_node() {
  sc_load "$1" || { sc_err "no cluster in $1"; return 1; }
  local node=$2 i p pids
  [[ $SC_MODE == nodes ]] || { sc_err "kill-node needs a cluster of namespaced nodes (not --loopback)"; return 1; }
  for i in "${!SC_NODES[@]}"; do
    [[ ${SC_NODES[i]} == "$node" ]] || continue
    pids=$(sc_ns_pids "${SC_NETNS[i]}")
    # shellcheck disable=SC2086
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
    for p in $(seq 50); do [[ -z $(sc_ns_pids "${SC_NETNS[i]}") ]] && break; sleep 0.1; done
    sc_log "node $node: killed $(wc -w <<<"$pids") process(es) (slurmd, job steps, ranks)"
    return 0
  done
  sc_err "no node '$node' (nodes: ${SC_NODES[*]})"
  return 1
}
