#!/usr/bin/python3
"""Threads per rank: the default `gpt2 train` picks against every other split of Kokkos and BLAS
threads, on the course's translation deck (inputs/translation.toml) at 1, 2 and 4 ranks.

Each run trains `--steps` steps of data parallelism over the given ranks (dp = ranks) on a made-up
corpus of number-to-words pairs (prepared here with `gpt2 prepare --pairs`), and reports the mean
tokens/s of its steps after the first `--skip`. For each rank count: the default (no thread setting
at all: what a user gets from `mpiexec -n R gpt2 train`), then each split Kokkos k x BLAS b with
R x max(k, b) <= 2x the cores. Printed: the table, each layout's default against its best split, and
dp 1's default against dp 2's (the scaling plot's baseline). OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and
KOKKOS_NUM_THREADS are removed from the runs' environment, as a fresh shell has them.

  tests/bench/bench_threads.py --gpt2 build/bin/gpt2 [--ranks 1,2,4] [--steps 30] [--json out.json]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
import gpt2test  # noqa: E402


def prepare(gpt2, work):
    pairs = os.path.join(work, "pairs.tsv")
    rng = random.Random(1)
    with open(pairs, "w") as f:
        for _ in range(4000):
            k = rng.randrange(1000)
            f.write(f"{k}\t{gpt2test.number_words(k)}\n")
    out = os.path.join(work, "data")
    subprocess.run([gpt2, "prepare", "--pairs", "--out", out, pairs], check=True, capture_output=True)
    return out


def run(args, data, ranks, threads):
    """Mean tokens/s of the steps after --skip; threads = (kokkos, blas) or None for the defaults."""
    metrics = os.path.join(data, f"m_{ranks}_{threads}.jsonl".replace(" ", ""))
    cmd = [args.gpt2, "train", os.path.join(ROOT, "inputs", "translation.toml"), "-q", "--metrics-jsonl", metrics,
           "--set", f"data.train={data}/train_*.bin", "--set", "data.val=", "--set", "train.bleu_pairs=",
           "--set", f"train.steps={args.steps}", "--set", "train.log_every=1", "--set", "train.eval_every=0",
           "--set", f"parallel.dp={ranks}", "--set", "checkpoint.dir="]
    if threads:
        cmd += ["--set", f"parallel.host_threads={threads[0]}", "--set", f"parallel.blas_threads={threads[1]}"]
    if ranks > 1:
        cmd = [args.mpiexec, "-n", str(ranks)] + cmd
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                           "KOKKOS_NUM_THREADS")}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"bench_threads: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    rates = [m["tokens_per_s"] for m in map(json.loads, open(metrics))
             if "tokens_per_s" in m and m.get("step", 0) > args.skip]
    if not rates:
        sys.exit(f"bench_threads: no steps after {args.skip} in {metrics}")
    return sum(rates) / len(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", default=os.path.join(ROOT, "build", "bin", "gpt2"))
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5, help="steps not timed (warm-up)")
    ap.add_argument("--json")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as work:
        data = prepare(args.gpt2, work)
        for ranks in map(int, args.ranks.split(",")):
            splits = [None] + [(k, b) for k in (1, 2, 4) for b in (1, 2, 4) if ranks * max(k, b) <= 2 * cores]
            for t in splits:
                tok = run(args, data, ranks, t)
                rows.setdefault(ranks, []).append((t, tok))
                label = "default" if t is None else f"Kokkos {t[0]} x BLAS {t[1]}"
                print(f"{ranks} rank(s) {label:<20} {tok:9.0f} tokens/s", flush=True)
    print(f"\n{cores} cores. Default against the best split of the same ranks:")
    for ranks, runs in rows.items():
        default = runs[0][1]
        best_t, best = max(runs[1:], key=lambda r: r[1]) if len(runs) > 1 else runs[0]
        print(f"  {ranks} rank(s): default {default:.0f} tokens/s = {default / best:.2f}x the best "
              f"(Kokkos {best_t[0]} x BLAS {best_t[1]}: {best:.0f})")
    if 1 in rows and 2 in rows:
        print(f"dp 1 / dp 2 (defaults): {rows[1][0][1] / rows[2][0][1]:.2f}")
    if args.json:
        json.dump({"cores": cores, "runs": {str(r): [{"threads": t, "tokens_per_s": x} for t, x in v]
                                            for r, v in rows.items()}}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
