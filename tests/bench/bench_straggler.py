#!/usr/bin/python3
"""What naming slow ranks costs a step: dp 2 runs with train.straggler_every = 0 (off: no pass timing,
no exchange) against the same run with it on, in A/B pairs (the order alternates), on a made-up
corpus. Reported: each pair's ratio of mean step times (on / off, the steps after --skip), their
median and their geometric mean, for an exchange every 10 steps (five times the default's rate, the
worst case a user would set) and every 50 (the default).

With --naming N it measures who is named instead, as a user's dp 2 run meets it: each rank bound to
a core of its own (`mpiexec -bind-to core`; a box whose cores run at different speeds rightly names
the rank on the slower one, so check them first), the default train.straggler_ratio (1.2), an
exchange every 20 steps, 80 steps a run. N runs left alone, then N with rank 1 stopped from outside
for --stop-ms of every --stop-ms + --run-ms (4 of 12 by default: about 1.5x its compute), each pause
drawn from 0.5-1.5x its mean. Reported per run: the ranks named, the steps of the first naming, and
rank 1's compute over rank 0's from the end's table.

  tests/bench/bench_straggler.py --gpt2 build/bin/gpt2 [--pairs 6] [--steps 60] [--json out.json]
  tests/bench/bench_straggler.py --gpt2 build/bin/gpt2 --naming 5 [--stop-ms 4 --run-ms 8]
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
import gpt2test  # noqa: E402
from rankprocs import Job, run_slowed  # noqa: E402

NAMING_EVERY, NAMING_STEPS = 20, 80


def mean_step_ms(args, work, deck, every, tag):
    metrics = os.path.join(work, f"{tag}.jsonl")
    cmd = [args.mpiexec, "-n", "2", args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics,
           "--set", f"train.straggler_every={every}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_straggler: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    steps = [m["step_ms"] for m in map(json.loads, open(metrics)) if "step_ms" in m and m.get("step", 0) > args.skip]
    return sum(steps) / len(steps)


def compute_ratio(out):
    """Rank 1's compute a step over rank 0's, from the end's per-rank table."""
    ms = [float(x) for x in re.findall(r"^\s*compute ([0-9.]+) ms, waits", out, re.M)]
    return ms[1] / ms[0] if len(ms) == 2 and ms[0] > 0 else float("nan")


def naming_run(args, work, deck, tag, slowed):
    """One dp 2 run, ranks on cores of their own; rank 1 stopped from outside when `slowed`."""
    metrics = os.path.join(work, f"{tag}.jsonl")
    cmd = ["-bind-to", "core", os.path.abspath(args.gpt2), "train", deck, "--metrics-jsonl", metrics,
           "--set", f"train.straggler_every={NAMING_EVERY}", "--set", f"train.steps={NAMING_STEPS}"]
    job = Job(types.SimpleNamespace(workdir=work, mpiexec=args.mpiexec), tag, cmd, 2, {})
    if slowed:
        found = run_slowed(job, 2, 1, stop_s=args.stop_ms / 1e3, run_s=args.run_ms / 1e3) is not None
    else:
        found = True
        try:
            job.wait(600)
        finally:
            job.cleanup()
    out, err = job.output()
    rc = job.proc.returncode
    if rc != 0 or not found:
        sys.exit(f"bench_straggler: {tag} failed (exit {rc}, rank 1 found: {found}):\n{out[-2000:]}\n{err[-2000:]}")
    named = gpt2test.jsonl_objects(metrics, "straggler")
    return {"named": sorted({n["rank"] for n in named}), "first": named[0]["steps"] if named else None,
            "ratio_named": named[0]["ratio"] if named else None, "compute_ratio": compute_ratio(out)}


def naming(args, work, deck):
    result = {}
    for slowed in (False, True):
        kind = "slowed" if slowed else "clean"
        runs = [naming_run(args, work, deck, f"{kind}_{i}", slowed) for i in range(args.naming)]
        for i, r in enumerate(runs):
            first = f" first at steps {r['first'][0]}-{r['first'][1]} ({r['ratio_named']:.2f}x)" if r["first"] else ""
            print(f"{kind} run {i}: named {r['named'] or 'nobody'}{first}; rank 1's compute "
                  f"{r['compute_ratio']:.3f}x rank 0's", flush=True)
        result[kind] = runs
    clean, slow = result["clean"], result["slowed"]
    in_two = sum(1 for r in slow if r["named"] == [1] and r["first"] and r["first"][1] <= 2 * NAMING_EVERY)
    print(f"clean: {sum(1 for r in clean if r['named'])} of {len(clean)} runs named somebody; slowed: rank 1 "
          f"alone named within two intervals in {in_two} of {len(slow)}; rank 1's compute, median "
          f"{statistics.median(r['compute_ratio'] for r in slow):.2f}x (clean "
          f"{statistics.median(r['compute_ratio'] for r in clean):.2f}x)")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--naming", type=int, default=0, metavar="N",
                    help="measure naming instead: N clean runs and N with rank 1 slowed (see the top)")
    ap.add_argument("--stop-ms", type=float, default=4.0, help="--naming: mean pause of rank 1 (default 4)")
    ap.add_argument("--run-ms", type=float, default=8.0, help="--naming: mean run between pauses (default 8)")
    args = ap.parse_args()
    if args.naming < 0 or args.stop_ms <= 0 or args.run_ms <= 0:
        sys.exit("bench_straggler: --naming must be at least 0, --stop-ms and --run-ms above 0")
    work = tempfile.mkdtemp(prefix="bench_straggler_")
    gpt2test.write_shard(os.path.join(work, "train.bin"), gpt2test.learnable_tokens(200000, 256))
    deck = os.path.join(work, "deck.toml")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(
        os.path.join(work, "train.bin"), model__n_layer=4, model__n_head=4, model__n_embd=128, model__vocab_size=256,
        model__block_size=128, data__seq_len=128, train__batch_size=16, train__steps=args.steps,
        parallel__dp=2))
    if args.naming:
        result = naming(args, work, deck)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        return
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
