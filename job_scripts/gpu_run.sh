#!/usr/bin/env bash
# Runs the GPU checks and the throughput benchmark on a machine with an NVIDIA GPU, from the bundle
# made by job_scripts/gpu_bundle.sh (CUDA binaries, MPICH/HDF5 runtime, references). The machine
# needs the NVIDIA driver, cuBLAS + NCCL (a CUDA 13 install or PyTorch's CUDA wheels) and python3
# with numpy (and torch for the benchmark); no MPI, HDF5 or network.
#
# Usage, from the repository root:  bash job_scripts/gpu_run.sh [BUNDLE] [OUTDIR] [PHASES]
#   BUNDLE  the bundle folder gpu_bundle.sh made (default gpu-bundle): what goes in
#   OUTDIR  where the results go (default gpu-results), at most 8 files:
#           summary.txt env.txt checks.log sanitize.log bench.log bench.json unit_tests.log trace_dp2.h5
#   PHASES  comma-separated, in this order: checks, multi, sanitize, profile, bench, unit (default:
#           all six in one call). A call is bounded: 9 minutes for one phase, 24 for several (checks that would
#           overrun are marked SKIP); under a job or session limit per command, run a phase a call:
#             bash job_scripts/gpu_run.sh gpu-bundle gpu-results checks
#             bash job_scripts/gpu_run.sh gpu-bundle gpu-results multi
#             bash job_scripts/gpu_run.sh gpu-bundle gpu-results sanitize
#             bash job_scripts/gpu_run.sh gpu-bundle gpu-results profile
#             bash job_scripts/gpu_run.sh gpu-bundle gpu-results bench
#             bash job_scripts/gpu_run.sh gpu-bundle gpu-results unit
#           (summary.txt keeps the lines of earlier calls into the same OUTDIR.)
#     checks:   kernel_check against the CPU reference in fp32 (1e-5), TF32 (2e-3 for GEMMs) and the
#               mixed-precision kernels (1e-3; roundings, copies and the working copy exact); tiny
#               training runs whose losses must equal the CPU run's to 1e-4: 1 rank, 1 rank with
#               Muon's Newton-Schulz on bf16 inputs (6e-5), 1 rank whose deck names nccl (one rank
#               makes no NCCL call), 2 ranks on the one GPU through MPI's host-staged path (dp=2 with an HDF5 trace; pp=2; pp=2 under NCCL's ordering,
#               mpi-ordered); mpi_tests on 1 rank (MPI and NCCL communicators, NCCL at size 1)
#     multi:    with two GPUs or more: the tiny model (4 layers) on 2 ranks, one GPU each, NCCL between
#               them -- dp 2, pp 2 in all eight schedules, tp 2 (and with sequence parallelism), cp 2
#               -- each equal to its one-GPU run (1e-4); SKIP on one GPU (job_scripts/lib/gpu_multi.sh)
#     sanitize: one tiny training step under compute-sanitizer memcheck, synccheck and initcheck (any
#               error fails), and racecheck (a hazard it rates an error fails; its warnings are counted
#               in the summary); skipped, saying so, where compute-sanitizer is not installed
#     profile:  the per-kernel table of one steady GPT-2 124M bf16 step (B 16, T 1024), kernel_table.md:
#               every Kokkos kernel and GEMM timed by CUDA events (tests/bench/step_profile.hpp), each
#               GEMM shape standalone against cuBLASLt's best algorithm (gemm_sweep), each kernel's
#               DRAM bytes from Nsight Compute where ncu is installed, against the device-to-device
#               copy bandwidth measured in the same call; the same step with fused attention after it.
#               The raw files go to OUTDIR/profile/
#     bench:    tests/bench/bench_gpu.py: GPT-2 124M, T=1024, largest batch of 16/8/4, fp32, TF32 and
#               bf16, ours against PyTorch eager (then torch.compile and SDPA as time allows), MFU,
#               per-phase and per-kernel times
#     unit:     the unit test suite on the GPU
# Environment: GPT2_GPU_RUN_BUDGET (seconds for the phases of this call, default 540 for one phase,
#   1440 for several), PYTHON (python3), GPT2_CUDA_LIBS (folders holding libcublas.so.13 /
#   libnccl.so.2, if the search in bundle/bin/env.sh does not find them), BENCH_ARGS (extra
#   arguments for bench_gpu.py).
# Exit status: 0 every check passed; 1 a check failed; 2 no GPU, no usable bundle or bad arguments.
set -uo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=${1:-gpu-bundle}
OUT=${2:-gpu-results}
PHASES=${3:-checks,multi,sanitize,profile,bench,unit}
[[ $PHASES == all ]] && PHASES=checks,multi,sanitize,profile,bench,unit
n_phases=$(tr ',' '\n' <<<"$PHASES" | grep -c .)
BUDGET=${GPT2_GPU_RUN_BUDGET:-$((n_phases == 1 ? 540 : 1440))}
PY=${PYTHON:-python3}

die() { echo "[gpu_run] ERROR: $*" >&2; exit 2; }
log() { echo "[gpu_run] $*"; }
remaining() { echo $((BUDGET - SECONDS)); }

case $BUNDLE in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
for p in ${PHASES//,/ }; do
  [[ $p == checks || $p == multi || $p == sanitize || $p == profile || $p == bench || $p == unit ]] ||
    die "unknown phase '$p' (checks, multi, sanitize, profile, bench, unit)"
done
has_phase() { [[ ,$PHASES, == *,$1,* ]]; }

# ---- fail fast: a GPU and a bundle ----------------------------------------------------------------
[[ $BUNDLE = /* ]] || BUNDLE=$PWD/$BUNDLE
[[ -f $BUNDLE/MANIFEST.txt && ( -f $BUNDLE/bundle.tar.xz || -f $BUNDLE/bin/env.sh ) ]] ||
  die "no GPU bundle at $BUNDLE: make one with job_scripts/gpu_bundle.sh on the build machine and copy it here"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no NVIDIA GPU here (nvidia-smi is not installed): run this on the machine with the GPU"
fi
if ! gpus=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$gpus"; then
  die "no NVIDIA GPU here (nvidia-smi -L: $(head -n 2 <<<"$gpus" | paste -sd' '))"
fi
command -v "$PY" >/dev/null || die "$PY not found (set PYTHON)"

[[ $OUT = /* ]] || OUT=$PWD/$OUT
mkdir -p "$OUT" || die "cannot make $OUT"
WORK=$(mktemp -d /tmp/gpt2-gpu-run.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# A packed bundle (the default: ~22 MB instead of ~90) is unpacked here, into WORK.
if [[ -f $BUNDLE/bundle.tar.xz ]]; then
  if [[ -f $BUNDLE/bundle.tar.xz.sha256 ]] && command -v sha256sum >/dev/null; then
    (cd "$BUNDLE" && sha256sum --quiet -c bundle.tar.xz.sha256) || die "$BUNDLE/bundle.tar.xz is damaged (checksum)"
  fi
  mkdir -p "$WORK/bundle"
  if ! tar -xJf "$BUNDLE/bundle.tar.xz" -C "$WORK/bundle" 2>/dev/null; then
    # no xz program: Python's tarfile reads .tar.xz itself
    "$PY" -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
kw = {"filter": "tar"} if hasattr(tarfile, "data_filter") else {}
t.extractall(sys.argv[2], **kw)' "$BUNDLE/bundle.tar.xz" "$WORK/bundle" || die "cannot unpack $BUNDLE/bundle.tar.xz"
  fi
  log "unpacked $BUNDLE/bundle.tar.xz into $WORK/bundle"
  BUNDLE=$WORK/bundle
fi
[[ -f $BUNDLE/bin/env.sh && -d $BUNDLE/libexec && -d $BUNDLE/reference ]] || die "incomplete bundle in $BUNDLE"
REF=$BUNDLE/reference
B=$BUNDLE/bin
# Carried files may lose their modes.
chmod u+x "$BUNDLE"/bin/* "$BUNDLE"/libexec/* 2>/dev/null || true
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GPT2_COMM_TIMEOUT=${GPT2_COMM_TIMEOUT:-120}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

SUMMARY=()
# Lines of earlier calls into the same OUTDIR stay (one phase a call).
[[ -f $OUT/summary.txt ]] && mapfile -t SUMMARY < <(grep -E '^(PASS|FAIL|SKIP) ' "$OUT/summary.txt")
FAILED=0
write_summary() {
  {
    echo "gpt2-kokkos GPU run: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(head -n1 <<<"$gpus")"
    echo "bundle: $(head -n 3 "$BUNDLE/MANIFEST.txt" | sed -n '2,3p' | paste -sd';')"
    printf '%s\n' "${SUMMARY[@]}"
    if [[ -f $OUT/bench.json ]]; then
      echo
      "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("report", "(benchmark incomplete: see bench.log)"))' \
        "$OUT/bench.json" 2>/dev/null || true
    fi
  } >"$OUT/summary.txt"
}

# ---- the device's CUDA libraries, and what every binary resolves to ---------------------------------
GPT2_CUDA_LIB_PATH=$(bash -c '. "$1/bin/env.sh" && echo "$GPT2_CUDA_LIB_PATH"' _ "$BUNDLE")
export GPT2_CUDA_LIB_PATH
{
  echo "== nvidia-smi"; nvidia-smi 2>&1
  echo "== machine"; uname -a; head -n 2 /etc/os-release 2>/dev/null; ldd --version 2>&1 | head -n1
  echo "== python"; "$PY" -c 'import sys, numpy; print(sys.version.split()[0], "numpy", numpy.__version__)' 2>&1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  echo "== CUDA library folders found (GPT2_CUDA_LIB_PATH)"; echo "${GPT2_CUDA_LIB_PATH:-<none>}"
  echo "== bundle"; cat "$BUNDLE/MANIFEST.txt"
} >"$OUT/env.txt" 2>&1
unresolved=""
for f in "$BUNDLE"/libexec/*; do
  res=$(bash -c '. "$1/bin/env.sh" && ldd "$2"' _ "$BUNDLE" "$f" 2>&1)
  { echo "== ldd $(basename "$f")"; echo "$res"; } >>"$OUT/env.txt"
  miss=$(awk '/not found/ { print $1 }' <<<"$res" | sort -u | paste -sd' ')
  [[ -n $miss ]] && unresolved+="  $(basename "$f"): $miss"$'\n'
done
if [[ -n $unresolved ]]; then
  SUMMARY+=("FAIL  libraries not found on this machine (see env.txt):" "$unresolved")
  write_summary
  die "libraries not found (set GPT2_CUDA_LIBS to the folders holding them):"$'\n'"$unresolved"
fi
log "$(head -n1 <<<"$gpus"); CUDA libraries from ${GPT2_CUDA_LIB_PATH:-the linker cache}"

# unit_tests read fixtures from the source folder compiled into them: make that path lead here.
SRC=$(cat "$REF/source_dir.txt" 2>/dev/null || true)
if [[ -n $SRC && $SRC != "$REPO_ROOT" && ! -e $SRC && $(id -u) == 0 ]]; then
  mkdir -p "$(dirname "$SRC")" && ln -s "$REPO_ROOT" "$SRC" && log "linked $SRC -> $REPO_ROOT (unit test fixtures)"
fi
# MPICH's launcher resolves this host's name; a machine without DNS may not know it.
host=$(cat /proc/sys/kernel/hostname 2>/dev/null || hostname)
if [[ -n $host ]] && ! getent hosts "$host" >/dev/null 2>&1 && [[ -w /etc/hosts ]]; then
  echo "127.0.0.1 $host" >>/etc/hosts && log "added $host to /etc/hosts (for mpiexec)"
fi

# ---- checks -----------------------------------------------------------------------------------------
# check NAME TIMEOUT COMMAND...: runs it (bounded by the time left), logs to checks.log, records PASS/FAIL.
check() {
  local name=$1 limit=$2 t0=$SECONDS rc left
  shift 2
  left=$(( $(remaining) - 20 ))
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    SUMMARY+=("$(printf 'SKIP  %-52s (no time left)' "$name")")
    FAILED=1
    return
  fi
  { echo; echo "=================== $name"; echo "\$ $*"; } >>"$OUT/checks.log"
  timeout -k 10 "$limit" "$@" >>"$OUT/checks.log" 2>&1
  rc=$?
  local what=PASS
  ((rc == 0)) || { what=FAIL; FAILED=1; }
  ((rc == 124)) && what="FAIL (timed out after ${limit}s)"
  SUMMARY+=("$(printf '%-5s %-52s %4ds  exit %d' "$what" "$name" $((SECONDS - t0)) "$rc")")
  log "${SUMMARY[-1]}"
  write_summary
}

TINY_RUN=("$PY" "$REPO_ROOT/tests/gpu/check_tiny_run.py" --gpt2 "$B/gpt2" --mpiexec "$B/mpiexec")
TINY=("${TINY_RUN[@]}" --compare "$REF/tiny")
if has_phase checks; then
  log "checks"
  : >"$OUT/checks.log"
  check "kernel_check fp32 vs CPU (rel L2 <= 1e-5)" 120 "$B/kernel_check" --compare "$REF/kernel_check.bin"
  check "kernel_check TF32 vs CPU (GEMMs <= 2e-3)" 120 "$B/kernel_check" --compare "$REF/kernel_check.bin" --tf32
  check "tiny run, 1 rank: losses = CPU (1e-4)" 180 "${TINY[@]}" --workdir "$WORK/tiny_1rank"
  check "tiny run, 1 rank, deck names nccl (no NCCL call)" 180 "${TINY[@]}" --workdir "$WORK/tiny_nccl" \
    --set parallel.comm=nccl
  if [[ -d $REF/tiny_muon_bf16 ]]; then  # (6e-5: fp32 products differ from bf16's by 1.3e-4 on the host)
    check "tiny run, 1 rank, Muon, bf16 Newton-Schulz = CPU (6e-5)" 180 "${TINY_RUN[@]}" \
      --compare "$REF/tiny_muon_bf16" --tol 6e-5 --workdir "$WORK/tiny_muon"
  else
    SUMMARY+=("SKIP  Muon's bf16 Newton-Schulz (no reference in this bundle: gpu_bundle.sh makes one)")
  fi
  check "tiny run, 2 ranks, dp=2, comm=mpi (host-staged)" 240 "${TINY[@]}" --workdir "$WORK/tiny_dp2" \
    --ranks 2 --set parallel.dp=2 --set parallel.comm=mpi --trace
  [[ -f $WORK/tiny_dp2/trace.h5 ]] && cp "$WORK/tiny_dp2/trace.h5" "$OUT/trace_dp2.h5"
  check "tiny run, 2 ranks, pp=2, comm=mpi (host-staged)" 240 "${TINY[@]}" --workdir "$WORK/tiny_pp2" \
    --ranks 2 --set parallel.pp=2 --set parallel.microbatches=2 --set parallel.comm=mpi
  check "tiny run, 2 ranks, pp=2, comm=mpi-ordered" 240 "${TINY[@]}" --workdir "$WORK/tiny_pp2_ordered" \
    --ranks 2 --set parallel.pp=2 --set parallel.microbatches=2 --set parallel.comm=mpi-ordered
  if [[ -x $B/mpi_tests ]]; then
    check "mpi_tests -n 1 (MPI + NCCL communicators)" 300 "$B/mpiexec" -n 1 "$B/mpi_tests"
  else
    SUMMARY+=("SKIP  mpi_tests (not in this bundle: GPT2_BUNDLE_BINS)")
  fi
fi

# ---- two GPUs: every layout over NCCL against the one-GPU run ------------------------------------------
if has_phase multi; then
  # shellcheck source=job_scripts/lib/gpu_multi.sh
  . "$REPO_ROOT/job_scripts/lib/gpu_multi.sh"
  gpu_multi_phase
fi

# ---- compute-sanitizer: one tiny step, memcheck then racecheck --------------------------------------
if has_phase sanitize; then
  if ! command -v compute-sanitizer >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then
    export PATH=$PATH:/usr/local/cuda/bin
  fi
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    SUMMARY+=("SKIP  compute-sanitizer (not installed on this machine)")
  else
    log "compute-sanitizer"
    : >"$OUT/sanitize.log"
    for tool in memcheck racecheck synccheck initcheck; do
      # The tool's report goes to a file of its own (the run's output is cut to its tail). memcheck,
      # synccheck and initcheck fail on any error (exit 99); racecheck on a hazard it calls an error -- its warnings
      # (possible hazards of warp-synchronous code; Kokkos' range reductions have some) are counted
      # in the summary line, not failed.
      wrapper=$WORK/gpt2_$tool.sh report=$WORK/sanitize_$tool.txt
      exitcode=""
      [[ $tool != racecheck ]] && exitcode="--error-exitcode 99"
      printf '#!/bin/sh\nexec compute-sanitizer --tool %s %s --log-file %s "%s" "$@"\n' "$tool" "$exitcode" \
        "$report" "$B/gpt2" >"$wrapper"
      chmod +x "$wrapper"
      t0=$SECONDS
      left=$(( $(remaining) - 20 ))
      ((left > 240)) && left=240
      { echo "=================== $tool"; } >>"$OUT/sanitize.log"
      timeout -k 10 "$left" "$PY" "$REPO_ROOT/tests/gpu/check_tiny_run.py" --compare "$REF/tiny" --gpt2 "$wrapper" \
        --workdir "$WORK/sanitize_$tool" --stop-at 1 --timeout "$left" >>"$OUT/sanitize.log" 2>&1
      rc=$?
      cat "$report" >>"$OUT/sanitize.log" 2>/dev/null
      summary=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$report" 2>/dev/null | tail -n 1 | sed 's/^=* *//')
      what=PASS
      if [[ $tool == racecheck ]] && ((rc == 0)); then
        errors=$(sed -nE 's/.*\(([0-9]+) errors?.*/\1/p' <<<"$summary")
        [[ -n $errors ]] || errors=unknown  # no summary line: the report is not what was expected
        [[ $errors == 0 ]] || rc=98
      fi
      ((rc == 0)) || { what=FAIL; FAILED=1; }
      SUMMARY+=("$(printf '%-5s %-52s %4ds  exit %d  %s' "$what" "one tiny step under compute-sanitizer $tool" $((SECONDS - t0)) "$rc" "$summary")")
      log "${SUMMARY[-1]}"
      write_summary
    done
  fi
fi

# ---- profile: the per-kernel table of one steady step ------------------------------------------------
if has_phase profile; then
  # shellcheck source=job_scripts/lib/gpu_profile.sh
  . "$REPO_ROOT/job_scripts/lib/gpu_profile.sh"
  gpu_profile_phase
fi

# ---- benchmark ----------------------------------------------------------------------------------------
if has_phase bench; then
  left=$(( $(remaining) - 30 ))
  has_phase unit && left=$(( left - 60 ))  # leave the unit tests a minute at least
  if ((left < 60)); then
    SUMMARY+=("SKIP  benchmark (no time left)")
  else
    log "benchmark (up to ${left}s)"
    t0=$SECONDS
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
    # --budget: the script stops starting runs in time to write its report before the timeout.
    timeout -k 10 "$left" "$PY" "$REPO_ROOT/tests/bench/bench_gpu.py" --bench "$B/bench_train_step" \
      --out "$OUT/bench.json" --budget $((left - 45)) ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
    rc=$?
    what=PASS
    ((rc == 0)) || { what=FAIL; FAILED=1; }
    SUMMARY+=("$(printf '%-5s %-52s %4ds  exit %d' "$what" "benchmark (bench_gpu.py)" $((SECONDS - t0)) "$rc")")
    log "${SUMMARY[-1]}"
  fi
  write_summary
fi

# ---- unit tests ---------------------------------------------------------------------------------------
if has_phase unit; then
  left=$(( $(remaining) - 15 ))
  if [[ ! -x $B/unit_tests ]]; then
    SUMMARY+=("SKIP  unit_tests (not in this bundle: GPT2_BUNDLE_BINS)")
  elif ((left < 30)); then
    SUMMARY+=("SKIP  unit_tests (no time left; run the 'unit' phase alone)")
  else
    log "unit tests (up to ${left}s)"
    t0=$SECONDS
    timeout -k 10 "$left" "$B/unit_tests" >"$OUT/unit_tests.log" 2>&1
    rc=$?
    what=PASS
    ((rc == 0)) || { what=FAIL; FAILED=1; }
    ((rc == 124)) && what="FAIL (timed out after ${left}s)"
    counts=$(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$OUT/unit_tests.log" | paste -sd' ')
    SUMMARY+=("$(printf '%-5s %-52s %4ds  exit %d  %s' "$what" "unit_tests" $((SECONDS - t0)) "$rc" "$counts")")
    log "${SUMMARY[-1]}"
  fi
  write_summary
fi

write_summary
echo
cat "$OUT/summary.txt"
exit $((FAILED ? 1 : 0))
