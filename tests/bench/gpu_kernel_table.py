#!/usr/bin/env python3
"""The per-kernel table of one training step on a GPU, from what job_scripts/gpu_run.sh's profile
phase measured:
  --ops FILE     bench_train_step's per-operation table (GPT2_BENCH_KERNEL_TABLE; CUDA events around
                 every Kokkos kernel and library GEMM, and the device's idle time between them)
  --sweep FILE   gemm_sweep's output: each GEMM shape standalone, our call against cuBLASLt's best
                 algorithm and against bf16 in / bf16 out
  --ncu FILE     (optional) Nsight Compute's CSV of a step (--page raw --print-units base, kernels
                 named by our NVTX ranges): DRAM bytes read and written per launch, and GB/s over
                 ncu's own kernel time (where ncu stopped early, over the launches it saw)
  --copy-gbs X   the device-to-device copy bandwidth measured in the same run (bytes read + written)
  --step-ms X    the step's time without the profile (the benchmark's own timing)

Usage:
  gpu_kernel_table.py shapes OPS.json                       GEMM lines for gemm_sweep
  gpu_kernel_table.py report --ops OPS.json [--sweep S] [--ncu CSV] [--copy-gbs X] [--step-ms X] [--top 25]
"""
import argparse
import csv
import json
import sys


def gemm_flops(g):
    return 2.0 * g["M"] * g["N"] * g["K"] * g["batch"]


def shape_key(g):
    return (g["opA"], g["opB"], g["M"], g["N"], g["K"], g["batch"], g["lda"], g["ldb"], g["ldc"],
            int(bool(g["accumulate"])), g["in"], g["out"])


def cmd_shapes(ops_path):
    ops = json.load(open(ops_path))
    seen = set()
    for op in ops["ops"]:
        if "gemm" in op:
            k = shape_key(op["gemm"])
            if k not in seen:
                seen.add(k)
                print(" ".join(str(x) for x in k))


def read_ncu(path):
    """{kernel name: [bytes per call summed, ns summed, launches]} from ncu's raw CSV page."""
    rows = list(csv.reader(open(path, errors="replace")))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        return {}
    head = rows[start]
    col = {name: head.index(name) for name in head}
    need = ["dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"]
    if not all(n in col for n in need):
        return {}
    out = {}
    for r in rows[start + 1:]:
        if len(r) != len(head):
            continue
        try:
            rd, wr, ns = (float(r[col[n]].replace(",", "")) for n in need)
        except ValueError:
            continue  # the units row
        name = r[col["Kernel Name"]].split("/")[0].strip()  # "NVTX range/kernel": our operation's name
        acc = out.setdefault(name, [0.0, 0.0, 0])
        acc[0] += rd + wr
        acc[1] += ns
        acc[2] += 1
    return out


def cmd_report(a):
    ops = json.load(open(a.ops))
    steps = ops["profiled_steps"]
    sweep = {}
    if a.sweep:
        for line in open(a.sweep):
            line = line.strip()
            if line.startswith("{"):
                s = json.loads(line)
                sweep[shape_key(s)] = s
    ncu = read_ncu(a.ncu) if a.ncu else {}
    gemms = [o for o in ops["ops"] if "gemm" in o]
    others = [o for o in ops["ops"] if "gemm" not in o]
    busy, idle = ops["busy_ms_per_step"], ops["idle_between_ms_per_step"]
    g_ms = sum(o["ms_per_step"] for o in gemms)
    k_ms = sum(o["ms_per_step"] for o in others)
    step = a.step_ms or busy + idle
    L = []
    L.append(f"One steady step: GPT-2 {ops.get('n_layer')} layers x {ops.get('n_embd')}, B {ops.get('B')}, "
             f"T {ops.get('T')}, attention {ops.get('attention')}; {steps} steps timed by {ops.get('timed_by')}.")
    L.append(f"step {step:.2f} ms (benchmark, no profile) | on the device: GEMMs {g_ms:.2f} ms "
             f"({100 * g_ms / step:.0f}%), other kernels {k_ms:.2f} ms ({100 * k_ms / step:.0f}%), idle between "
             f"operations {idle:.2f} ms ({100 * idle / step:.0f}%; under the profile's events)")
    L.append("")
    L.append("| GEMM (row-major op(A) op(B), M x N x K [x batch], in>out) | calls | ms/step | TFLOP/s in step |"
             " standalone ours | cuBLASLt best | best bf16>bf16 | step / best |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    tot_best = 0.0
    for o in sorted(gemms, key=lambda o: -o["ms_per_step"]):
        g = o["gemm"]
        calls = o["calls_per_step"]
        tf = gemm_flops(g) * calls / (o["ms_per_step"] * 1e-3) / 1e12 if o["ms_per_step"] > 0 else 0
        s = sweep.get(shape_key(g))
        if s:
            best = s["lt_best_ms"] * calls
            tot_best += min(best, s["ours_ms"] * calls)
            cols = (f"{s['ours_tflops']:.0f} TF/s | {s['lt_best_tflops']:.0f} TF/s | {s['bf16_out_tflops']:.0f} TF/s |"
                    f" {o['ms_per_step'] / best:.2f}x" if best > 0 else " | | |")
        else:
            cols = " | | |"
        L.append(f"| {o['name'][5:]} | {calls:.0f} | {o['ms_per_step']:.3f} | {tf:.1f} | {cols} |")
    if sweep:
        L.append(f"\nGEMMs at cuBLASLt's best standalone: {tot_best:.2f} ms/step against {g_ms:.2f} in the step.")
    L.append("")
    bw = f" (copy: {a.copy_gbs:.0f} GB/s)" if a.copy_gbs else ""
    L.append(f"| kernel | calls | ms/step | share | MB/step (DRAM) | GB/s{bw} | of copy |")
    L.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for o in sorted(others, key=lambda o: -o["ms_per_step"])[:a.top]:
        n = ncu.get(o["name"])
        mb = gbs = frac = ""
        if n and n[1] > 0:
            # bytes per launch as ncu saw them, times the step's launches (ncu may stop early)
            mb = f"{n[0] / n[2] * o['calls_per_step'] / 1e6:.1f}"
            g = n[0] / n[1]  # bytes per ns = GB/s
            gbs = f"{g:.0f}"
            frac = f"{100 * g / a.copy_gbs:.0f}%" if a.copy_gbs else ""
        L.append(f"| {o['name'][:48]} | {o['calls_per_step']:.0f} | {o['ms_per_step']:.3f} |"
                 f" {100 * o['ms_per_step'] / step:.1f}% | {mb} | {gbs} | {frac} |")
    L.append("")
    L.append("Idle time on the device before an operation (launch gaps, host work), the largest:")
    for o in sorted(ops["ops"], key=lambda o: -o["idle_before_ms_per_step"])[:8]:
        L.append(f"  before {o['name'][:60]:60} {o['idle_before_ms_per_step']:.3f} ms/step")
    print("\n".join(L))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "shapes":
        if len(sys.argv) != 3:
            sys.exit("usage: gpu_kernel_table.py shapes OPS.json")
        return cmd_shapes(sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["report"])
    p.add_argument("--ops", required=True)
    p.add_argument("--sweep")
    p.add_argument("--ncu")
    p.add_argument("--copy-gbs", type=float, default=0)
    p.add_argument("--step-ms", type=float, default=0)
    p.add_argument("--top", type=int, default=25)
    cmd_report(p.parse_args())


if __name__ == "__main__":
    main()
