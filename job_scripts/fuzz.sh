#!/usr/bin/env bash
# Coverage-guided fuzzing of our input readers with libFuzzer (clang), under ASan + UBSan.
#   job_scripts/fuzz.sh [TARGET...] [libFuzzer flags...]
#   job_scripts/fuzz.sh                          every target, 60 s each
#   job_scripts/fuzz.sh tokenizer -runs=1000000  one target, a million executions
#   job_scripts/fuzz.sh checkpoint -max_total_time=600 -jobs=2 -workers=2
# Targets (tests/fuzz/fuzz_<target>.cpp): shard, checkpoint, llmc, config, tokenizer, bpe_vocab,
# schedule_file.
# Builds into BUILD_DIR (default build-fuzz) with GPT2_FUZZ=ON and clang (CC/CXX, default
# clang-14/clang++-14; Debian needs libclang-rt-14-dev for libFuzzer's runtime). Each target runs on
# BUILD_DIR/corpus/<target> (new inputs land there) seeded from tests/fuzz/corpus/<target> (the
# committed seeds, read only). A finding stops the run with a non-zero status and leaves
# BUILD_DIR/findings/<target>/crash-* (or leak-*, timeout-*, oom-*); reproduce it with
#   BUILD_DIR/bin/fuzz_<target> BUILD_DIR/findings/<target>/crash-...
# Not part of CI (minutes per target); a per-target summary is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build-fuzz}
all=(shard checkpoint llmc config tokenizer bpe_vocab schedule_file)

targets=() flags=()
for a in "$@"; do
  if [[ $a == -* ]]; then flags+=("$a"); else targets+=("$a"); fi
done
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (one of: ${all[*]})" >&2; exit 2; }
done
have_limit=0
for f in "${flags[@]+"${flags[@]}"}"; do
  [[ $f == -runs=* || $f == -max_total_time=* ]] && have_limit=1
done
((have_limit)) || flags+=(-max_total_time=60)

export CC=${CC:-clang-14} CXX=${CXX:-clang++-14}
command -v "$CXX" > /dev/null || { echo "fuzz: $CXX not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 2; }
# (Configured every time: cheap, and it picks up new harnesses. The compiler is fixed at the first.)
# Debian's Serial Kokkos: the readers have no kernels worth threads, and the OpenMP Kokkos is built
# against GCC's libgomp while clang's -fopenmp links LLVM's libomp.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPT2_FUZZ=ON -DGPT2_BUILD_BENCHMARKS=OFF \
      -DGPT2_HOST_KOKKOS=debian > /dev/null
cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]/#/fuzz_}"

# ASan/UBSan: every report is fatal (libFuzzer then saves the input). Leak checking stays on.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:allocator_may_return_null=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export OPENBLAS_NUM_THREADS=1

summary=()
status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t findings=$build/findings/$t
  mkdir -p "$corpus" "$findings"
  log=$build/fuzz-$t.log
  echo "==== fuzz_$t ${flags[*]} (log: $log)"
  set +e
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: more than 2 GiB is a finding.
  "$build/bin/fuzz_$t" "$corpus" "$root/tests/fuzz/corpus/$t" -artifact_prefix="$findings/" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${flags[@]}" 2>&1 | tee "$log" | grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|FINDING|SUMMARY|Test unit written' | tail -n 40
  rc=${PIPESTATUS[0]}
  set -e
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  summary+=("$(printf '%-11s rc=%-3s runs=%-10s exec/s=%-7s %s' "$t" "$rc" "${runs:-?}" "${speed:-?}" \
    "$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' <<< "$last" | tail -1)")")
  ((rc == 0)) || status=1
done
echo "==== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
