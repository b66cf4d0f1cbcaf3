#!/usr/bin/env bash
# The GPU run's harness stays green without a GPU (ctest gpu_harness): a bundle of the HOST build
# (job_scripts/gpu_bundle.sh with GPT2_BUNDLE_HOST_TEST=1, unpacked, no size cap) and gpu_run.sh's
# checks and multi phases on it (the multi phase's first 5 layouts), with a stand-in nvidia-smi on
# PATH. Every check must pass:
# kernel_check against the references, the tiny runs against the CPU losses (Muon's among them),
# mpi_tests on one rank (the tests that need two ranks skip), and the two-GPU layouts against the
# one-rank run (through MPI here: no NCCL). What a GPU machine's first minutes would otherwise spend on.
#   tests/gpu/test_harness.sh BUILD_DIR WORK_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
work=$2
rm -rf "$work"
mkdir -p "$work"
export CPU_BUILD_DIR=$build GPT2_BUNDLE_HOST_TEST=1 GPT2_BUNDLE_PACK=0 GPT2_BUNDLE_LIMIT_MIB=1000000
"$root/job_scripts/gpu_bundle.sh" "$work/bundle" > "$work/bundle.log" 2>&1 ||
  { tail -n 30 "$work/bundle.log"; echo "gpu_harness: the host-test bundle failed (log: $work/bundle.log)"; exit 1; }
export PATH=$root/tests/gpu/stand_in:$PATH PYTHON=/usr/bin/python3
rc=0
# The multi phase's first 5 cases (dp, tp, tp with sp, cp, pp): the layout matrix holds every layout
# to one rank; here the phase itself is tried.
(cd "$root" && GPT2_MULTI_FORCE=1 GPT2_MULTI_COMM=mpi GPT2_MULTI_LIMIT=5 bash job_scripts/gpu_run.sh "$work/bundle" "$work/out" checks,multi) ||
  rc=$?
cat "$work/out/summary.txt"
if ((rc != 0)) || grep -q '^FAIL' "$work/out/summary.txt" || ! grep -q '^PASS' "$work/out/summary.txt" ||
  ! grep -q '^PASS  tiny run, 1 rank, Muon' "$work/out/summary.txt"; then
  echo "gpu_harness: a check failed (exit $rc; log: $work/out/checks.log)"
  exit 1
fi
echo "gpu_harness: every check passed"
