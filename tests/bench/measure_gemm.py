#!/usr/bin/env python3
"""What a GPU's matrix library reaches, by shape: the measured facts behind a hardware file's
GEMM efficiency model (inputs/hardware/*.toml: gemm_efficiency, gemm_k_overhead,
flash_attention_efficiency, memory_efficiency).

Times, through PyTorch on one device (CUDA events, after warm-up, the median of --reps):
  gemm       C[M,N] = A[M,K] B[K,N] over a grid of M, N, K (the shapes a transformer layer's
             products take: rows = tokens of a microbatch, N and K = hidden sizes and their 3x and 4x
             over tensor-parallel degrees), and batched T x T x d products (attention materialised);
  attention  fused causal attention (torch's scaled_dot_product_attention) forward and
             forward + backward, TFLOP/s counted over the causal half;
  copy       a device-to-device copy (bytes read + written a second).
Writes one JSON (--out): the device, its peak (--peak, default from the name), and each shape's
seconds, TFLOP/s and fraction of the peak. Compare it with the model: tests/bench/fit_gemm.py.

Usage: measure_gemm.py [--out gemm.json] [--dtype bf16|tf32|fp32] [--quick] [--device cuda|cpu]
"""
import argparse
import contextlib
import itertools
import json
import sys
import time

PEAKS = {  # dense TFLOP/s of the datasheets: bf16, tf32, fp32
    "H100 PCIE": (756.0, 378.0, 51.0),
    "H100": (989.4, 494.7, 67.0),
    "H200": (989.4, 494.7, 67.0),
    "A100": (312.0, 156.0, 19.5),
}


def peak_for(name, dtype):
    n = name.upper()
    for key in ("H100 PCIE", "H100", "H200", "A100"):
        if key in n:
            return PEAKS[key][("bf16", "tf32", "fp32").index(dtype)]
    return 0.0


def grid(quick):
    if quick:
        return [(m, n, k) for m in (512, 2048) for n in (768, 3072) for k in (768, 3072)]
    rows = (512, 1024, 2048, 4096, 8192, 16384)
    cols = (768, 1152, 1536, 2304, 3072, 4096, 6144, 8192, 12288, 16384, 24576)
    depth = (768, 1536, 2304, 4096, 8192, 16384)
    return list(itertools.product(rows, cols, depth))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="gemm.json")
    ap.add_argument("--dtype", choices=("bf16", "tf32", "fp32"), default="bf16")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions a shape (the median is kept)")
    ap.add_argument("--budget", type=float, default=240, help="seconds: shapes left are skipped, saying so")
    ap.add_argument("--quick", action="store_true", help="a handful of shapes (a smoke test)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--peak", type=float, default=0, help="TFLOP/s (default: the datasheet's for the device)")
    args = ap.parse_args()

    import torch
    dev = torch.device(args.device)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("measure_gemm.py: no CUDA device visible to torch (--device cpu for a smoke test)")
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    peak = args.peak or peak_for(name, args.dtype)
    t_start = time.time()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def timed(fn):
        """Seconds of one fn(), as a stream of them runs: --reps times, the median of `inner` calls
        back to back between two events each (one call alone would time its launch too)."""
        for _ in range(2):
            fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        inner = max(1, min(200, int(2e-3 / max(time.perf_counter() - t0, 1e-6))))  # ~2 ms a timing
        times = []
        for _ in range(args.reps):
            if args.device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(inner):
                    fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3 / inner)
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn()
                times.append((time.perf_counter() - t0) / inner)
        return sorted(times)[len(times) // 2]

    def entry(kind, shape, flops, seconds):
        tf = flops / seconds / 1e12
        return {"kind": kind, **shape, "seconds": seconds, "tflops": tf, "of_peak": tf / peak if peak else None}

    results, skipped = [], 0
    for m, n, k in grid(args.quick):
        if time.time() - t_start > args.budget:
            skipped += 1
            continue
        ops = (torch.randn(m, k, device=dev, dtype=dtype), torch.randn(k, n, device=dev, dtype=dtype),
               torch.empty(m, n, device=dev, dtype=dtype))
        s = timed(lambda: torch.matmul(ops[0], ops[1], out=ops[2]))
        results.append(entry("gemm", {"m": m, "n": n, "k": k, "batch": 1}, 2.0 * m * n * k, s))
        ops = None  # freed before the next shape's
    print(f"gemm: {len(results)} shapes, {skipped} skipped (budget)", flush=True)

    # Attention's products materialised: (B*heads) x T x T x d, scores then scores x V.
    for t, d, bh in ((1024, 64, 96), (2048, 64, 96), (2048, 128, 48), (4096, 128, 24)):
        if args.quick and t > 1024:
            continue
        q = torch.randn(bh, t, d, device=dev, dtype=dtype)
        kk = torch.randn(bh, d, t, device=dev, dtype=dtype)
        s = timed(lambda: torch.bmm(q, kk))
        results.append(entry("batched", {"m": t, "n": t, "k": d, "batch": bh}, 2.0 * bh * t * t * d, s))

    # Fused causal attention, forward and forward + backward (FLOPs over the causal half; the backward
    # counted as 2.5 forwards, its recomputed scores included), by each backend torch offers here.
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    except ImportError:
        backends, sdpa_kernel = [("default", None)], None
    shapes = ((1024, 64, 12, 16), (2048, 64, 32, 4), (4096, 96, 24, 2), (2048, 128, 16, 4), (4096, 128, 16, 2))
    for (t, d, heads, batch), (backend, which) in itertools.product(shapes, backends):
        if sdpa is None or (args.quick and t > 1024) or args.dtype != "bf16":
            continue
        q, kk, v = (torch.randn(batch, heads, t, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(batch, heads, t, d, device=dev, dtype=dtype)
        fwd_flops = 4.0 * batch * heads * t * t * d / 2
        shape = {"t": t, "d": d, "heads": heads, "batch": batch, "backend": backend}
        try:
            with sdpa_kernel([which]) if which is not None else contextlib.nullcontext():
                s = timed(lambda: sdpa(q, kk, v, is_causal=True))
                results.append(entry("attention_fwd", shape, fwd_flops, s))
                s = timed(lambda: sdpa(q, kk, v, is_causal=True).backward(grad))
                results.append(entry("attention_fwd_bwd", shape, 3.5 * fwd_flops, s))
        except RuntimeError as e:  # a backend this device or build does not have
            print(f"attention {backend} T{t} d{d}: not run ({str(e).splitlines()[0][:120]})", flush=True)

    nbytes = (64 if not args.quick else 1) << 24
    src = torch.empty(nbytes, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    s = timed(lambda: dst.copy_(src))
    copy = {"bytes": nbytes, "seconds": s, "gbs_read_plus_written": 2.0 * nbytes / s / 1e9}

    out = {"device": name, "dtype": args.dtype, "peak_tflops": peak, "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "results": results, "copy": copy, "skipped": skipped}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    gemms = [r for r in results if r["kind"] == "gemm"]
    if gemms and peak:
        best = max(gemms, key=lambda r: r["tflops"])
        print(f"{name} {args.dtype}: best GEMM {best['tflops']:.0f} TFLOP/s ({best['of_peak']:.2f} of {peak}) "
              f"at {best['m']}x{best['n']}x{best['k']}")
    for r in results:
        if r["kind"].startswith("attention"):
            print(f"{r['kind']} {r['backend']} T{r['t']} d{r['d']}: {r['tflops']:.0f} TFLOP/s ({(r['of_peak'] or 0):.2f})")
    print(f"copy: {copy['gbs_read_plus_written']:.0f} GB/s read + written; wrote {args.out} "
          f"in {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
