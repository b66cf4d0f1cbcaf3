#!/usr/bin/env bash
# A private Slurm cluster on this machine, to try the job scripts on: N nodes (default 2), each a
# network namespace with its own address on a private bridge (10.77.X.0/24), its own hostname
# (gpt2n1, gpt2n2, ...), 4 CPUs and 4 fake GPUs; slurmctld, one slurmd per node, munge; MPICH
# between the nodes over TCP, as between real machines. Needs root (on Debian it installs
# slurmctld and slurmd with apt-get when missing).
#
#   job_scripts/local_cluster.sh start [--nodes N] [--cpus C] [--gpus G] [--loopback] [--dir DIR]
#   job_scripts/local_cluster.sh status [--dir DIR]
#   job_scripts/local_cluster.sh stop [--dir DIR] [--keep]
#   job_scripts/local_cluster.sh kill-node NODE [--dir DIR]
#   job_scripts/local_cluster.sh env [--dir DIR]
#
# For example (from the repository root, with build/bin/gpt2 built and inputs/tiny.toml's data):
#   job_scripts/local_cluster.sh start
#   export SLURM_CONF=/tmp/gpt2-cluster/etc/slurm.conf          # what start printed
#   sbatch -N 2 job_scripts/dp.slurm inputs/tiny.toml           # dp=4: 2 ranks on each node
#   PP=2 sbatch -N 2 job_scripts/hybrid.slurm inputs/tiny.toml  # dp=4 x pp=2, 4 ranks a node
#   squeue; sinfo -N
#   job_scripts/local_cluster.sh stop
#
# start      starts the cluster (it waits until every node is idle) and prints the SLURM_CONF line
#            the client commands need; on any failure it removes what it made and exits non-zero
# status     daemons, nodes and jobs
# stop       cancels every job, stops the daemons and whatever the jobs left, removes the
#            namespaces, links and bridge, and DIR when start made it (--keep: leave DIR); it
#            returns once each daemon it signalled has exited (SIGKILL 20 s after SIGTERM) and each
#            namespace and link is gone, or says what is left and exits 1
# kill-node  a node lost: SIGKILL its slurmd and every process on it (job steps, ranks)
# env        prints the export line for SLURM_CONF
# Options:
#   --nodes N     nodes (default 2)
#   --cpus C      CPUs per node (default 4; more than this machine's cores is fine)
#   --gpus G      fake GPUs per node (default 4): /dev/null symlinks as gres, so --gpus-per-node works
#   --loopback    one node named after this machine on 127.0.0.1, no namespaces
#   --dir DIR     where all its state lives (default ${TMPDIR:-/tmp}/gpt2-cluster)
#   --keep        stop: keep DIR (logs: DIR/log/)
# Exit status: 0 done, 1 failed, 2 bad usage, 3 this machine cannot run it (not root, no network
# namespaces, Slurm not installable), said in one line.
# Jobs inherit the submitting shell's environment as usual (GPT2_BIN, ...); everything is on this
# machine's one file system, so the repository and run folders are "shared" between the nodes.
set -uo pipefail
# shellcheck source=job_scripts/lib/slurm_cluster.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/slurm_cluster.sh"

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; }
bad() { echo "local_cluster.sh: $*" >&2; echo "usage: job_scripts/local_cluster.sh start|status|stop|kill-node|env [options] (--help)" >&2; exit 2; }

cmd=${1:-}
[[ -n $cmd ]] || bad "no command"
shift
node=""
[[ $cmd == kill-node ]] && { node=${1:-}; [[ -n $node && $node != -* ]] || bad "kill-node needs a NODE"; shift; }
nodes=2 cpus=4 gpus=4 loopback=0 dir=${TMPDIR:-/tmp}/gpt2-cluster keep=0
uint() { [[ $2 =~ ^[0-9]+$ ]] && (($2 >= $3)) || bad "$1 needs a whole number >= $3, got '$2'"; }
while (($#)); do
  case $1 in
    --nodes) uint --nodes "${2:-}" 1; nodes=$2; shift 2 ;;
    --cpus) uint --cpus "${2:-}" 1; cpus=$2; shift 2 ;;
    --gpus) uint --gpus "${2:-}" 0; gpus=$2; shift 2 ;;
    --loopback) loopback=1; shift ;;
    --dir) [[ -n ${2:-} ]] || bad "--dir needs a folder"; dir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) bad "unknown option '$1'" ;;
  esac
done
((loopback && nodes != 1)) && { [[ $nodes == 2 ]] && nodes=1 || bad "--loopback is one node"; }

case $cmd in
  -h | --help | help) usage; exit 0 ;;
  start)
    t0=$SECONDS
    rc=0
    # Whatever happens (a failure, Ctrl-C), a start that did not finish leaves nothing behind.
    trap 'trap - INT TERM; sc_stop "$dir" >/dev/null 2>&1; exit 130' INT TERM
    sc_start "$dir" "$nodes" "$cpus" "$gpus" "$loopback" || rc=$?
    trap - INT TERM
    if ((rc)); then
      sc_stop "$dir" 0 >/dev/null 2>&1
      exit "$rc"
    fi
    sc_log "up in $((SECONDS - t0)) s: $(sc_sl sinfo -h -N -o '%N' | paste -sd' ') ($cpus CPUs, $gpus GPUs each); state in $SC_DIR"
    echo "export SLURM_CONF=$(sc_conf)"
    ;;
  stop) sc_stop "$dir" "$keep" ;;
  status) sc_status "$dir" ;;
  kill-node) sc_kill_node "$dir" "$node" ;;
  env) sc_load "$dir" || { echo "no cluster in $dir" >&2; exit 1; }; echo "export SLURM_CONF=$(sc_conf)" ;;
  *) bad "unknown command '$cmd'" ;;
esac
