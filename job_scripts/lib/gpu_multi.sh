# shellcheck shell=bash
# gpu_run.sh's multi phase (sourced; uses its B, REF, WORK, PY, REPO_ROOT, SUMMARY, gpus, check, log,
# write_summary): on a machine with two GPUs or more, the tiny model (4 layers, so that every
# pipeline schedule has its chunks) on 2 ranks, one GPU each, NCCL between them -- dp 2, pp 2 in
# every schedule, tp 2 (and with sequence parallelism), cp 2 -- each equal to the same model's
# one-GPU run on this machine (losses and validation losses, 1e-4 absolute).
# Environment (for trying the phase without GPUs): GPT2_MULTI_COMM (nccl), GPT2_MULTI_FORCE=1 (run
#   whatever number of GPUs nvidia-smi lists), GPT2_MULTI_LIMIT=N (only the first N 2-rank cases:
#   dp, tp, tp with sp, cp, then pp in each schedule).

gpu_multi_phase() {
  local n
  # shellcheck disable=SC2154  # gpus: gpu_run.sh's (nvidia-smi -L)
  n=$(grep -c '^GPU ' <<<"$gpus")
  if ((n < 2)) && [[ ${GPT2_MULTI_FORCE:-0} != 1 ]]; then
    SUMMARY+=("SKIP  multi: $n GPU here; dp/pp/tp/cp over NCCL between GPUs needs 2")
    write_summary
    return
  fi
  local comm=${GPT2_MULTI_COMM:-nccl}
  log "multi: $n GPU(s), 2 ranks, parallel.comm=$comm"
  local ref=$WORK/ref_4layers
  mkdir -p "$ref"
  cp "$REF/tiny/train.bin" "$REF/tiny/val.bin" "$ref/"
  local tiny=("$PY" "$REPO_ROOT/tests/gpu/check_tiny_run.py" --gpt2 "$B/gpt2" --mpiexec "$B/mpiexec" --set model.n_layer=4)
  # The one-GPU run is the reference (the host's is a 2-layer model): compared with nothing (--tol huge).
  check "multi: one GPU, 4 layers (the reference)" 180 "${tiny[@]}" --compare "$REF/tiny" --tol 1e30 \
    --workdir "$WORK/multi_one" --save-metrics "$ref/metrics_cpu.jsonl"
  [[ -s $ref/metrics_cpu.jsonl ]] || return
  local cases=("parallel.dp=2" "parallel.tp=2" "parallel.tp=2 parallel.sequence_parallel=true" "parallel.cp=2")
  local s
  for s in naive gpipe 1f1b zb-h1 interleaved interleaved-zb zb-v dualpipev; do
    case $s in
      interleaved*) cases+=("parallel.pp=2 parallel.microbatches=4 parallel.schedule=$s parallel.virtual_stages=2") ;;
      *) cases+=("parallel.pp=2 parallel.microbatches=4 parallel.schedule=$s") ;;
    esac
  done
  local c args k
  [[ -n ${GPT2_MULTI_LIMIT:-} ]] && cases=("${cases[@]:0:$GPT2_MULTI_LIMIT}")
  for c in "${cases[@]}"; do
    args=()
    for k in $c; do args+=(--set "$k"); done
    check "multi: 2 ranks, $comm, ${c//parallel./}" 180 "${tiny[@]}" --compare "$ref" --ranks 2 \
      --set "parallel.comm=$comm" "${args[@]}" --workdir "$WORK/multi_${#SUMMARY[@]}"
  done
}
