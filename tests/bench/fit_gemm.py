#!/usr/bin/python3
"""The step model's GEMM prices against GEMMs measured on the device (tests/bench/measure_gemm.py).

Every measured GEMM (and batched GEMM) of the JSON is priced by `gpt2 simulate --batch` (rows
`gemm=M,N,K,BATCH`) on a hardware file, and the two are compared shape by shape: the error
model / measured - 1, its median and worst over the shapes of at least --min-gflop, and the
time-weighted error (sum |model - measured| / sum measured: what a step made of these GEMMs
would be off by). --fit searches the hardware file's two free GEMM parameters, gemm_efficiency
and gemm_k_overhead, over a grid for the smallest time-weighted error, the rest of the file
unchanged, and prints the best pair: device facts measured on the device, the same for every
layout the planner prices.

Usage: fit_gemm.py MEASURED.json [--hardware inputs/hardware/h100.toml] [--gpt2 build/bin/gpt2]
                   [--precision bf16] [--fit] [--min-gflop 1] [--show 20]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def price(gpt2, hardware_files, shapes, precision):
    """{hardware file: [model seconds of each shape]} from one gpt2 simulate --batch process."""
    lines = []
    for h, path in enumerate(hardware_files):
        for i, s in enumerate(shapes):
            lines.append(f"id={h}:{i} hardware={path} precision={precision} "
                         f"gemm={s['m']},{s['n']},{s['k']},{s.get('batch', 1)}")
    proc = subprocess.run([gpt2, "simulate", os.path.join(ROOT, "inputs/gpt2-124M.toml"), "--batch", "-"],
                          input="\n".join(lines), capture_output=True, text=True)
    out = {path: [None] * len(shapes) for path in hardware_files}
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        if "error" in row:
            sys.exit(f"fit_gemm.py: gpt2 simulate: {row['error']}")
        h, i = (int(x) for x in row["id"].split(":"))
        out[hardware_files[h]][i] = row["gemm_ms"] / 1e3
    if proc.returncode != 0 or any(v is None for vs in out.values() for v in vs):
        sys.exit(f"fit_gemm.py: gpt2 simulate --batch failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return out


def errors(shapes, model, min_gflop):
    """(median |error|, worst |error|, time-weighted error) over the shapes of >= min_gflop."""
    picked = [(s, m) for s, m in zip(shapes, model) if s["flops"] >= min_gflop * 1e9]
    rel = [abs(m / s["seconds"] - 1) for s, m in picked]
    weighted = sum(abs(m - s["seconds"]) for s, m in picked) / sum(s["seconds"] for s, _ in picked)
    return statistics.median(rel), max(rel), weighted


def with_values(text, efficiency, k_overhead):
    """The hardware file's text with gemm_efficiency and gemm_k_overhead set."""
    for key, value in (("gemm_efficiency", efficiency), ("gemm_k_overhead", k_overhead)):
        text, n = re.subn(rf"(?m)^{key}\s*=.*$", f"{key} = {value}", text)
        if n != 1:
            sys.exit(f"fit_gemm.py: the hardware file has no single '{key} =' line")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured", help="measure_gemm.py's JSON")
    ap.add_argument("--hardware", default=os.path.join(ROOT, "inputs/hardware/h100.toml"))
    ap.add_argument("--gpt2", default=os.path.join(ROOT, "build/bin/gpt2"))
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--min-gflop", type=float, default=1.0,
                    help="compare shapes of at least this many GFLOP (smaller ones are launch latency)")
    ap.add_argument("--fit", action="store_true", help="search gemm_efficiency and gemm_k_overhead")
    ap.add_argument("--show", type=int, default=20, help="shapes to list, the largest errors first")
    args = ap.parse_args()

    with open(args.measured) as f:
        measured = json.load(f)
    shapes = [r for r in measured["results"] if r["kind"] in ("gemm", "batched")]
    for s in shapes:
        s["flops"] = 2.0 * s["m"] * s["n"] * s["k"] * s.get("batch", 1)
    if not shapes:
        sys.exit(f"fit_gemm.py: {args.measured} holds no GEMMs")
    print(f"{len(shapes)} GEMMs measured on {measured['device']} ({measured['dtype']}, {measured['date']}); "
          f"model: {os.path.relpath(args.hardware, ROOT)}")

    model = price(args.gpt2, [args.hardware], shapes, args.precision)[args.hardware]
    med, worst, weighted = errors(shapes, model, args.min_gflop)
    print(f"as the file stands: median |error| {med:.1%}, worst {worst:.1%}, time-weighted {weighted:.1%} "
          f"(shapes of >= {args.min_gflop:g} GFLOP)")
    ranked = sorted(((m / s["seconds"] - 1, s, m) for s, m in zip(shapes, model) if s["flops"] >= args.min_gflop * 1e9),
                    key=lambda x: -abs(x[0]))
    for err, s, m in ranked[:args.show]:
        print(f"  {s['m']:6d} x {s['n']:6d} x {s['k']:6d} x {s.get('batch', 1):3d}: measured {s['seconds'] * 1e3:8.3f} ms "
              f"({s['tflops']:5.0f} TFLOP/s), model {m * 1e3:8.3f} ms  {err:+.1%}")

    if not args.fit:
        return
    with open(args.hardware) as f:
        text = f.read()
    grid = [(e / 100, k) for e in range(60, 97, 2) for k in (0, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)]
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, (e, k) in enumerate(grid):
            path = os.path.join(tmp, f"hw{i}.toml")
            with open(path, "w") as f:
                f.write(with_values(text, e, k))
            files.append(path)
        priced = price(args.gpt2, files, shapes, args.precision)
        scored = sorted((errors(shapes, priced[path], args.min_gflop), e, k) for path, (e, k) in zip(files, grid))
    scored.sort(key=lambda x: x[0][2])
    print("best by time-weighted error (gemm_efficiency, gemm_k_overhead: median, worst, time-weighted):")
    for (med, worst, weighted), e, k in scored[:5]:
        print(f"  {e:.2f}, {k:5d}: {med:.1%}, {worst:.1%}, {weighted:.1%}")


if __name__ == "__main__":
    main()
