#!/usr/bin/env python3
"""GPT-2 124M training throughput on one GPU: ours (bench_train_step, CUDA build) against a PyTorch
eager GPT-2 of the same shapes (tests/bench/torch_gpt2.py) on the same device, fp32, TF32 and bf16.

For each precision: our step at T=1024 and the largest batch that fits (--batches, tried in order,
default 16, 8, 4), then PyTorch at the same batch (smaller if it does not fit): first with attention
materialised as ours ("torch eager") in every precision, then the same model under torch.compile
("torch compile"), then PyTorch's fused SDPA ("torch sdpa"), as far as --budget allows. bf16 is mixed
precision on both sides: fp32 weights and optimizer, 16-bit matrix products (ours: train.precision =
"bf16"; PyTorch: torch.autocast). Reports step time, tokens/s, achieved model TFLOP/s and MFU
(6N + 12*L*C*T FLOPs per token, N = our parameter count, against --peak-fp32 / --peak-tf32 /
--peak-bf16; defaults for an H100/H200 SXM: 67 fp32, 495 dense TF32 and 989 dense bf16 TFLOP/s,
H100 PCIe 51 / 378 / 756), our/PyTorch ratio, where our step's time goes (the
benchmark's fenced phases; the per-kernel table is job_scripts/gpu_run.sh's profile phase) and
PyTorch's top CUDA kernels (torch.profiler).

Runs where python3 has a CUDA-enabled torch. --bench may be a wrapper script that sets the
library path (job_scripts/gpu_run.sh passes gpu-bundle/bin/bench_train_step).

Usage: bench_gpu.py --bench PATH [--out results.json] [--batches 16,8,4] [--seq 1024]
                    [--precisions fp32,tf32,bf16] [--torch-attention naive,compile,sdpa] [--min-time 2]
                    [--budget SECONDS]
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

V = 50257
MODELS = {"124M": (12, 12, 768, 1024), "small": (6, 6, 384, 256)}  # L, heads, C, max T (as bench_train_step)
L, NH, C, MAXT = MODELS["124M"]


def log(msg):
    print(msg, flush=True)


def peaks_for(name):
    """(fp32, dense TF32, dense bf16) peak TFLOP/s for the device name, and what they assume."""
    n = name.upper()
    if "H100" in n and "PCIE" in n:
        return 51.0, 378.0, 756.0, "H100 PCIe"
    if "H100" in n or "H200" in n or "GH200" in n:
        return 67.0, 495.0, 989.0, "H100/H200 SXM"
    if "A100" in n:
        return 19.5, 156.0, 312.0, "A100"
    return 67.0, 495.0, 989.0, "unknown device: H100 SXM figures"


def run_ours(bench, model, B, T, precision, min_time, timeout):
    env = dict(os.environ, GPT2_BENCH_MODEL=model, GPT2_BENCH_B=str(B), GPT2_BENCH_T=str(T),
               GPT2_BENCH_TF32="1" if precision in ("tf32", "bf16+tf32") else "0",
               GPT2_BENCH_PRECISION=precision.split("+")[0] if precision.startswith(("bf16", "fp16")) else "fp32",
               GPT2_BENCH_MIN_TIME=str(min_time), GPT2_BENCH_KERNEL_TABLE="")
    cmd = [bench, "--benchmark_filter=TrainStepEnv", "--benchmark_format=json"]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout} s"}
    res = {"ok": False, "seconds": round(time.time() - t0, 1), "rc": p.returncode}
    if p.returncode != 0:
        text = (p.stdout + p.stderr)
        oom = any(k in text.lower() for k in ("out of memory", "failed to allocate", "cudamalloc"))
        res["error"] = ("out of memory: " if oom else "") + text.strip()[-1500:]
        res["oom"] = oom
        return res
    try:
        runs = [b for b in json.loads(p.stdout)["benchmarks"] if b["name"].startswith("TrainStepEnv")]
        b = runs[0]
    except (ValueError, KeyError, IndexError) as e:
        res["error"] = f"cannot read the benchmark output ({e}): {p.stdout[-800:]} {p.stderr[-800:]}"
        return res
    res.update(ok=True, name=b["name"], step_ms=b["real_time"], iterations=b["iterations"],
               tokens_per_s=b["tokens/s"], params=b["params_M"] * 1e6,
               phases_ms={k: b[k + "_ms"] for k in ("zero", "fwd", "bwd", "norm", "adamw")})
    return res


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run_torch(torch, dev, B, T, precision, attention, steps, warmup, profile):
    """attention: naive (materialised, as ours), sdpa (PyTorch's fused kernel), or compile (naive
    under torch.compile; the compilation happens in the warm-up steps, untimed)."""
    import torch_gpt2

    tf32 = precision in ("tf32", "bf16+tf32")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision.split("+")[0])
    oom_error = getattr(torch.cuda, "OutOfMemoryError", MemoryError)
    res = {"ok": False, "attention": attention}
    model = opt = idx = None
    try:
        torch.manual_seed(0)
        model = torch_gpt2.GPT2(L, NH, C, V, MAXT, attention="sdpa" if attention == "sdpa" else "naive").to(dev)
        opt = torch_gpt2.adamw(model)
        if attention == "compile":
            model = torch.compile(model)
        idx = torch.randint(0, V, (B, T), device=dev)
        t0 = time.perf_counter()
        for _ in range(warmup):
            torch_gpt2.train_step(model, opt, idx, autocast)
        sync(torch, dev)
        res["warmup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(steps):
            torch_gpt2.train_step(model, opt, idx, autocast)
        sync(torch, dev)
        step = (time.perf_counter() - t0) / steps
        res.update(ok=True, step_ms=1e3 * step, tokens_per_s=B * T / step, steps=steps,
                   params=sum(p.numel() for p in model.parameters()))
        if dev.type == "cuda":
            res["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
        if profile:
            res["top_kernels"] = torch_profile(torch, dev, torch_gpt2, model, opt, idx, autocast)
    except oom_error as e:
        res.update(error=f"out of memory: {str(e)[:300]}", oom=True)
    except Exception as e:  # noqa: BLE001 - report and go on with the next configuration
        res.update(error=f"{type(e).__name__}: {str(e)[:800]}")
    finally:
        del model, opt, idx
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return res


def torch_profile(torch, dev, torch_gpt2, model, opt, idx, autocast, steps=2, top=15):
    """Top CUDA kernels of `steps` steps: name, ms per step, calls per step."""
    if dev.type != "cuda":
        return []
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                torch_gpt2.train_step(model, opt, idx, autocast)
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = 0.0
            for attr in ("self_device_time_total", "self_cuda_time_total"):
                if hasattr(e, attr):
                    t = float(getattr(e, attr))
                    break
            if t > 0 and getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type):
                rows.append({"name": e.key[:90], "ms_per_step": t / 1e3 / steps, "calls_per_step": e.count / steps})
        if not rows:  # older/newer profilers: fall back to every event with device time
            for e in prof.key_averages():
                t = float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) or 0)
                if t > 0:
                    rows.append({"name": e.key[:90], "ms_per_step": t / 1e3 / steps, "calls_per_step": e.count / steps})
        rows.sort(key=lambda r: -r["ms_per_step"])
        return rows[:top]
    except Exception as e:  # noqa: BLE001
        return [{"name": f"(profiler failed: {type(e).__name__}: {str(e)[:200]})", "ms_per_step": 0, "calls_per_step": 0}]


def flops_per_token(n_params, T):
    return 6.0 * n_params + 12.0 * L * C * T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--bench", required=True, help="bench_train_step of the CUDA build (or its wrapper)")
    ap.add_argument("--out", help="write every result here (JSON)")
    ap.add_argument("--batches", default="16,8,4")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precisions", default="fp32,tf32,bf16",
                    help="fp32, tf32, bf16 (attention's products in fp32: train.tf32 = false), bf16+tf32 (in "
                         "TF32: the trainer's default, train.tf32 = auto), fp16 (comma-separated)")
    ap.add_argument("--torch-attention", default="naive,compile,sdpa",
                    help="PyTorch variants, in this order: naive (eager, attention as ours), compile (naive under "
                         "torch.compile), sdpa (fused attention)")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for the whole script (0: no limit): runs that would start later are skipped, "
                         "saying so, and the report is still written")
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds of timed steps per run of ours")
    ap.add_argument("--torch-steps", type=int, default=10)
    ap.add_argument("--torch-warmup", type=int, default=3)
    ap.add_argument("--peak-fp32", type=float, default=0, help="TFLOP/s (default: from the device name)")
    ap.add_argument("--peak-tf32", type=float, default=0, help="dense TFLOP/s (default: from the device name)")
    ap.add_argument("--peak-bf16", type=float, default=0, help="dense TFLOP/s (default: from the device name)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-ours", action="store_true")
    ap.add_argument("--timeout", type=float, default=300, help="per run of ours")
    ap.add_argument("--model", choices=sorted(MODELS), default="124M", help="small: a smoke test")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of this script")
    args = ap.parse_args()
    global L, NH, C, MAXT
    L, NH, C, MAXT = MODELS[args.model]

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        log("bench_gpu: torch sees no CUDA device; run this on a GPU machine")
        return 2
    dev = torch.device(args.device)
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    p32, ptf, pbf, basis = peaks_for(device)
    p32 = args.peak_fp32 or p32
    ptf = args.peak_tf32 or ptf
    pbf = args.peak_bf16 or pbf
    peaks = {"fp32": p32, "tf32": ptf, "bf16": pbf, "bf16+tf32": pbf, "fp16": pbf}
    batches = [int(b) for b in args.batches.split(",") if b]
    precisions = [p for p in args.precisions.split(",") if p]
    attentions = [a for a in args.torch_attention.split(",") if a]
    T = args.seq
    out = {"device": device, "torch": torch.__version__, "model": args.model, "T": T, "peaks_tflops": peaks,
           "peak_basis": args.peak_fp32 and args.peak_tf32 and args.peak_bf16 and "given" or basis, "results": [],
           "skipped": []}
    log(f"bench_gpu: {device}, torch {torch.__version__}, GPT-2 {args.model}, T={T}, batches tried {batches}")
    log(f"peaks used for MFU: fp32 {p32:g}, TF32 {ptf:g}, bf16 {pbf:g} TFLOP/s (dense; {out['peak_basis']})")
    started = time.time()

    def out_of_time(what):
        if args.budget and time.time() - started > args.budget:
            log(f"{what}: skipped, the --budget of {args.budget:g} s is spent")
            out["skipped"].append(what)
            return True
        return False

    def save():  # after every run, so a run cut short still leaves what it measured
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)

    # Ours first (each run in its own process), while PyTorch holds no GPU memory yet.
    ours = {}
    fits = batches  # a batch that did not fit in one precision does not fit in the next
    for prec in precisions if not args.no_ours else []:
        for B in fits:
            if out_of_time(f"ours {prec} B={B}"):
                break
            log(f"ours  {prec} B={B} T={T} ...")
            r = run_ours(args.bench, args.model, B, T, prec, args.min_time, args.timeout)
            r.update(impl="ours (Kokkos)", precision=prec, B=B)
            out["results"].append(r)
            save()
            if r["ok"]:
                log(f"      {r['step_ms']:.1f} ms/step, {r['tokens_per_s']:.0f} tokens/s")
                ours[prec] = r
                fits = [b for b in batches if b <= B]
                break
            log(f"      failed: {r.get('error', '')[:400]}")
    n_params = next((r["params"] for r in ours.values()), None)

    # Eager in every precision first (the comparison that matters), then compile, then sdpa.
    for attention in attentions if not args.no_torch else []:
        for prec in precisions:
            start = ours[prec]["B"] if prec in ours else batches[0]
            for B in [b for b in batches if b <= start] or [start]:
                if out_of_time(f"torch {prec} {attention} B={B}"):
                    break
                log(f"torch {prec} {attention} B={B} T={T} ...")
                r = run_torch(torch, dev, B, T, prec, attention, args.torch_steps, args.torch_warmup,
                              profile=(attention == "naive"))
                r.update(impl=f"torch {'eager' if attention == 'naive' else attention}", precision=prec, B=B)
                out["results"].append(r)
                save()
                if r["ok"]:
                    log(f"      {r['step_ms']:.1f} ms/step, {r['tokens_per_s']:.0f} tokens/s")
                    break
                log(f"      failed: {r.get('error', '')[:400]}")
    if n_params is None:
        n_params = next((r["params"] for r in out["results"] if r.get("ok")), 124.4e6)
    fpt = flops_per_token(n_params, T)
    out["flops_per_token"] = fpt
    out["n_params"] = n_params

    # ---- report ------------------------------------------------------------------------------
    lines = []
    lines.append(f"GPT-2 {args.model} training step on {device} (torch {torch.__version__}), T={T}")
    lines.append(f"FLOPs/token = 6N + 12*L*C*T = 6*{n_params / 1e6:.2f}M + 12*{L}*{C}*{T} = {fpt / 1e9:.3f} GFLOP;"
                 f" peaks: fp32 {p32:g}, TF32 {ptf:g}, bf16 {pbf:g} TFLOP/s ({out['peak_basis']})")
    lines.append(f"{'precision':9} {'implementation':15} {'B':>3} {'ms/step':>9} {'tokens/s':>10} {'TFLOP/s':>8}"
                 f" {'MFU':>6} {'ours/this':>9}")
    for r in out["results"]:
        if not r.get("ok"):
            continue
        tflops = r["tokens_per_s"] * fpt / 1e12
        r["model_tflops"] = tflops
        r["mfu"] = tflops / peaks[r["precision"]]
        o = ours.get(r["precision"])
        ratio = o["tokens_per_s"] / r["tokens_per_s"] if o else float("nan")
        r["ours_over_this"] = ratio
        lines.append(f"{r['precision']:9} {r['impl']:15} {r['B']:3d} {r['step_ms']:9.1f} {r['tokens_per_s']:10.0f}"
                     f" {tflops:8.1f} {100 * r['mfu']:5.1f}% {ratio:9.2f}")
    for r in out["results"]:
        if not r.get("ok"):
            lines.append(f"  (failed: {r['precision']} {r['impl']} B={r['B']}: {str(r.get('error', ''))[:160]})")
    for what in out["skipped"]:
        lines.append(f"  (skipped for time: {what})")
    for prec, o in ours.items():
        ph = o["phases_ms"]
        total = sum(ph.values())
        lines.append(f"\nours, {prec}, B={o['B']}: phases (fenced) "
                     + ", ".join(f"{k} {v:.1f} ms ({100 * v / total:.0f}%)" for k, v in ph.items()))
    for r in out["results"]:
        if r.get("ok") and r.get("top_kernels"):
            lines.append(f"\n{r['impl']}, {r['precision']}, B={r['B']}: top CUDA kernels (torch.profiler)")
            for k in r["top_kernels"]:
                lines.append(f"  {k['name'][:70]:70} {k['calls_per_step']:6.0f} {k['ms_per_step']:9.2f} ms/step")
    report = "\n".join(lines)
    print("\n" + report, flush=True)
    out["report"] = report
    save()
    return 0 if ours or args.no_ours else 1


if __name__ == "__main__":
    sys.exit(main())
