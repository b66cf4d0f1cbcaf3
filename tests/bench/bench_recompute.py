#!/usr/bin/python3
"""Activation recomputation's trade, in one run: peak activations and step time of train.recompute
= none, selective and full on one rank and one thread, at T = 512 with 4 blocks of 512 channels and
8 heads, batch 1 (the linear layers outweigh attention, as in GPT-2; a byte vocabulary so that the
LM head does not hide the blocks). Peak activations are the trainer's own count (the trace's
activation_bytes: the microbatches' saved activations and what recomputed blocks share); the step
time is the median of the steps after the first. The losses of the three runs must be equal.

  tests/bench/bench_recompute.py --gpt2 build/bin/gpt2 --workdir /tmp/rcbench [--steps 6] [--json out]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def run(args, mode, extra):
    w = os.path.join(args.workdir, mode)
    os.makedirs(w, exist_ok=True)
    trace, metrics = os.path.join(w, "trace.h5"), os.path.join(w, "metrics.jsonl")
    for p in (trace, metrics):
        if os.path.exists(p):
            os.remove(p)
    deck = os.path.join(w, "deck.toml")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(
        args.shard, model__n_layer=4, model__n_embd=512, model__n_head=8, model__vocab_size=256,
        model__block_size=args.seq_len, data__seq_len=args.seq_len, train__batch_size=1, train__steps=args.steps,
        train__recompute=mode, parallel__host_threads=1, parallel__blas_threads=1, trace__file=trace, **extra))
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    p = subprocess.run([args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{mode}: exit {p.returncode}: {p.stderr[-1500:]}")
    steps = [m for m in gpt2test.read_jsonl(metrics) if "loss" in m]
    import h5py
    with h5py.File(trace, "r") as f:
        act = float(f["meta"].attrs["peak_activation_bytes"][0])
    return {"mode": mode, "activation_bytes": act, "step_s": statistics.median(m["step_ms"] / 1e3 for m in steps[1:]),
            "losses": [m["loss"] for m in steps]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    args.shard = os.path.join(args.workdir, "train.bin")
    gpt2test.write_shard(args.shard, gpt2test.learnable_tokens(20 * args.seq_len, 256))
    results = [run(args, m, {}) for m in ("none", "selective", "full")]
    base = results[0]
    for r in results:
        diff = max(abs(a - b) for a, b in zip(r["losses"], base["losses"]))
        r.update(activations_vs_none=r["activation_bytes"] / base["activation_bytes"],
                 step_vs_none=r["step_s"] / base["step_s"], max_loss_diff=diff)
        print(f"{r['mode']:9s}: peak activations {r['activation_bytes'] / 2**20:7.1f} MiB = {r['activations_vs_none']:.2f}x, "
              f"step {r['step_s'] * 1e3:7.1f} ms = {r['step_vs_none']:.2f}x, losses differ by {diff:.1e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
