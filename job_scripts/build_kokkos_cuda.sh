#!/usr/bin/env bash
# Builds the CUDA-enabled Kokkos 3.4.01 (Serial + Cuda, sm_80 + sm_90 + PTX, C++17) for the
# GPT2_ENABLE_CUDA build (job_scripts/build_cuda.sh): `job_scripts/build_kokkos.sh cuda`, which
# documents the cache folder, the patch and the environment (GPT2_CACHE, KOKKOS_CUDA_PREFIX,
# CUDA_HOME, JOBS).
#
# Usage: job_scripts/build_kokkos_cuda.sh [--print-prefix] [--force]
exec "$(dirname "${BASH_SOURCE[0]}")/build_kokkos.sh" cuda "$@"
