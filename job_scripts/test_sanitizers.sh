#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer): builds the
# tests with GPT2_SANITIZE=address,undefined into BUILD_DIR (default build-asan) and runs the unit
# tests, the fuzz harnesses on their seed corpora, the MPI tests on 2 ranks and the end-to-end tests
# of the gpt2 command (the bad-input suite among them). It builds against the Serial Kokkos
# (`job_scripts/build_kokkos.sh serial`, GPT2_HOST_KOKKOS=serial) while test.sh uses the threaded
# one: CI builds and tests both. Any report fails the run: a memory error,
# undefined behaviour (not recoverable: -fno-sanitize-recover=undefined) or a leak at exit. Known leaks inside the system libraries are
# suppressed by tests/sanitizers/lsan.supp (each justified there). CI runs it after test.sh.
#   job_scripts/test_sanitizers.sh [BUILD_DIR] [extra ctest arguments]
# Environment: JOBS (build jobs, default: cores), BUILD_TYPE (default RelWithDebInfo; Debug works).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build-asan}
shift || true
t0=$(date +%s)

job_scripts/setup.sh
job_scripts/build_kokkos.sh serial
# GPT-2's vocabulary: the real-vocabulary tokenizer tests run on it (skipped without it).
job_scripts/fetch_gpt2_vocab.sh > /dev/null 2>&1 || echo "test_sanitizers: GPT-2 vocabulary unavailable; those tokenizer tests will be skipped"

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DGPT2_HOST_KOKKOS=serial \
      -DGPT2_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=undefined" \
      -DGPT2_BUILD_BENCHMARKS=OFF > /dev/null
cmake --build "$build" -j"${JOBS:-$(nproc)}"  # everything the tests run (no benchmarks)
t_build=$(date +%s)
# The build must really be instrumented (a cache from another configuration would not be).
for exe in unit_tests mpi_tests gpt2; do
  [[ $(ldd "$build/bin/$exe") == *libasan* && $(ldd "$build/bin/$exe") == *libubsan* ]] ||
    { echo "test_sanitizers: $build/bin/$exe is not built with ASan + UBSan" >&2; exit 1; }
done

# Every finding is fatal and printed with its stack. halt_on_error/abort_on_error: stop at the first
# report with a non-zero status; detect_leaks: LeakSanitizer at exit (exit status 23 on a leak);
# detect_stack_use_after_return, check_initialization_order/strict_init_order: the checks ASan
# leaves off by default. These variables reach every rank through mpiexec and every gpt2 the
# Python tests start.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:print_summary=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export OPENBLAS_NUM_THREADS=1 GPT2_COMM_TIMEOUT=120

# The unit tests, and the fuzz harnesses replaying their committed corpora (tests/fuzz/corpus).
ctest --test-dir "$build" --output-on-failure -j2 -L 'unit|fuzz' "$@"
ctest --test-dir "$build" --output-on-failure -R '^mpi_tests_np2$' "$@"
# The gpt2 command end to end (PyTorch trajectory, resume, bad input); not the fault-injection
# tests (SIGKILL/SIGSTOP timing), the GPU ones, nor the layout matrix (its question to the engine,
# every combination of the grid's axes, outgrew the time a sanitizer gives it: the release suite
# runs it whole).
ctest --test-dir "$build" --output-on-failure -L e2e -LE 'faults|gpu|matrix' "$@"
t_end=$(date +%s)
echo "test_sanitizers: build $((t_build - t0)) s, tests $((t_end - t_build)) s, total $((t_end - t0)) s"
