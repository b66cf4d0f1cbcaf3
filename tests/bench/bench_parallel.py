#!/usr/bin/python3
"""Parallel-performance benchmarks of the gpt2 command, as ratios against a baseline measured in the
same run (the box is shared and noisy; runs are interleaved and repeated, medians reported).

  dp     weak scaling, one core per rank (1 BLAS thread): tokens/s at 2 ranks vs 1 rank on a
         compute-bound config (6 layers, 384 channels, T=256, 8 sequences per rank), and how much
         of the gradient all-reduce backward hides: wait time with buckets launched during backward
         vs with one bucket launched after it
  pp     2 stages, one core each (8 layers, 256 channels, T=128, batch 16): gpipe and 1f1b with 8
         microbatches vs naive model parallelism (theory 2*8/9 = 1.78x); measured bubble next to
         (p-1)/(m+p-1); per-stage parameter memory; peak activation memory of 1f1b vs gpipe
  trace  step time with tracing on vs off, tiny and small configs (target: < 2% apart)
  frontier  2 stages, one core each, 8 layers, 4 microbatches: interleaved (v 2), zb-h1, zb-v against
         1f1b: measured bubble (target <= 0.8x, 0.65x, 0.5x 1f1b's), tokens/s, peak activations per stage
  tp     GPT-2 124M (B 4, T 64): tp 2 (one core per rank), with and without sequence parallelism,
         against one rank with both cores: tokens/s, tp collective time per step, memory per rank
  zero   dp 2, one core per rank, the dp config: parallel.zero 0/1/2/3 interleaved; tokens/s against
         zero 0 (target: ZeRO-1 within 5%), data-parallel volume per step against theory, time blocked
         in data-parallel collectives per step (exposed), memory at rest per rank
  zero16 the same at bf16, ZeRO-1 and ZeRO-3: parameter all-gathers of 16-bit matrices
         (param_gather_dtype auto) against fp32 gathers: tokens/s, volume per step, exposed time

Usage: bench_parallel.py --gpt2 build/bin/gpt2 [--workdir DIR] [--repeats N] {dp,pp,frontier,trace,zero,zero16,tp,all}
Writes a JSON summary to DIR/bench_parallel.json and prints a table.
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "analysis"))
import gpt2test  # noqa: E402
import tracelib  # noqa: E402

ARGS = None


def deck(name, model, seq_len, batch, steps, train=None, **parallel):
    d = {
        "model": dict(dict(vocab_size=256, block_size=seq_len), **model),
        "data": {"train": os.path.join(ARGS.workdir, "train.bin"), "seq_len": seq_len},
        "train": dict({"batch_size": batch, "steps": steps, "lr": 1e-4, "log_every": 1000}, **(train or {})),
        "parallel": dict(dict(blas_threads=1, host_threads=1), **parallel),  # one core per rank unless asked
    }
    path = os.path.join(ARGS.workdir, name + ".toml")
    gpt2test.write_deck(path, d)
    return path


def run(cfg, ranks, trace=None, **sets):
    """Mean tokens/s and step ms over the steps after the first two (warm-up)."""
    metrics = cfg.replace(".toml", ".jsonl")
    cmd = [ARGS.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics]
    for k, v in dict(sets, **({"trace.file": trace} if trace else {})).items():
        cmd += ["--set", f"{k}={v}"]
    r = gpt2test.run(cmd, ranks, ARGS.mpiexec, timeout=1200)
    if r.rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.err}")
    rows = [m for m in gpt2test.read_jsonl(metrics) if "loss" in m][2:]
    return statistics.mean(m["tokens_per_s"] for m in rows), statistics.mean(m["step_ms"] for m in rows)


def median_of(fn):
    vals = [fn() for _ in range(ARGS.repeats)]
    return statistics.median(vals), vals


def allreduce_wait_ms(trace_path):
    t = tracelib.load([trace_path])[0]
    ev = t.events
    steps = sorted(set(ev["step"][ev["kind"] == t.code("allreduce_wait")]))[2:]
    w = [ev["end"][i] - ev["start"][i] for i in range(len(ev))
         if ev["kind"][i] == t.code("allreduce_wait") and ev["step"][i] in steps]
    return 1e3 * statistics.mean(w)


def bench_dp(out):
    model = {"n_layer": 6, "n_head": 6, "n_embd": 384}
    one = deck("dp1", model, 256, 8, 6)
    two = deck("dp2", model, 256, 16, 6, dp=2)
    ratios, t1s, t2s = [], [], []
    for _ in range(ARGS.repeats):  # interleaved: both see the same machine state
        t1, _ = run(one, 1)
        t2, _ = run(two, 2)
        t1s.append(t1), t2s.append(t2), ratios.append(t2 / t1)
    hidden = run(two, 2, trace=os.path.join(ARGS.workdir, "dp2_buckets.h5"))  # default buckets (1 MiB)
    exposed = run(two, 2, trace=os.path.join(ARGS.workdir, "dp2_onebucket.h5"), **{"parallel.bucket_mb": 1000})
    w_b = allreduce_wait_ms(os.path.join(ARGS.workdir, "dp2_buckets.h5"))
    w_1 = allreduce_wait_ms(os.path.join(ARGS.workdir, "dp2_onebucket.h5"))
    out["dp"] = {"tokens_per_s_1rank": statistics.median(t1s), "tokens_per_s_2ranks": statistics.median(t2s),
                 "speedup_median": statistics.median(ratios), "speedups": ratios,
                 "wait_ms_buckets": w_b, "wait_ms_one_bucket_after_backward": w_1,
                 "hidden_fraction": 1 - w_b / w_1 if w_1 > 0 else None,
                 "step_ms_buckets": hidden[1], "step_ms_one_bucket": exposed[1]}
    d = out["dp"]
    print(f"dp weak scaling: 1 rank {d['tokens_per_s_1rank']:.0f} tok/s, 2 ranks {d['tokens_per_s_2ranks']:.0f} tok/s"
          f" -> {d['speedup_median']:.2f}x (runs: {', '.join(f'{r:.2f}' for r in ratios)}; target >= 1.8x)")
    print(f"  all-reduce wait per step: {w_b:.1f} ms with 1 MiB buckets during backward vs {w_1:.1f} ms with one"
          f" bucket after it -> {100 * (d['hidden_fraction'] or 0):.0f}% hidden behind backward")


def bench_pp(out):
    model = {"n_layer": 8, "n_head": 8, "n_embd": 256}
    cfgs = {"naive": deck("pp_naive", model, 128, 16, 8, pp=2, microbatches=1, schedule="naive"),
            "gpipe": deck("pp_gpipe", model, 128, 16, 8, pp=2, microbatches=8, schedule="gpipe"),
            "1f1b": deck("pp_1f1b", model, 128, 16, 8, pp=2, microbatches=8, schedule="1f1b")}
    pp_table(out, "pp", cfgs, "naive", "pipeline, 2 stages, 8 microbatches (naive: 1):")


def bench_frontier(out):
    """The schedules that beat 1F1B's bubble: 2 ranks x 1 core, 8 layers, m = 4."""
    model = {"n_layer": 8, "n_head": 8, "n_embd": 256}
    base = dict(pp=2, microbatches=4)
    cfgs = {"1f1b": deck("fr_1f1b", model, 128, 16, 8, schedule="1f1b", **base),
            "interleaved": deck("fr_interleaved", model, 128, 16, 8, schedule="interleaved", virtual_stages=2, **base),
            "zb-h1": deck("fr_zbh1", model, 128, 16, 8, schedule="zb-h1", **base),
            "zb-v": deck("fr_zbv", model, 128, 16, 8, schedule="zb-v", **base)}
    pp_table(out, "frontier", cfgs, "1f1b", "pipeline frontier, 2 stages, 4 microbatches (ratios against 1f1b):")


def measure(cfgs, ranks, name):
    """Runs every config ARGS.repeats times, interleaved (all see the same machine state), then once
    more with a trace: ({key: tokens/s of each round}, {key: Trace})."""
    tok = {k: [] for k in cfgs}
    for _ in range(ARGS.repeats):
        for k, c in cfgs.items():
            tok[k].append(run(c, ranks)[0])
    traces = {}
    for k, c in cfgs.items():
        path = os.path.join(ARGS.workdir, f"{name}_{k}.h5")
        run(c, ranks, trace=path)
        traces[k] = tracelib.load([path])[0]
    return tok, traces


def pp_table(out, name, cfgs, base, title):
    tok, traces = measure(cfgs, 2, name)
    res = {}
    for k, t in traces.items():
        res[k] = {"tokens_per_s": statistics.median(tok[k]),
                  f"speedup_vs_{base}": statistics.median(a / b for a, b in zip(tok[k], tok[base])),
                  "bubble_measured": tracelib.mean_bubble(t),
                  "bubble_theory": tracelib.theoretical_bubble(t),
                  "param_mib_per_stage": [b / 2**20 for b in list(t.meta["param_bytes"])],
                  "peak_activation_mib_per_stage": [b / 2**20 for b in list(t.meta["peak_activation_bytes"])]}
    for r in res.values():
        r[f"bubble_vs_{base}"] = r["bubble_measured"] / res[base]["bubble_measured"]
    out[name] = res
    full = sum(res[base]["param_mib_per_stage"])
    print(title)
    for k, r in res.items():
        print(f"  {k:11s} {r['tokens_per_s']:8.0f} tok/s  {r[f'speedup_vs_{base}']:.2f}x {base}  bubble "
              f"{r['bubble_measured']:.3f} = {r[f'bubble_vs_{base}']:.2f}x {base}'s (theory {r['bubble_theory']:.3f})  "
              f"params/stage {', '.join(f'{m:.1f}' for m in r['param_mib_per_stage'])} MiB of {full:.1f}  "
              f"peak activations {', '.join(f'{m:.1f}' for m in r['peak_activation_mib_per_stage'])} MiB")


def exposed_ms(trace, kinds=("allreduce_wait", "reduce_scatter_wait", "all_gather_wait")):
    """Mean time per step and rank blocked waiting in data-parallel collectives (steps after the first 2)."""
    steps = set(trace.train_steps(2))
    ev = trace.events[trace.mask([k for k in kinds if k in trace.kind_names]) & np.isin(trace.events["step"], list(steps))]
    return 1e3 * float(np.sum(ev["end"] - ev["start"])) / max(1, len(steps)) / trace.world_size


def bench_zero(out):
    model = {"n_layer": 6, "n_head": 6, "n_embd": 384}
    cfgs = {z: deck(f"zero{z}", model, 256, 16, 8, dp=2, zero=z) for z in range(4)}
    tok, traces = measure(cfgs, 2, "zero")
    res = {}
    for z, t in traces.items():
        vols = list(tracelib.dp_volume(t, 2).values())
        mem = tracelib.memory_per_rank(t)[0]
        psi = float(tracelib.as_list(t.meta["stage_param_bytes"])[0])
        res[z] = {"tokens_per_s": statistics.median(tok[z]),
                  "vs_zero0": statistics.median(a / b for a, b in zip(tok[z], tok[0])),
                  "dp_volume_psi": statistics.mean(vols), "dp_volume_theory": tracelib.theoretical_dp_volume(z, 1, 2),
                  "dp_volume_mb": statistics.mean(vols) * psi / 1e6, "exposed_ms": exposed_ms(t),
                  "mib_params_grads_optimizer": [mem[k] / 2**20 for k in ("params", "grads", "optimizer")],
                  "workspace_mib": mem["workspace"] / 2**20}
    out["zero"] = res
    print("ZeRO at dp 2 (6 layers, 384 channels, T 256, batch 16; one core per rank):")
    for z, r in res.items():
        print(f"  zero {z}: {r['tokens_per_s']:7.0f} tok/s  {r['vs_zero0']:.3f}x zero 0  volume "
              f"{r['dp_volume_psi']:.2f} Psi = {r['dp_volume_mb']:.0f} MB/step (theory {r['dp_volume_theory']:g})  "
              f"exposed {r['exposed_ms']:.1f} ms/step  memory P/G/O "
              f"{'/'.join(f'{m:.1f}' for m in r['mib_params_grads_optimizer'])} MiB (+{r['workspace_mib']:.1f} workspace)")


def bench_zero16(out):
    model = {"n_layer": 6, "n_head": 6, "n_embd": 384}
    cfgs = {f"zero{z}_{g}": deck(f"zero16_{z}_{g}", model, 256, 16, 8, train={"precision": "bf16"}, dp=2, zero=z,
                                 param_gather_dtype=g)
            for z in (1, 3) for g in ("auto", "fp32")}
    tok, traces = measure(cfgs, 2, "zero16")
    res = {}
    for k, t in traces.items():
        psi = float(tracelib.as_list(t.meta["stage_param_bytes"])[0])
        base = k.replace("auto", "fp32")
        res[k] = {"tokens_per_s": statistics.median(tok[k]),
                  "vs_fp32_gathers": statistics.median(a / b for a, b in zip(tok[k], tok[base])),
                  "dp_volume_mb": statistics.mean(tracelib.dp_volume(t, 2).values()) * psi / 1e6,
                  "gather_fraction": tracelib.gather_fraction(t), "exposed_ms": exposed_ms(t)}
    out["zero16"] = res
    print("ZeRO at dp 2, bf16 (6 layers, 384 channels, T 256, batch 16; one core per rank): 16-bit gathers vs fp32")
    for k, r in res.items():
        print(f"  {k:11s} {r['tokens_per_s']:7.0f} tok/s  {r['vs_fp32_gathers']:.3f}x fp32 gathers  volume "
              f"{r['dp_volume_mb']:.1f} MB/step (one gather {r['gather_fraction']:.2f} Psi)  exposed {r['exposed_ms']:.1f} ms/step")


def bench_tp(out):
    """Tensor parallelism on GPT-2 124M (B 4, T 64): tp 2 (1 core per rank) against one rank with both
    cores, with and without sequence parallelism; time in tp collectives, memory per rank."""
    model = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 1024}
    cfgs = {"1 rank": (deck("tp1", model, 64, 4, 6, host_threads=2, blas_threads=2), 1),
            "tp 2": (deck("tp2", model, 64, 4, 6, dp=1, tp=2), 2),
            "tp 2 + sp": (deck("tp2sp", model, 64, 4, 6, dp=1, tp=2, sequence_parallel=True), 2)}
    tok = {k: [] for k in cfgs}
    for _ in range(ARGS.repeats):
        for k, (c, n) in cfgs.items():
            tok[k].append(run(c, n)[0])
    res = {}
    for k, (c, n) in cfgs.items():
        path = os.path.join(ARGS.workdir, f"tp_{k.replace(' ', '').replace('+', '_')}.h5")
        run(c, n, trace=path)
        t = tracelib.load([path])[0]
        steps = set(t.train_steps(2))
        ev = t.events[t.mask(["tp_collective"]) & np.isin(t.events["step"], list(steps))]
        res[k] = {"tokens_per_s": statistics.median(tok[k]),
                  "vs_1rank": statistics.median(a / b for a, b in zip(tok[k], tok["1 rank"])),
                  "tp_collective_ms": 1e3 * float(np.sum(ev["end"] - ev["start"])) / max(1, len(steps)) / n,
                  "param_mib_per_rank": [b / 2**20 for b in tracelib.as_list(t.meta["param_bytes"])],
                  "peak_activation_mib_per_rank": [b / 2**20 for b in tracelib.as_list(t.meta["peak_activation_bytes"])]}
    out["tp"] = res
    print("tensor parallelism, GPT-2 124M, B 4, T 64 (2 cores: tp ranks get one each, the one rank both):")
    for k, r in res.items():
        print(f"  {k:10s} {r['tokens_per_s']:7.0f} tok/s  {r['vs_1rank']:.2f}x one rank  tp collectives "
              f"{r['tp_collective_ms']:.1f} ms/step/rank  params {', '.join(f'{m:.0f}' for m in r['param_mib_per_rank'])} MiB"
              f"  peak activations {', '.join(f'{m:.1f}' for m in r['peak_activation_mib_per_rank'])} MiB")


def bench_trace(out):
    res = {}
    for name, model, T, B in (("tiny", {"n_layer": 2, "n_head": 2, "n_embd": 64}, 64, 8),
                              ("small", {"n_layer": 6, "n_head": 6, "n_embd": 384}, 256, 8)):
        cfg = deck(f"trace_{name}", model, T, B, 12 if name == "small" else 60)
        off, on = [], []
        for i in range(ARGS.repeats * 2):
            off.append(run(cfg, 1)[1])
            on.append(run(cfg, 1, trace=os.path.join(ARGS.workdir, f"trace_{name}.h5"))[1])
        m_off, m_on = statistics.median(off), statistics.median(on)
        res[name] = {"step_ms_off": m_off, "step_ms_on": m_on, "overhead": m_on / m_off - 1}
        print(f"tracing on vs off, {name}: {m_on:.2f} vs {m_off:.2f} ms/step -> {100 * (m_on / m_off - 1):+.2f}%")
    out["trace"] = res


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["dp", "pp", "frontier", "trace", "zero", "zero16", "tp", "all"])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", default="/tmp/gpt2-bench")
    ap.add_argument("--repeats", type=int, default=3)
    ARGS = ap.parse_args()
    os.makedirs(ARGS.workdir, exist_ok=True)
    gpt2test.write_shard(os.path.join(ARGS.workdir, "train.bin"), gpt2test.learnable_tokens(2_000_000, 256))
    out = {}
    for what, fn in (("dp", bench_dp), ("pp", bench_pp), ("frontier", bench_frontier), ("trace", bench_trace),
                     ("zero", bench_zero), ("zero16", bench_zero16), ("tp", bench_tp)):
        if ARGS.what in (what, "all"):
            fn(out)
    summary = os.path.join(ARGS.workdir, "bench_parallel.json")
    json.dump(out, open(summary, "w"), indent=1)
    print(f"summary: {summary}")


if __name__ == "__main__":
    main()
