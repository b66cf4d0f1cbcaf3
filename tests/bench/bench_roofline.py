#!/usr/bin/python3
"""The host step against its own floor, in one run (GPT-2 124M, B 4, T 64, one rank, every core).

floor = the step's GEMM FLOPs at the best measured rate at the LM head's shape (256 x 50304 x 768:
the better of OpenBLAS sgemm and oneDNN f32 for fp32, oneDNN bf16 for bf16) + AdamW's 28 bytes a
parameter (p, g, m, v read; p, m, v written) at the measured triad bandwidth of the same threads.

Each round measures the three GEMMs and the triad, then the fp32 and bf16 steps (each repetition
the mean of at least 5 s of warm steps), every one the best of --repetitions (3): the floor's rates
and the step are estimated alike, so noise, which only ever adds time, does not favour the floor.
(Before 2026-12-02 the step was one repetition against the floor's best of 3.) The ratios are taken
round by round (the box is shared: its rates move between minutes) and the median is reported.
BLAS CPU detection is on (OPENBLAS_CORETYPE removed from the environment), as a user has it.
The first line names the box class from /proc/cpuinfo (vendor, family and model, the
microarchitecture they name, the instruction sets): a virtual machine's model name ("AMD EPYC")
does not tell Zen 4 from Zen 5. The last lines give the rounds' spread beside the median.

  tests/bench/bench_roofline.py --bench build/bin/bench_train_step [--rounds 3] [--repetitions 3] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# GPT-2 124M, B 4, T 64: the step's GEMMs (M, N, K) and how many of each; attention's batched
# products at T = 64 (QK^T and A V forward, two each backward) per layer.
N_TOKENS, C, V_PADDED, LAYERS, HEADS, T = 256, 768, 50304, 12, 12, 64
BLOCK_OUT = [3 * C, C, 4 * C, C]  # qkv, attention projection, fc, projection: output widths
BLOCK_IN = [C, C, C, 4 * C]
PARAMS = 124_439_808  # GPT-2 124M (vocabulary 50257)
ADAMW_BYTES_PER_PARAM = 28


def step_gflop():
    block = sum(2 * N_TOKENS * o * i for o, i in zip(BLOCK_OUT, BLOCK_IN)) * 3  # forward, dX, dW
    head = 2 * N_TOKENS * V_PADDED * C * 3
    hd = C // HEADS
    attention = 2 * (N_TOKENS // T) * HEADS * T * T * hd * 2 * 3
    return (LAYERS * (block + attention) + head) / 1e9


# AMD's families by their microarchitecture (a box class is named by these, not by its model name,
# which a virtual machine often reduces to "AMD EPYC"); Intel's family 6 models likewise.
AMD_FAMILIES = {0x17: "Zen / Zen 2", 0x19: "Zen 3 / Zen 4", 0x1A: "Zen 5"}
AMD_ZEN4_MODELS = set(range(0x10, 0x20)) | set(range(0x60, 0x80)) | set(range(0xA0, 0xB0))
INTEL_MODELS = {0x55: "Skylake-SP / Cascade Lake / Cooper Lake", 0x6A: "Ice Lake-SP", 0x6C: "Ice Lake-D",
                0x8F: "Sapphire Rapids", 0xCF: "Emerald Rapids", 0xAD: "Granite Rapids", 0xAE: "Granite Rapids-D"}
ISA_FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "avx512_vp2intersect")


def cpu_identity(cpuinfo="/proc/cpuinfo"):
    """The host's CPU as a box class: vendor, family and model (and the microarchitecture they name),
    the logical CPUs, and the instruction sets the products can use."""
    try:
        text = open(cpuinfo).read()
    except OSError:
        return {"class": "unknown (no /proc/cpuinfo)"}
    first = text.split("\n\n")[0]
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    family, model = int(field.get("cpu family", "0")), int(field.get("model", "0"))
    vendor = field.get("vendor_id", "?")
    if vendor == "AuthenticAMD":
        uarch = AMD_FAMILIES.get(family, f"AMD family {family:#x}")
        if family == 0x19:
            uarch = "Zen 4" if model in AMD_ZEN4_MODELS else "Zen 3"
    elif vendor == "GenuineIntel" and family == 6:
        uarch = INTEL_MODELS.get(model, f"Intel family 6 model {model:#x}")
    else:
        uarch = f"{vendor} family {family:#x}"
    flags = set(field.get("flags", "").split())
    isa = [f for f in ISA_FLAGS if f in flags]
    cpus = text.count("processor\t:")
    name = field.get("model name", "?")
    return {"class": f"{uarch}, {cpus} CPUs ({name}; family {family:#x} model {model:#x}; {' '.join(isa) or 'no AVX-512'})",
            "vendor": vendor, "family": family, "model": model, "microarchitecture": uarch, "cpus": cpus,
            "model_name": name, "isa": isa}


FLOORS = "StepGemm/12/[012]/0/|Triad"
STEPS = "TrainStep_124M_B4_T64/|TrainStep_124M_B4_T64_bf16/"


def run_bench(bench, env, pattern, repetitions):
    """name -> every repetition's row of the benchmarks matching pattern."""
    out = subprocess.run([bench, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          f"--benchmark_repetitions={repetitions}"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_roofline: {bench} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    rows = {}
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("run_type", "iteration") == "iteration" and "error_occurred" not in b:
            rows.setdefault(b["run_name"] if "run_name" in b else b["name"], []).append(b)
    return rows


def find(rows, prefix):
    for name, runs in rows.items():
        if name.startswith(prefix):
            return runs
    sys.exit(f"bench_roofline: {prefix} missing from the benchmark's output")


def run_round(bench, env, repetitions):
    # The floors' rates and the steps, each at its best of `repetitions`.
    floors = run_bench(bench, env, FLOORS, repetitions)
    steps = run_bench(bench, env, STEPS, repetitions)
    best = lambda runs, key: max(r[key] for r in runs)
    unit = lambda r: {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[r["time_unit"]]
    r = {
        "sgemm_gflops": best(find(floors, "BM_StepGemm/12/0/0/"), "GFLOP/s"),
        "dnnl_f32_gflops": best(find(floors, "BM_StepGemm/12/1/0/"), "GFLOP/s"),
        "dnnl_bf16_gflops": best(find(floors, "BM_StepGemm/12/2/0/"), "GFLOP/s"),
        "triad_gbs": best(find(floors, "BM_Triad"), "GB/s"),
    }
    for p, name in (("fp32", "BM_TrainStep_124M_B4_T64/"), ("bf16", "BM_TrainStep_124M_B4_T64_bf16/")):
        times = [run["real_time"] * unit(run) for run in find(steps, name)]
        r[f"{p}_step_ms"], r[f"{p}_step_mean_ms"] = min(times), statistics.mean(times)  # best; every repetition's
    return r


def floors(r, gflop):
    adamw_ms = ADAMW_BYTES_PER_PARAM * PARAMS / (r["triad_gbs"] * 1e9) * 1e3
    f32 = max(r["sgemm_gflops"], r["dnnl_f32_gflops"])
    return {
        "adamw_floor_ms": adamw_ms,
        "fp32_floor_ms": gflop / f32 * 1e3 + adamw_ms,
        "bf16_floor_ms": gflop / r["dnnl_bf16_gflops"] * 1e3 + adamw_ms,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bin/bench_train_step", help="the bench_train_step binary")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each a fresh process (default 3)")
    ap.add_argument("--repetitions", type=int, default=3,
                    help="repetitions of each GEMM, the triad and each step in a round; the best counts (default 3)")
    ap.add_argument("--json", help="write every round's figures here")
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit("bench_roofline: --rounds must be at least 1")
    if args.repetitions < 1:
        sys.exit("bench_roofline: --repetitions must be at least 1")
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"bench_roofline: {args.bench} is not an executable (build it: cmake --build build)")
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)  # BLAS CPU detection on, as a user has it
    gflop = step_gflop()
    cpu = cpu_identity()
    print(f"CPU: {cpu['class']}")
    print(f"GPT-2 124M, B 4 x T 64, one rank; step GEMMs {gflop:.1f} GFLOP, AdamW {ADAMW_BYTES_PER_PARAM} B x "
          f"{PARAMS / 1e6:.1f} M parameters; BLAS CPU detection on; each figure the best of {args.repetitions}")
    hdr = (f"{'round':>5} {'sgemm':>6} {'dnnl32':>6} {'dnnl16':>6} {'triad':>6} | {'fp32':>7} {'floor':>7} {'ratio':>6}"
           f" | {'bf16':>7} {'floor':>7} {'ratio':>6}")
    print(f"{'':>5} {'GF/s':>6} {'GF/s':>6} {'GF/s':>6} {'GB/s':>6} | {'ms':>7} {'ms':>7} {'':>6} | {'ms':>7} {'ms':>7}")
    print(hdr)
    rounds = []
    for i in range(args.rounds):
        r = run_round(args.bench, env, args.repetitions)
        r.update(floors(r, gflop))
        for p in ("fp32", "bf16"):
            r[f"{p}_ratio"] = r[f"{p}_step_ms"] / r[f"{p}_floor_ms"]
            r[f"{p}_mean_ratio"] = r[f"{p}_step_mean_ms"] / r[f"{p}_floor_ms"]
        rounds.append(r)
        print(f"{i + 1:>5} {r['sgemm_gflops']:6.0f} {r['dnnl_f32_gflops']:6.0f} {r['dnnl_bf16_gflops']:6.0f} "
              f"{r['triad_gbs']:6.1f} | {r['fp32_step_ms']:7.0f} {r['fp32_floor_ms']:7.0f} {r['fp32_ratio']:6.3f} | "
              f"{r['bf16_step_ms']:7.0f} {r['bf16_floor_ms']:7.0f} {r['bf16_ratio']:6.3f}", flush=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(f"median: fp32 step {med['fp32_step_ms']:.0f} ms = {med['fp32_ratio']:.3f}x its floor (target 1.04x); "
          f"bf16 step {med['bf16_step_ms']:.0f} ms = {med['bf16_ratio']:.3f}x its floor (target 1.12x)")
    print(f"the steps' means over their repetitions instead: fp32 {med['fp32_mean_ratio']:.3f}x, "
          f"bf16 {med['bf16_mean_ratio']:.3f}x")
    spread = lambda key: f"{min(r[key] for r in rounds):.3f}-{max(r[key] for r in rounds):.3f}"
    print(f"the rounds' spread: fp32 {spread('fp32_ratio')}, bf16 {spread('bf16_ratio')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "gflop": gflop, "params": PARAMS, "repetitions": args.repetitions, "rounds": rounds, "median": med}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
