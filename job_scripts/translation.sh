#!/usr/bin/env bash
# The seed course's experiment: fine-tune GPT-2 on translation pairs with data and pipeline
# parallelism, corpus BLEU after each epoch beside the epoch's time and tokens/s, and the
# assignment's plots (training time and tokens/s by world size; pipeline vs model parallel).
#
#   job_scripts/translation.sh [-n N] PAIRS.tsv [gpt2 train options]               this machine (mpiexec)
#   job_scripts/translation.sh [-n N] SOURCES.txt TARGETS.txt [gpt2 train options]  two aligned files
#   sbatch job_scripts/translation.slurm PAIRS.tsv [gpt2 train options]            Slurm (srun), -n: the job's tasks
#
# 1. gpt2 prepare --pairs into RUN/data (shards of whole examples with loss masks, val.tsv: 10% of
#    the pairs held out), tokenizer $GPT2_TOKENIZER (default byte; gpt2 for GPT-2's BPE, then also set
#    the deck's model to GPT-2's and checkpoint.init_from, see inputs/translation.toml);
# 2. the deck ($GPT2_DECK, default inputs/translation.toml) on dp 1, 2, 4 .. N (powers of two), pp 2
#    naive (model parallel: one microbatch) and pp 2 1F1B (4 microbatches), each into RUN/<layout>/
#    (stdout.log, metrics.jsonl with the BLEU lines, <layout>.h5 trace, checkpoints);
# 3. gpt2 eval --bleu on the held-out pairs with the dp 1 run's final checkpoint;
# 4. plots in RUN/plots: analysis/plot_scaling.py --trace-epochs over the dp runs, plot_pipeline.py over
#    the pp runs, plot_loss.py over all, and bleu.txt (each run's BLEU per epoch).
# RUN: $GPT2_RUN_DIR, else runs/translation-<date>-<pid> (runs/translation-<job id> in Slurm).
# Options (before PAIRS): -n N ranks (default: Slurm's tasks, else 2); -h help.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/run_common.sh"

n=${SLURM_NTASKS:-2}
while (($#)); do
  case $1 in
    -n | --ranks) n=${2?}; shift 2 ;;
    -h | --help) gpt2_usage "${BASH_SOURCE[0]}"; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
(($# >= 1)) || gpt2_die 2 "usage: $0 [-n N] PAIRS.tsv | SOURCES TARGETS [gpt2 train options]"
inputs=("$1")
shift
if (($#)) && [[ -f $1 && $1 != *.toml ]]; then inputs+=("$1"); shift; fi
for f in "${inputs[@]}"; do [[ -f $f ]] || gpt2_die 2 "$f: no such pairs file"; done
gpt2_is_uint "$n" && ((n >= 2)) || gpt2_die 2 "-n needs at least 2 ranks (dp 2, pp 2), got '$n'"
gpt2_load_site
deck=${GPT2_DECK:-$GPT2_ROOT/inputs/translation.toml}
[[ -f $deck ]] || gpt2_die 2 "$deck: no such deck"
if [[ -n ${SLURM_JOB_ID:-} ]]; then
  run=${GPT2_RUN_DIR:-${GPT2_RUNS_DIR:-runs}/translation-$SLURM_JOB_ID}
  launch() { srun --mpi="${GPT2_SRUN_MPI:-pmi2}" -n "$1" ${GPT2_LAUNCH_ARGS:-} "${@:2}"; }
else
  run=${GPT2_RUN_DIR:-${GPT2_RUNS_DIR:-runs}/translation-$(date +%Y%m%d-%H%M%S)-$$}
  launch() { "${GPT2_LAUNCHER:-mpiexec}" -n "$1" ${GPT2_LAUNCH_ARGS:-} "${@:2}"; }
fi
mkdir -p "$run"
gpt2_log "run folder $run; $n ranks; deck $deck; pairs ${inputs[*]}"

# 1. data (once per run folder)
if [[ ! -f $run/data/val.tsv ]]; then
  "$GPT2_BIN" prepare --pairs --tokenizer "${GPT2_TOKENIZER:-byte}" --out "$run/data" "${inputs[@]}" | tee "$run/prepare.log"
fi

# 2. the runs
layouts=()
for ((d = 1; d <= n; d *= 2)); do layouts+=("dp$d:$d:parallel.dp=$d"); done
layouts+=("pp2_naive:2:parallel.pp=2 parallel.microbatches=1 parallel.schedule=naive")
layouts+=("pp2_1f1b:2:parallel.pp=2 parallel.microbatches=4 parallel.schedule=1f1b")
traces=() dp_traces=() pp_traces=()
for l in "${layouts[@]}"; do
  name=${l%%:*} rest=${l#*:}
  ranks=${rest%%:*} sets=${rest#*:}
  out=$run/$name
  mkdir -p "$out"
  args=(--set "data.train=$run/data/train_*.bin" --set "data.val=$run/data/val_*.bin"
        --set "train.bleu_pairs=$run/data/val.tsv" --set "checkpoint.dir=$out/checkpoints"
        --set "trace.file=$out/$name.h5")
  for s in $sets; do args+=(--set "$s"); done
  gpt2_log "$name: $ranks rank(s), $sets"
  launch "$ranks" "$GPT2_BIN" train "$deck" "${args[@]}" --metrics-jsonl "$out/metrics.jsonl" "$@" \
    </dev/null 2>&1 | tee "$out/stdout.log"
  traces+=("$out/$name.h5")
  if [[ $name == dp* ]]; then dp_traces+=("$out/$name.h5"); else pp_traces+=("$out/$name.h5"); fi
done

# 3. BLEU of the dp 1 run's final model on the held-out pairs
"$GPT2_BIN" eval --bleu "$run/data/val.tsv" --checkpoint "$run/dp1/checkpoints" \
  --hypotheses "$run/dp1/hypotheses.txt" | tee "$run/eval.txt"

# 4. plots and the BLEU table
mkdir -p "$run/plots"
if py=$(gpt2_python); then
  MPLBACKEND=Agg "$py" "$GPT2_ROOT/analysis/plot_scaling.py" "${dp_traces[@]}" --trace-epochs --out "$run/plots" |
    tee "$run/plots/scaling.txt" || gpt2_warn "plot_scaling.py failed"
  MPLBACKEND=Agg "$py" "$GPT2_ROOT/analysis/plot_pipeline.py" "${pp_traces[@]}" --out "$run/plots" |
    tee "$run/plots/pipeline.txt" || gpt2_warn "plot_pipeline.py failed"
  MPLBACKEND=Agg "$py" "$GPT2_ROOT/analysis/plot_loss.py" "${traces[@]}" --out "$run/plots" >/dev/null ||
    gpt2_warn "plot_loss.py failed"
  "$py" - "$run" "${layouts[@]%%:*}" <<'PY' | tee "$run/plots/bleu.txt"
import json, os, sys
run = sys.argv[1]
print(f"{'run':<10} {'epoch':>6} {'step':>6} {'BLEU':>7} {'train s':>8} {'tok/s':>9} {'elapsed s':>9}")
for name in sys.argv[2:]:
    path = os.path.join(run, name, "metrics.jsonl")
    if not os.path.exists(path):
        continue
    for line in open(path):
        m = json.loads(line)
        if "bleu" in m:
            print(f"{name:<10} {m['epoch']:>6.2f} {m['step']:>6} {m['bleu']:>7.2f} {m['train_s']:>8.2f} "
                  f"{m['tokens_per_s']:>9.0f} {m['elapsed_s']:>9.1f}")
PY
else
  gpt2_log "note: no python3 with numpy, h5py and matplotlib; plots skipped"
fi
gpt2_log "done: $run (plots in $run/plots)"
