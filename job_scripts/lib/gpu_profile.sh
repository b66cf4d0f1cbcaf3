# shellcheck shell=bash
# gpu_run.sh's profile phase (sourced; uses its B, OUT, WORK, PY, REPO_ROOT, SUMMARY, FAILED, log,
# remaining, write_summary): the per-kernel table of one steady GPT-2 124M bf16 step into
# OUT/kernel_table.md, the raw files into OUT/profile/.
# Environment: GPT2_PROFILE_B (16), GPT2_PROFILE_T (1024), GPT2_PROFILE_NCU (1: take DRAM bytes with
#   Nsight Compute where it is installed; 0: skip it)

profile_step() {  # ATTENTION TABLE_JSON BENCH_JSON [extra env...]: one bench_train_step run
  local attention=$1 table=$2 bench_json=$3
  shift 3
  env GPT2_BENCH_MODEL=124M GPT2_BENCH_B="$PB" GPT2_BENCH_T="$PT" GPT2_BENCH_PRECISION=bf16 GPT2_BENCH_TF32=1 \
    GPT2_BENCH_ATTENTION="$attention" GPT2_BENCH_MIN_TIME=2 GPT2_BENCH_KERNEL_TABLE="$table" "$@" \
    timeout -k 10 "${PROFILE_TIMEOUT:-180}" "$B/bench_train_step" --benchmark_filter=TrainStepEnv --benchmark_format=json >"$bench_json"
}

find_ncu() {
  command -v ncu 2>/dev/null && return
  local c
  for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [[ -x $c ]] && { echo "$c"; return; }
  done
}

gpu_profile_phase() {
  local PD=$OUT/profile PB=${GPT2_PROFILE_B:-16} PT=${GPT2_PROFILE_T:-1024} t0=$SECONDS rc=0 ncu copy step_ms
  mkdir -p "$PD"
  log "profile: one bf16 step, B $PB, T $PT"
  # The device-to-device copy bandwidth (bytes read + written), the ceiling for the kernels' GB/s.
  copy=$("$PY" - <<'PY' 2>>"$PD/profile.log"
import torch
n = 1 << 28
x = torch.rand(n, device="cuda"); y = torch.empty_like(x)
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t = []
for i in range(23):
    e0.record(); y.copy_(x); e1.record(); torch.cuda.synchronize()
    if i >= 3: t.append(e0.elapsed_time(e1))
t.sort()
print(f"{2 * n * 4 / (t[len(t) // 2] * 1e-3) / 1e9:.0f}")
PY
  ) || copy=0
  echo "device-to-device copy: ${copy} GB/s" >>"$PD/profile.log"
  for attention in materialized fused; do
    profile_step "$attention" "$PD/ops_$attention.json" "$PD/bench_$attention.json" 2>>"$PD/profile.log" || rc=1
  done
  "$PY" "$REPO_ROOT/tests/bench/gpu_kernel_table.py" shapes "$PD/ops_materialized.json" >"$PD/gemm_shapes.txt" || rc=1
  timeout -k 10 180 "$B/gemm_sweep" "$PD/gemm_shapes.txt" >"$PD/gemm_sweep.jsonl" 2>>"$PD/profile.log" || rc=1
  ncu=$(find_ncu)
  if [[ ${GPT2_PROFILE_NCU:-1} == 1 && -n $ncu ]] && (($(remaining) > 200)); then
    # One step under Nsight Compute: each kernel's DRAM bytes; its kernels named by our NVTX ranges.
    PROFILE_TIMEOUT=120 profile_step materialized "$PD/ops_ncu.json" "$PD/bench_ncu.json" GPT2_BENCH_PROFILE_STEPS=1 \
      GPT2_BENCH_MIN_TIME=0.01 "$ncu" --profile-from-start off --nvtx --print-nvtx-rename kernel \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
      --print-units base --clock-control none --log-file "$PD/ncu.csv" 2>>"$PD/profile.log" ||
      echo "ncu: exit $?" >>"$PD/profile.log"
  else
    echo "ncu: skipped (${ncu:-not installed}; $(remaining) s left)" >>"$PD/profile.log"
  fi
  for attention in materialized fused; do
    step_ms=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["benchmarks"][0]["real_time"])' \
      "$PD/bench_$attention.json" 2>/dev/null || echo 0)
    local ncu_args=()
    [[ $attention == materialized && -s $PD/ncu.csv ]] && ncu_args=(--ncu "$PD/ncu.csv")
    echo "## bf16 step, attention $attention"
    echo
    "$PY" "$REPO_ROOT/tests/bench/gpu_kernel_table.py" report --ops "$PD/ops_$attention.json" \
      --sweep "$PD/gemm_sweep.jsonl" --copy-gbs "$copy" --step-ms "$step_ms" "${ncu_args[@]}" || rc=1
    echo
  done >"$OUT/kernel_table.md" 2>>"$PD/profile.log"
  local what=PASS
  # shellcheck disable=SC2034  # FAILED is gpu_run.sh's
  ((rc == 0)) || { what=FAIL; FAILED=1; }
  SUMMARY+=("$(printf '%-5s %-52s %4ds  exit %d  %s' "$what" "profile: per-kernel table (kernel_table.md)" \
    $((SECONDS - t0)) "$rc" "$(grep -m1 '^step ' "$OUT/kernel_table.md" | cut -c1-90)")")
  log "${SUMMARY[-1]}"
  write_summary
}
