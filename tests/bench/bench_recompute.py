#!/usr/bin/python3
"""The memory levers, in one run of this script:
1. activation recomputation: peak activations and step time of train.recompute = none, selective and
   full on one rank and one thread, at T = 512 with 4 blocks of 512 channels and 8 heads, batch 1
   (the linear layers outweigh attention, as in GPT-2; a byte vocabulary so that the LM head does
   not hide the blocks);
2. context parallelism: peak activations per rank and step time of parallel.cp = 1, 2, 4 at T = 512
   with 4 blocks of 128 channels and 4 heads, batch 2, one thread a rank.
Peak activations are the trainer's own count (the trace's peak_activation_bytes: the microbatches'
saved activations and what recomputed blocks share); the step time is the median of the steps
after the first. Each table's losses must agree (recomputation: equal; cp: to 1e-5).

  tests/bench/bench_recompute.py --gpt2 build/bin/gpt2 --workdir /tmp/rcbench [--steps 6] [--json out]
  (analysis/plot_memory_levers.py --json out --png memory.png draws both)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def run(args, mode, extra, ranks=1, model=None):
    w = os.path.join(args.workdir, mode)
    os.makedirs(w, exist_ok=True)
    trace, metrics = os.path.join(w, "trace.h5"), os.path.join(w, "metrics.jsonl")
    for p in (trace, metrics):
        if os.path.exists(p):
            os.remove(p)
    deck = os.path.join(w, "deck.toml")
    shape = model or dict(model__n_layer=4, model__n_embd=512, model__n_head=8, train__batch_size=1, train__recompute=mode)
    gpt2test.write_deck(deck, gpt2test.tiny_deck(
        args.shard, model__vocab_size=256, model__block_size=args.seq_len, data__seq_len=args.seq_len,
        train__steps=args.steps, parallel__host_threads=1, parallel__blas_threads=1, trace__file=trace,
        **shape, **extra))
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    cmd = ([args.mpiexec, "-n", str(ranks)] if ranks > 1 else []) + [args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    args.shard = os.path.join(args.workdir, "train.bin")
    gpt2test.write_shard(args.shard, gpt2test.learnable_tokens(20 * args.seq_len, 256))
    def table(title, results):
        print(title, flush=True)
        base = results[0]
        for r in results:
            diff = max(abs(a - b) for a, b in zip(r["losses"], base["losses"]))
            r.update(activations_vs_first=r["activation_bytes"] / base["activation_bytes"],
                     step_vs_first=r["step_s"] / base["step_s"], max_loss_diff=diff)
            print(f"  {r['mode']:9s}: peak activations {r['activation_bytes'] / 2**20:7.1f} MiB = "
                  f"{r['activations_vs_first']:.2f}x, step {r['step_s'] * 1e3:7.1f} ms = {r['step_vs_first']:.2f}x, "
                  f"losses differ by {diff:.1e}", flush=True)
        return results

    recompute = table("recomputation (4 x 512 channels, 8 heads, T %d, batch 1, one thread):" % args.seq_len,
                      [run(args, m, {}) for m in ("none", "selective", "full")])
    cp_model = dict(model__n_layer=4, model__n_embd=128, model__n_head=4, train__batch_size=2)
    cp = table("context parallelism (4 x 128 channels, 4 heads, T %d, batch 2, one thread a rank):" % args.seq_len,
               [run(args, f"cp{n}", {"parallel__cp": n}, n, cp_model) for n in (1, 2, 4)])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"recompute": recompute, "context_parallel": cp}, f, indent=1)


if __name__ == "__main__":
    main()
