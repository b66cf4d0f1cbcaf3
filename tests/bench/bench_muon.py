#!/usr/bin/python3
"""Muon against AdamW on a small character-level recipe: the same model, data, batch and schedule
(inputs/shakespeare.toml scaled down: 4 layers x 128, T 128, batch 16, cosine from train.lr with 20
warm-up steps, --steps steps, validation every --eval-every steps), trained once with each optimizer.
AdamW runs at each of --adamw-lrs and its best final validation loss is the target (a fair AdamW:
tuned on the same budget); reported: the first validation at which Muon reaches it, as a fraction of
AdamW's steps and of AdamW's wall time (the time to that step, from the metrics log), and the curves.

  tests/bench/bench_muon.py --gpt2 build/bin/gpt2 --text FILE... [--steps 400] [--json out.json]

FILE: any text (Tiny Shakespeare; /usr/share/common-licenses/* on a Debian box), prepared here with
`gpt2 prepare --tokenizer byte`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import gpt2test  # noqa: E402


def train(args, data, optimizer, lr, extra, tag):
    metrics = os.path.join(data, f"{tag}.jsonl")
    deck = os.path.join(data, f"{tag}.toml")
    gpt2test.write_deck(deck, {
        "model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "block_size": 128},
        "data": {"train": f"{data}/train_*.bin", "val": f"{data}/val_*.bin", "seq_len": 128, "tokenizer": "byte"},
        "train": {"batch_size": 16, "steps": args.steps, "lr": lr, "min_lr": lr / 10, "warmup_steps": 20,
                  "schedule": "cosine", "weight_decay": 0.1, "eval_every": args.eval_every, "eval_batches": 8,
                  "optimizer": optimizer, "seed": 7, **extra}})
    p = subprocess.run([args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_muon: {optimizer} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    rows = gpt2test.read_jsonl(metrics)
    elapsed, t, val = {}, 0.0, {}
    for r in rows:
        if "step_ms" in r:
            t += r["step_ms"] / 1e3
            elapsed[r["step"]] = t
        if "val_loss" in r and r.get("val_loss", -1) >= 0:
            val[r["step"]] = r["val_loss"]
    return val, elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--text", nargs="+", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--lr", type=float, default=2e-3, help="train.lr of the Muon run (its AdamW tensors)")
    ap.add_argument("--adamw-lrs", default="1e-3,2e-3,4e-3", help="AdamW's rates tried; the best is the target")
    ap.add_argument("--muon-lr", type=float, default=0.02)
    ap.add_argument("--json")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="bench_muon_")
    subprocess.run([args.gpt2, "prepare", "--tokenizer", "byte", "--out", data, *args.text], check=True,
                   capture_output=True)
    runs = {}
    for lr in map(float, args.adamw_lrs.split(",")):
        runs[lr] = train(args, data, "adamw", lr, {}, f"adamw_{lr:g}")
        print(f"AdamW lr {lr:g}: final validation loss {runs[lr][0][max(runs[lr][0])]:.4f}", flush=True)
    best = min(runs, key=lambda lr: runs[lr][0][max(runs[lr][0])])
    adamw, t_adamw = runs[best]
    muon, t_muon = train(args, data, "muon", args.lr, {"muon_lr": args.muon_lr}, "muon")
    target = adamw[max(adamw)]
    print(f"the target: AdamW at lr {best:g}")
    reached = next((s for s in sorted(muon) if muon[s] <= target), None)
    print(f"{'step':>6} {'adamw val':>10} {'muon val':>10}")
    for s in sorted(adamw):
        print(f"{s:6d} {adamw[s]:10.4f} {muon.get(s, float('nan')):10.4f}")
    result = {"target": target, "adamw_lr": best, "steps": args.steps, "adamw": adamw, "muon": muon}
    if reached is None:
        print(f"Muon never reached AdamW's final validation loss {target:.4f} in {args.steps} steps")
    else:
        steps_ratio, time_ratio = reached / max(adamw), t_muon[reached] / t_adamw[max(adamw)]
        result |= {"muon_step": reached, "steps_ratio": steps_ratio, "time_ratio": time_ratio}
        print(f"AdamW's final validation loss {target:.4f} (step {max(adamw)}, {t_adamw[max(adamw)]:.1f} s): Muon "
              f"reached it at step {reached} ({t_muon[reached]:.1f} s): {steps_ratio:.2f}x the steps, "
              f"{time_ratio:.2f}x the wall time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
