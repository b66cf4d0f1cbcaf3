#!/usr/bin/python3
"""Soak: a long data-parallel run of a tiny model, watching every rank's resident memory for leaks.

Trains `--steps` (5000) steps of the tests' tiny model (2 layers, 32 channels, vocabulary 64;
batch 8 x 16 tokens unless --batch-size/--seq-len say otherwise) on `--ranks` (2) MPI ranks with
parallel.dp = ranks, a validation pass every --eval-every steps and a checkpoint every
--checkpoint-every steps (0: off), so the step, evaluation and checkpoint paths all run many
times. Every --interval (1) seconds it reads each rank's VmRSS from /proc/PID/status (the ranks
are the descendants of this script's own mpiexec whose command line holds the work folder) and
the step reached (lines of the metrics JSONL).

Reports per rank: RSS first / min / max / last, the RSS at the first sample past 10% of the steps
(the baseline: start-up, first allocations and warm-up are over) and the growth after it
(max - baseline). Memory is called flat when every rank grew less than --flat-mb (1 MB).
Writes WORKDIR/soak.json (every sample) and exits 1 when memory is not flat (2 when the run fails).

Usage: tests/bench/soak.py [--gpt2 build/bin/gpt2] [--workdir build/soak] [--steps 5000] ...
"""
import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import gpt2test  # noqa: E402
from test_faults import Job  # noqa: E402  (launch + rank discovery + cleanup, shared with the fault test)

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def status_kb(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if line.startswith('{"step"') and "loss" in line and "val_loss" not in line)
    except OSError:
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", default=os.path.join(REPO, "build", "bin", "gpt2"))
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", default=os.path.join(REPO, "build", "soak"))
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks, all data parallel (default 2)")
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--batch-size", type=int, default=8, help="global sequences per step (default 8)")
    ap.add_argument("--seq-len", type=int, default=16, help="tokens per sequence (default 16)")
    ap.add_argument("--eval-every", type=int, default=500, help="validation every N steps (0: at the end)")
    ap.add_argument("--checkpoint-every", type=int, default=1000, help="checkpoint every N steps (0: none)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between RSS samples (default 1)")
    ap.add_argument("--flat-mb", type=float, default=1.0, help="largest growth after 10%% of steps called flat")
    ap.add_argument("--timeout", type=float, default=3600, help="give up after this many seconds")
    args = ap.parse_args()
    args.workdir, args.gpt2 = os.path.abspath(args.workdir), os.path.abspath(args.gpt2)
    w = args.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)

    T = args.seq_len
    tokens_needed = args.batch_size * T * 50 + T + 1  # 50 batches per epoch: many epochs, shuffled
    gpt2test.write_shard(os.path.join(w, "train.bin"), gpt2test.learnable_tokens(tokens_needed, 64))
    gpt2test.write_shard(os.path.join(w, "val.bin"), gpt2test.learnable_tokens(T * 64 + 1, 64, seed=99))
    more = {"checkpoint__dir": os.path.join(w, "ckpt"), "checkpoint__every": args.checkpoint_every} \
        if args.checkpoint_every > 0 else {}
    deck = gpt2test.tiny_deck(os.path.join(w, "train.bin"), os.path.join(w, "val.bin"), train__steps=args.steps,
                              train__batch_size=args.batch_size, data__seq_len=T, data__shuffle=True,
                              model__block_size=max(T, 16), train__eval_every=args.eval_every,
                              train__eval_batches=2, parallel__dp=args.ranks, **more)
    cfg = os.path.join(w, "soak.toml")
    gpt2test.write_deck(cfg, deck)
    metrics = os.path.join(w, "soak.jsonl")

    job = Job(args, "soak", [args.gpt2, "train", cfg, "--metrics-jsonl", metrics, "-q"], args.ranks,
              {"GPT2_COMM_TIMEOUT": "120"})
    samples = []  # {"t", "step", "rss_kb": {rank: kB}}
    hwm = {}  # rank -> the last VmHWM (peak RSS) read
    try:
        ranks = job.find_ranks(args.ranks)
        if ranks is None:
            print(f"soak: did not find {args.ranks} rank processes:\n{job.output()[1][-2000:]}")
            raise SystemExit(2)
        t0 = time.time()
        while job.proc.poll() is None and time.time() - t0 < args.timeout:
            rss = {r: status_kb(p, "VmRSS") for r, p in sorted(ranks.items())}
            for r, p in ranks.items():
                h = status_kb(p, "VmHWM")
                hwm[r] = h if h is not None else hwm.get(r)
            if all(v is not None for v in rss.values()):
                samples.append({"t": round(time.time() - t0, 2), "step": count_lines(metrics), "rss_kb": rss})
            time.sleep(args.interval)
        rc = job.wait(60)
        wall = time.time() - t0
    finally:
        job.cleanup()
    if rc != 0:
        print(f"soak: the run failed (exit status {rc}):\n{job.output()[1][-2000:]}")
        raise SystemExit(2)
    steps_done = count_lines(metrics)
    if not samples:
        print("soak: no samples (the run ended before the first one)")
        raise SystemExit(2)

    base_i = next((i for i, s in enumerate(samples) if s["step"] >= args.steps // 10), len(samples) - 1)
    report = {"steps": steps_done, "wall_s": round(wall, 1), "samples": len(samples), "interval_s": args.interval,
              "baseline_sample": base_i, "baseline_step": samples[base_i]["step"], "ranks": {}}
    print(f"soak: {steps_done} steps on {args.ranks} ranks (dp) in {wall:.1f} s, {len(samples)} RSS samples; "
          f"baseline at step {samples[base_i]['step']} (t = {samples[base_i]['t']} s)")
    print(f"{'rank':>4} {'first MB':>9} {'min MB':>8} {'max MB':>8} {'last MB':>8} {'base MB':>8} "
          f"{'growth kB':>10} {'VmHWM MB':>9}  flat")
    flat_all = True
    for r, pid in sorted(ranks.items()):
        series = [s["rss_kb"][r] for s in samples]
        after = series[base_i:]
        growth = max(after) - series[base_i]
        flat = growth < args.flat_mb * 1024
        flat_all &= flat
        report["ranks"][r] = {"first_kb": series[0], "min_kb": min(series), "max_kb": max(series),
                              "last_kb": series[-1], "baseline_kb": series[base_i], "growth_kb": growth,
                              "last_minus_baseline_kb": series[-1] - series[base_i], "peak_kb": hwm.get(r),
                              "flat": flat}
        print(f"{r:>4} {series[0] / 1024:9.2f} {min(series) / 1024:8.2f} {max(series) / 1024:8.2f} "
              f"{series[-1] / 1024:8.2f} {series[base_i] / 1024:8.2f} {growth:10d} {(hwm.get(r) or 0) / 1024:9.2f}  {'yes' if flat else 'NO'}")
    report["flat"] = flat_all
    report["series"] = samples
    with open(os.path.join(w, "soak.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"memory {'flat' if flat_all else 'GROWS'} (threshold {args.flat_mb} MB after the first 10% of steps); "
          f"samples in {os.path.join(w, 'soak.json')}")
    raise SystemExit(0 if flat_all else 1)


if __name__ == "__main__":
    main()
