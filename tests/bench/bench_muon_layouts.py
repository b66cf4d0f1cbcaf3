#!/usr/bin/python3
"""Muon's step where the replicas share its matrices: two data-parallel ranks train the same model
with AdamW at ZeRO-1, with Muon at ZeRO-0 (every rank orthogonalises every matrix) and with Muon at
ZeRO-1 (each matrix dealt to one owner, its parts sent there and the result back), in rounds of the
three (the box is shared: ratios are taken within a round, the median over rounds reported).
Reported: each configuration's median step time and the ratios Muon ZeRO-1 / Muon ZeRO-0 and
Muon ZeRO-1 / AdamW ZeRO-1, with the planner's prediction of each step (its `predicted:` line).

  tests/bench/bench_muon_layouts.py --gpt2 build/bin/gpt2 [--mpiexec mpiexec] [--rounds 3]
                                    [--layers 4] [--embd 384] [--steps 12]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import gpt2test  # noqa: E402

CONFIGS = [("adamw zero1", "adamw", 1), ("muon zero0", "muon", 0), ("muon zero1", "muon", 1)]


def run(args, data, optimizer, zero):
    tag = f"{optimizer}_{zero}"
    deck, metrics = os.path.join(data, tag + ".toml"), os.path.join(data, tag + ".jsonl")
    gpt2test.write_deck(deck, {
        "model": {"n_layer": args.layers, "n_head": 4, "n_embd": args.embd, "vocab_size": 256, "block_size": 64},
        "data": {"train": os.path.join(data, "train.bin"), "seq_len": 64},
        "train": {"batch_size": 8, "steps": args.steps, "lr": 1e-3, "optimizer": optimizer, "seed": 5},
        "parallel": {"dp": 2, "zero": zero}})
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", KOKKOS_NUM_THREADS="1")
    p = subprocess.run([args.mpiexec, "-n", "2", args.gpt2, "train", deck, "--metrics-jsonl", metrics],
                       capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        sys.exit(f"bench_muon_layouts: {tag} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    steps = [r["step_ms"] for r in gpt2test.read_jsonl(metrics) if "step_ms" in r][2:]  # (warm-up left out)
    m = re.search(r"predicted: step ([0-9.]+) ms", p.stdout)
    return statistics.median(steps), float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="bench_muon_layouts_")
    gpt2test.write_shard(os.path.join(data, "train.bin"), gpt2test.learnable_tokens(200000, 256))
    times = {name: [] for name, _, _ in CONFIGS}
    predicted = {}
    for r in range(args.rounds):
        for name, opt, zero in CONFIGS:
            ms, pred = run(args, data, opt, zero)
            times[name].append(ms)
            predicted[name] = pred
        print(f"round {r + 1}: " + ", ".join(f"{n} {times[n][-1]:.1f} ms" for n, _, _ in CONFIGS), flush=True)
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(times[a], times[b]))  # noqa: E731
    for name, _, _ in CONFIGS:
        print(f"{name}: median step {statistics.median(times[name]):.1f} ms (predicted {predicted[name]} ms)")
    print(f"muon zero1 / muon zero0: {ratio('muon zero1', 'muon zero0'):.3f}x")
    print(f"muon zero1 / adamw zero1: {ratio('muon zero1', 'adamw zero1'):.3f}x")


if __name__ == "__main__":
    main()
