#!/usr/bin/env bash
# Builds gpt2-kokkos for NVIDIA GPUs (sm_80 and sm_90 machine code -- A100, H100/H200 -- and PTX that
# newer GPUs JIT-compile): makes sure the CUDA-enabled Kokkos exists
# (job_scripts/build_kokkos_cuda.sh, cached outside the repository), then configures this project
# with GPT2_ENABLE_CUDA=ON into build-cuda/ (or the folder given) and builds everything.
# Compiling and linking need no GPU; the binaries run only on a machine with one.
# Re-running is cheap: Kokkos is reused and the project build is incremental.
#
# Usage: job_scripts/build_cuda.sh [BUILD_DIR] [extra cmake -D options...]
# Environment: JOBS (default 2), CUDA_HOME, GPT2_CACHE / KOKKOS_CUDA_PREFIX (see build_kokkos_cuda.sh),
#   GPT2_TARGETS (space-separated targets to build instead of everything, e.g. "gpt2 kernel_check")
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-$REPO_ROOT/build-cuda}
shift $(($# > 0 ? 1 : 0))
JOBS=${JOBS:-2}
export JOBS

log() { echo "[build_cuda] $*"; }
die() { echo "[build_cuda] ERROR: $*" >&2; exit 1; }
now() { date +%s; }

# ---- CUDA-enabled Kokkos ----------------------------------------------------------------------
t0=$(now)
"$REPO_ROOT/job_scripts/build_kokkos_cuda.sh"
t_kokkos=$(($(now) - t0))
KOKKOS_PREFIX=$("$REPO_ROOT/job_scripts/build_kokkos_cuda.sh" --print-prefix)
NVCC_WRAPPER=$KOKKOS_PREFIX/bin/nvcc_wrapper
[[ -x $NVCC_WRAPPER ]] || die "no nvcc_wrapper in $KOKKOS_PREFIX/bin"

if [[ -z ${CUDA_HOME:-} ]]; then
  if command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else
    CUDA_HOME=/usr/local/cuda
  fi
fi
[[ -x $CUDA_HOME/bin/nvcc ]] || die "nvcc not found in $CUDA_HOME/bin (set CUDA_HOME)"
export PATH=$CUDA_HOME/bin:$PATH  # nvcc_wrapper calls `nvcc` from PATH
export CUDA_HOME

# ---- configure --------------------------------------------------------------------------------
# Test discovery runs at `ctest` time (PRE_TEST), not after linking: listing the tests starts
# Kokkos::Cuda, which needs a GPU, and the build machine may have none.
t0=$(now)
log "configuring $BUILD_DIR (Kokkos: $KOKKOS_PREFIX)"
mkdir -p "$BUILD_DIR"
cmake -S "$REPO_ROOT" -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
  -DCMAKE_CXX_COMPILER="$NVCC_WRAPPER" \
  -DGPT2_ENABLE_CUDA=ON \
  -DKokkos_ROOT="$KOKKOS_PREFIX" \
  -DCUDAToolkit_ROOT="$CUDA_HOME" \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  "$@" >"$BUILD_DIR/configure.log" 2>&1 ||
  { tail -n 40 "$BUILD_DIR/configure.log" >&2; die "configure failed (log: $BUILD_DIR/configure.log)"; }
grep -E 'Kokkos devices|Found (CUDAToolkit|NCCL|MPI_CXX|HDF5)' "$BUILD_DIR/configure.log" | sed 's/^-- /  /' || true
t_configure=$(($(now) - t0))

# ---- build ------------------------------------------------------------------------------------
t0=$(now)
if [[ -n ${GPT2_TARGETS:-} ]]; then
  log "building $GPT2_TARGETS with $JOBS jobs"
  # shellcheck disable=SC2086  # a list of targets
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $GPT2_TARGETS
  read -r -a expected <<<"$GPT2_TARGETS"
else
  log "building with $JOBS jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS"
  expected=(gpt2)
  grep -q '^GPT2_BUILD_TESTS:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" && expected+=(unit_tests)
fi
t_build=$(($(now) - t0))

for exe in "${expected[@]}"; do
  [[ -x $BUILD_DIR/bin/$exe ]] || die "$BUILD_DIR/bin/$exe was not built"
done
log "linked: ${expected[*]/#/$BUILD_DIR/bin/}"
log "times: kokkos ${t_kokkos}s, configure ${t_configure}s, build ${t_build}s"
log "run on a GPU machine, e.g. $BUILD_DIR/bin/unit_tests"
