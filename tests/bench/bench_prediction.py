#!/usr/bin/python3
"""The prediction `gpt2 train` prints beside every run, held against the run's measurement: for each
layout, a first run in a fresh folder (priced from the hardware file, uncalibrated) and then
--repeats runs in the same folder (each priced from the trace the run before it left at
trace.file), as a requeued or repeated job is. The model is validate_perf_model.py's (8 layers x 256,
vocab 256, T 128, batch 16, one BLAS thread a rank, 12 steps); the layouts are one rank, dp 2 and
pp 2 (1f1b, 4 microbatches). Reported: each run's step time measured against predicted and the
memory of its largest rank, from the metrics log's "predicted" and "measured" objects.

  tests/bench/bench_prediction.py --gpt2 build/bin/gpt2 [--repeats 2] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import gpt2test  # noqa: E402

LAYOUTS = {"one rank": (1, []), "dp 2": (2, ["parallel.dp=2"]),
           "pp 2, 1f1b, m 4": (2, ["parallel.pp=2", "parallel.microbatches=4", "parallel.schedule=1f1b"])}


def run(args, folder, deck, ranks, sets, i):
    metrics = os.path.join(folder, f"m{i}.jsonl")
    cmd = [args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics, "--set", f"trace.file={folder}/trace.h5"]
    for s in sets:
        cmd += ["--set", s]
    if ranks > 1:
        cmd = [args.mpiexec, "-n", str(ranks)] + cmd
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"bench_prediction: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    lines = [json.loads(line) for line in open(metrics)]
    pred = next(m["predicted"] for m in lines if "predicted" in m)
    meas = next(m["measured"] for m in lines if "measured" in m)
    return {"source": pred["source"], "step_ms": meas["step_ms"], "predicted_step_ms": pred["step_ms"],
            "step_off": meas["step_ms"] / pred["step_ms"] - 1,
            "memory_off": max(meas["memory_bytes"]) / max(pred["memory_bytes"]) - 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench_prediction_") as w:
        data = os.path.join(w, "train.bin")
        gpt2test.write_shard(data, gpt2test.learnable_tokens(200000, 256))
        deck = os.path.join(w, "deck.toml")
        gpt2test.write_deck(deck, gpt2test.tiny_deck(data, model__n_layer=8, model__n_embd=256, model__n_head=4,
                                                     model__vocab_size=256, model__block_size=128, data__seq_len=128,
                                                     train__batch_size=16, train__steps=12, train__log_every=100,
                                                     parallel__blas_threads=1))
        for name, (ranks, sets) in LAYOUTS.items():
            folder = os.path.join(w, name.replace(" ", "_").replace(",", ""))
            os.makedirs(folder)
            runs = [run(args, folder, deck, ranks, sets, i) for i in range(1 + args.repeats)]
            out[name] = runs
            for i, r in enumerate(runs):
                kind = "uncalibrated" if i == 0 else "calibrated by the run before"
                print(f"{name:<16} run {i} ({kind:<28}): step {r['step_ms']:7.1f} ms against "
                      f"{r['predicted_step_ms']:7.1f} ({100 * r['step_off']:+6.1f}%), memory {100 * r['memory_off']:+5.1f}%",
                      flush=True)
    calibrated = [abs(r["step_off"]) for runs in out.values() for r in runs[1:]]
    if calibrated:
        print(f"calibrated runs: median |step error| {100 * statistics.median(calibrated):.1f}%, "
              f"worst {100 * max(calibrated):.1f}%")
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
