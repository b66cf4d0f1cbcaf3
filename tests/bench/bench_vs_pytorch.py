#!/usr/bin/python3
"""One training step (forward + backward + clip + AdamW) of GPT-2 124M at B=4, T=64, fp32, on this
machine: ours (build/bin/bench_train_step) against a standard PyTorch GPT-2 (nn.Linear, nn.LayerNorm,
tanh GELU, tied LM head, torch.optim.AdamW) with the same shapes and threads, in the same run.
Alternates the two --rounds times and reports medians and the ratio; also the GEMM floor: the
model's flops at the best rate of one fp32 GEMM at the LM head's shape on this box (measured here too;
through the library the step uses for it: oneDNN where built, OpenBLAS's sgemm otherwise).
Needs python3-torch (job_scripts/setup.sh --bench).

Usage: bench_vs_pytorch.py --bench build/bin/bench_train_step [--threads 2] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT2, adamw, train_step  # noqa: E402  (the model, shared with bench_gpu.py)


def pytorch_step_seconds(steps=5, B=4, T=64):
    torch.manual_seed(0)
    model = GPT2()
    opt = adamw(model)
    idx = torch.randint(0, 50257, (B, T))
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        train_step(model, opt, idx)
        if i:  # the first step allocates
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ours(bench, threads):
    """Our step (seconds, with its counters) and the fp32 GEMM rate at the LM head's shape."""
    out = subprocess.run([bench, "--benchmark_filter=TrainStep_124M|Sgemm_LMHead", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True,
                         env={"OPENBLAS_NUM_THREADS": str(threads), "PATH": "/usr/bin:/bin"})
    runs = {b["name"].split("/")[0]: b for b in json.loads(out.stdout)["benchmarks"]}
    step = runs["BM_TrainStep_124M_B4_T64"]
    step["separate_s"] = runs["BM_TrainStep_124M_B4_T64_SeparateTail"]["real_time"] / 1e3
    return step["real_time"] / 1e3, step, runs["BM_Sgemm_LMHead"]["GFLOP/s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="path to bench_train_step")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    mine, separate, theirs, gemm, info = [], [], [], [], None
    for _ in range(args.rounds):
        s, info, g = ours(args.bench, args.threads)
        mine.append(s), gemm.append(g), separate.append(info["separate_s"])
        torch.set_num_threads(args.threads)
        theirs.append(pytorch_step_seconds())
    gf = max(gemm)
    flops = info["GFLOP/s"] * info["real_time"] / 1e3  # GFLOP per step, from our benchmark's counter
    o, t = statistics.median(mine), statistics.median(theirs)
    floor = flops / gf
    print(f"GPT-2 124M, B=4, T=64, fp32, {args.threads} threads, torch {torch.__version__}:")
    print(f"  ours     {o:.3f} s/step  (runs {', '.join(f'{x:.3f}' for x in mine)})"
          f"  phases ms: fwd {info['fwd_ms']:.0f} bwd {info['bwd_ms']:.0f} adamw {info['adamw_ms']:.0f}"
          f" norm {info['norm_ms']:.0f} (gradients zeroed inside AdamW)")
    u = statistics.median(separate)
    print(f"  with the tail as separate passes (zeroing, norm, AdamW) {u:.3f} s/step: fusing saves {100 * (1 - o / u):.1f}%")
    print(f"  PyTorch  {t:.3f} s/step  (runs {', '.join(f'{x:.3f}' for x in theirs)})")
    print(f"  speed-up {t / o:.2f}x over PyTorch eager")
    print(f"  GEMM floor: {flops:.0f} GFLOP at {gf:.0f} GFLOP/s (best fp32 GEMM here) = {floor:.3f} s;"
          f" ours is {o / floor:.2f}x the floor")


if __name__ == "__main__":
    main()
