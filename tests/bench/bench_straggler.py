#!/usr/bin/python3
"""What naming slow ranks costs a step: dp 2 runs with train.straggler_every = 0 (off: no pass timing,
no exchange) against the same run with it on, in A/B pairs (the order alternates), on a made-up
corpus. Reported: each pair's ratio of mean step times (on / off, the steps after --skip), their
median and their geometric mean, for an exchange every --every steps (10: five times the default's
rate, the worst case a user would set) and every 50 (the default).

  tests/bench/bench_straggler.py --gpt2 build/bin/gpt2 [--pairs 6] [--steps 60] [--json out.json]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
import gpt2test  # noqa: E402


def mean_step_ms(args, work, deck, every, tag):
    metrics = os.path.join(work, f"{tag}.jsonl")
    cmd = [args.mpiexec, "-n", "2", args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics,
           "--set", f"train.straggler_every={every}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_straggler: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    steps = [m["step_ms"] for m in map(json.loads, open(metrics)) if "step_ms" in m and m.get("step", 0) > args.skip]
    return sum(steps) / len(steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_straggler_")
    gpt2test.write_shard(os.path.join(work, "train.bin"), gpt2test.learnable_tokens(200000, 256))
    deck = os.path.join(work, "deck.toml")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(
        os.path.join(work, "train.bin"), model__n_layer=4, model__n_head=4, model__n_embd=128, model__vocab_size=256,
        model__block_size=128, data__seq_len=128, train__batch_size=16, train__steps=args.steps,
        parallel__dp=2))
    result = {}
    for every in (10, 50):
        ratios = []
        for i in range(args.pairs):
            order = (0, every) if i % 2 == 0 else (every, 0)
            ms = {e: mean_step_ms(args, work, deck, e, f"e{e}_{i}") for e in order}
            ratios.append(ms[every] / ms[0])
            print(f"every {every:3d} pair {i}: off {ms[0]:.2f} ms, on {ms[every]:.2f} ms, ratio {ratios[-1]:.4f}",
                  flush=True)
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        result[every] = {"ratios": ratios, "median": statistics.median(ratios), "geomean": geo}
        print(f"every {every}: on / off median {statistics.median(ratios):.4f}, geometric mean {geo:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
