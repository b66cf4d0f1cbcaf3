#!/usr/bin/python3
"""Validates the performance model (gpt2 simulate) against measured step times on this machine, and
plots what gpt2 plan predicts at scale.

  measure  every layout runnable on 2 cores -- dp 2, pp 2 (naive m 1; gpipe m 4, 8; 1f1b m 4, 8; and
           every other registered pipeline schedule at m 4), tp 2, ZeRO 1/2/3 at dp 2, cp 2 (also with
           full recomputation), selective and full recomputation on one rank -- of an
           8-layer, 256-channel model (vocab 256, T 128, batch 16; one BLAS thread per rank), and a
           one-rank calibration run with trace.units = true. Rounds are interleaved (the box is
           shared and noisy): each round runs every layout once, each right after its own
           calibration run (--calibration case, the default: the box's speed drifts over minutes,
           and a layout predicted from a trace taken minutes earlier carries that drift as model
           error) or after one calibration a round (--calibration round: half the time); each
           layout is predicted from its calibration trace. Measured: the median step
           time of a run (steps after the first 2); reported: medians over the rounds. Also
           compares predicted memory per rank with the traces' (params, grads, optimizer, peak
           activations).
  scale    (also: published figures -- llm.c's 124M on 8 A100s, Megatron's 1.7B on 32 -- beside the
           model's prediction for the same setups) gpt2 plan for GPT-2 124M / 350M / 774M / 1.5B and a 6.7B-shaped model on 8 ... 4096 H100s
           (uncalibrated): the best layout's tokens/s and MFU at each count
  all      both
  repredict  the predictions again for the runs `measure` kept (after a hardware constant changed)

Writes DIR/perf_model_validation.json, DIR/perf_model_validation.md (the table),
DIR/perf_model_predicted_vs_measured.png, DIR/perf_model_scaling.json and DIR/perf_model_scaling.png.

Usage: validate_perf_model.py --gpt2 build/bin/gpt2 [--workdir DIR] [--out DIR] [--rounds N]
                              [--calibration case|round] {measure,scale,all,repredict}
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(ROOT, "analysis"))
import gpt2test  # noqa: E402
import tracelib  # noqa: E402

ARGS = None
MODEL = {"n_layer": 8, "n_head": 8, "n_embd": 256, "vocab_size": 256, "block_size": 128}


def base_deck():
    path = os.path.join(ARGS.workdir, "model.toml")
    gpt2test.write_deck(path, {
        "model": MODEL,
        "data": {"train": os.path.join(ARGS.workdir, "train.bin"), "seq_len": 128},
        "train": {"batch_size": 16, "steps": ARGS.steps, "lr": 1e-4, "log_every": 1000},
        "parallel": {"blas_threads": 1, "host_threads": 1},  # 1 thread per rank: ranks do not share cores
    })
    return path


def layouts(schedules):
    """(name, ranks, {key: value}) of every layout this box can run."""
    out = [("dp2", 2, {"parallel.dp": 2}),
           ("pp2 naive m1", 2, {"parallel.pp": 2, "parallel.schedule": "naive", "parallel.microbatches": 1}),
           ("pp2 gpipe m4", 2, {"parallel.pp": 2, "parallel.schedule": "gpipe", "parallel.microbatches": 4}),
           ("pp2 gpipe m8", 2, {"parallel.pp": 2, "parallel.schedule": "gpipe", "parallel.microbatches": 8}),
           ("pp2 1f1b m4", 2, {"parallel.pp": 2, "parallel.schedule": "1f1b", "parallel.microbatches": 4}),
           ("pp2 1f1b m8", 2, {"parallel.pp": 2, "parallel.schedule": "1f1b", "parallel.microbatches": 8})]
    for s in schedules:  # the other registered schedules at m 4 (the interleaved ones with 2 chunks a rank)
        if s not in ("naive", "gpipe", "1f1b"):
            sets = {"parallel.pp": 2, "parallel.schedule": s, "parallel.microbatches": 4}
            if s.startswith("interleaved"):
                sets["parallel.virtual_stages"] = 2
            out.append((f"pp2 {s} m4", 2, sets))
    out += [("tp2", 2, {"parallel.tp": 2}),
            ("dp2 zero1", 2, {"parallel.dp": 2, "parallel.zero": 1}),
            ("dp2 zero2", 2, {"parallel.dp": 2, "parallel.zero": 2}),
            ("dp2 zero3", 2, {"parallel.dp": 2, "parallel.zero": 3}),
            ("cp2", 2, {"parallel.cp": 2}),
            ("cp2 recompute full", 2, {"parallel.cp": 2, "train.recompute": "full"}),
            ("recompute selective", 1, {"train.recompute": "selective"}),
            ("recompute full", 1, {"train.recompute": "full"})]
    return out


def sets_args(sets):
    out = []
    for k, v in sets.items():
        out += ["--set", f"{k}={v}"]
    return out


def train(deck, ranks, sets, trace, metrics):
    cmd = [ARGS.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics] + sets_args(dict(sets, **{"trace.file": trace}))
    r = gpt2test.run(cmd, ranks, ARGS.mpiexec, timeout=1800)
    if r.rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.err}")
    rows = [m for m in gpt2test.read_jsonl(metrics) if "loss" in m][2:]
    return statistics.median(m["step_ms"] for m in rows)


def simulate(deck, ranks, sets, calibration):
    cmd = [ARGS.gpt2, "simulate", deck, "--calibrate", calibration, "--ranks", str(ranks), "--json"] + sets_args(sets)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def registered_schedules():
    p = subprocess.run([ARGS.gpt2, "info", "--json"], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["strategies"]["schedule"]


def measure():
    gpt2test.write_shard(os.path.join(ARGS.workdir, "train.bin"), gpt2test.learnable_tokens(2_000_000, 256))
    deck = base_deck()
    cases = layouts(registered_schedules())
    runs = {name: {"measured_ms": [], "predicted_ms": [], "bubble_pred": [], "bubble_meas": []} for name, _, _ in cases}
    memory = {}
    cal_ms = []
    def calibrate(path):
        cal_ms.append(train(deck, 1, {"trace.units": "true"}, path, os.path.join(ARGS.workdir, "cal.jsonl")))
        return path

    for rnd in range(ARGS.rounds):
        print(f"round {rnd + 1}/{ARGS.rounds}", flush=True)
        if ARGS.calibration == "round":
            cal = calibrate(os.path.join(ARGS.workdir, f"calibration_{rnd}.h5"))
            print(f"  calibration {cal_ms[-1]:.0f} ms/step", flush=True)
        for name, ranks, sets in cases:
            tag = name.replace(" ", "_")
            if ARGS.calibration == "case":
                cal = calibrate(os.path.join(ARGS.workdir, f"calibration_{rnd}_{tag}.h5"))
            runs[name].setdefault("calibrations", []).append(cal)
            trace = os.path.join(ARGS.workdir, f"{tag}_{rnd}.h5")
            ms = train(deck, ranks, sets, trace, os.path.join(ARGS.workdir, f"{tag}.jsonl"))
            pred = simulate(deck, ranks, sets, cal)
            r = runs[name]
            r["measured_ms"].append(ms)
            r["predicted_ms"].append(pred["step_ms"])
            t = tracelib.load([trace])[0]
            if t.pp > 1:
                r["bubble_meas"].append(tracelib.mean_bubble(t, 2))
                r["bubble_pred"].append(pred["bubble"])
            if rnd == 0:
                mem = tracelib.memory_per_rank(t)
                memory[name] = {"predicted": pred["memory_per_stage"],
                                "measured": [mem[rk] for rk in sorted(mem)],
                                "stage_of_rank": [t.coords[rk][1] for rk in sorted(mem)]}
            print(f"  {name:14s} measured {ms:8.1f} ms  predicted {pred['step_ms']:8.1f} ms"
                  f"  (calibration {cal_ms[-1]:.0f} ms/step)", flush=True)
    rows = []
    for name, ranks, sets in cases:
        r = runs[name]
        meas, pred = statistics.median(r["measured_ms"]), statistics.median(r["predicted_ms"])
        rows.append({"layout": name, "ranks": ranks, "sets": sets, "measured_ms": meas, "predicted_ms": pred,
                     "error": (pred - meas) / meas, "measured_runs": r["measured_ms"], "predicted_runs": r["predicted_ms"],
                     "calibrations": [os.path.basename(c) for c in r["calibrations"]],
                     "bubble_measured": statistics.median(r["bubble_meas"]) if r["bubble_meas"] else None,
                     "bubble_predicted": statistics.median(r["bubble_pred"]) if r["bubble_pred"] else None})
    errors = [abs(x["error"]) for x in rows]
    summary = {"rounds": ARGS.rounds, "steps": ARGS.steps, "calibration": ARGS.calibration, "calibration_ms": cal_ms,
               "rows": rows, "memory": memory,
               "median_abs_error": statistics.median(errors), "worst_abs_error": max(errors)}
    with open(os.path.join(ARGS.out, "perf_model_validation.json"), "w") as f:
        json.dump(summary, f, indent=1)
    write_table(summary)
    plot_validation(summary)


def repredict():
    """Predictions again for the runs measure() kept (its calibration traces and measured times in
    --workdir and --out), e.g. after a hardware file's constant was re-measured."""
    path = os.path.join(ARGS.out, "perf_model_validation.json")
    summary = json.load(open(path))
    deck = os.path.join(ARGS.workdir, "model.toml")
    for row in summary["rows"]:
        cals = row.get("calibrations") or [f"calibration_{rnd}.h5" for rnd in range(summary["rounds"])]
        preds = [simulate(deck, row["ranks"], row["sets"], os.path.join(ARGS.workdir, c)) for c in cals]
        row["predicted_runs"] = [p["step_ms"] for p in preds]
        row["predicted_ms"] = statistics.median(row["predicted_runs"])
        row["error"] = (row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"]
        if row["bubble_predicted"] is not None:
            row["bubble_predicted"] = statistics.median(p["bubble"] for p in preds)
        if row["layout"] in summary.get("memory", {}):  # the memory model's prediction too
            summary["memory"][row["layout"]]["predicted"] = preds[0]["memory_per_stage"]
        print(f"  {row['layout']:14s} measured {row['measured_ms']:8.1f} ms  predicted {row['predicted_ms']:8.1f} ms")
    errors = [abs(x["error"]) for x in summary["rows"]]
    summary["median_abs_error"], summary["worst_abs_error"] = statistics.median(errors), max(errors)
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    write_table(summary)
    plot_validation(summary)


def write_table(s):
    lines = ["| layout | measured ms/step | predicted ms/step | error | bubble measured / predicted |",
             "| --- | --- | --- | --- | --- |"]
    for r in s["rows"]:
        bub = (f"{r['bubble_measured']:.3f} / {r['bubble_predicted']:.3f}" if r["bubble_measured"] is not None else "-")
        lines.append(f"| {r['layout']} | {r['measured_ms']:.0f} | {r['predicted_ms']:.0f} | {100 * r['error']:+.1f}% | {bub} |")
    lines.append(f"\nmedian |error| {100 * s['median_abs_error']:.1f}%, worst {100 * s['worst_abs_error']:.1f}% "
                 f"({s['rounds']} interleaved rounds, medians; a calibration a {s.get('calibration', 'round')})")
    mem = ["\n| layout | rank | params MiB (pred / trace) | grads | optimizer | activations |", "| --- | --- | --- | --- | --- | --- |"]
    for name, m in s["memory"].items():
        for rk, got in enumerate(m["measured"]):
            p = m["predicted"][m["stage_of_rank"][rk]]
            cell = lambda k, tk: f"{p[k] / 2**20:.1f} / {got[tk] / 2**20:.1f}"  # noqa: E731
            mem.append(f"| {name} | {rk} | {cell('params', 'params')} | {cell('grads', 'grads')} | "
                       f"{cell('optimizer', 'optimizer')} | {cell('activations', 'activations')} |")
    text = "\n".join(lines + mem) + "\n"
    with open(os.path.join(ARGS.out, "perf_model_validation.md"), "w") as f:
        f.write(text)
    print(text)


def plot_validation(s):
    plt = tracelib.pyplot()
    fig, ax = plt.subplots(figsize=(6, 6))
    meas = [r["measured_ms"] for r in s["rows"]]
    pred = [r["predicted_ms"] for r in s["rows"]]
    lo, hi = 0.8 * min(meas + pred), 1.2 * max(meas + pred)
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [0.85 * lo, 0.85 * hi], [1.15 * lo, 1.15 * hi], color="0.85", label="±15%")
    ax.scatter(meas, pred, zorder=3)
    for r in s["rows"]:
        ax.annotate(r["layout"], (r["measured_ms"], r["predicted_ms"]), fontsize=7, xytext=(4, -3),
                    textcoords="offset points")
    ax.set_xlim(lo, hi), ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (ms, median of rounds)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(f"gpt2 simulate vs gpt2 train, 2 cores (8 layers, C 256, T 128)\n"
                 f"median |error| {100 * s['median_abs_error']:.1f}%, worst {100 * s['worst_abs_error']:.1f}%")
    ax.legend(loc="upper left")
    tracelib.save(fig, ARGS.out, "perf_model_predicted_vs_measured.png")


SCALE_MODELS = [("GPT-2 124M", "inputs/gpt2-124M.toml"), ("GPT-2 350M", "inputs/gpt2-350M.toml"),
                ("GPT-2 774M", "inputs/gpt2-774M.toml"), ("GPT-2 1.5B", "inputs/gpt2-1.5B.toml"),
                ("6.7B-shaped", "inputs/gpt-6.7B.toml")]
GPU_COUNTS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def plan(config, gpus, batch):
    cmd = [ARGS.gpt2, "plan", os.path.join(ROOT, config), "--hardware", os.path.join(ROOT, "inputs/hardware/h100.toml"),
           "--gpus", str(gpus), "--global-batch", str(batch), "--top", "1", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def scale():
    # Weak scaling: 0.5M tokens per step at 8 GPUs, growing with the GPU count (2^16 tokens per GPU,
    # 64 sequences of 1024), as large runs grow their batch.
    out = {}
    for label, config in SCALE_MODELS:
        pts = []
        for n in GPU_COUNTS:
            batch = max(512, 64 * n)
            r = plan(config, n, batch)
            best = r["layouts"][0] if r["layouts"] else None
            pts.append({"gpus": n, "global_batch": batch, "seconds": r["seconds"], "considered": r["considered"],
                        "best": best})
            desc = (f"dp {best['dp']} tp {best['tp']} pp {best['pp']} zero {best['zero']} {best['schedule']} "
                    f"m {best['microbatches']} {best['precision']}: {best['tokens_per_s']:.3g} tok/s, "
                    f"MFU {100 * best['mfu']:.1f}%" if best else "nothing fits")
            print(f"{label:12s} {n:5d} GPUs (batch {batch}): {desc}  [{r['considered']} layouts, {r['seconds']:.2f} s]",
                  flush=True)
        out[label] = pts
    with open(os.path.join(ARGS.out, "perf_model_scaling.json"), "w") as f:
        json.dump(out, f, indent=1)
    plt = tracelib.pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, pts in out.items():
        ok = [p for p in pts if p["best"]]
        a1.plot([p["gpus"] for p in ok], [p["best"]["tokens_per_s"] for p in ok], "o-", label=label)
        a2.plot([p["gpus"] for p in ok], [100 * p["best"]["mfu"] for p in ok], "o-", label=label)
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xlabel("H100 GPUs")
        a.grid(True, which="both", alpha=0.3)
    a1.set_yscale("log")
    a1.set_ylabel("predicted tokens/s (best layout)")
    a2.set_ylabel("predicted MFU of the best layout (%)")
    a1.legend()
    fig.suptitle("gpt2 plan on inputs/hardware/h100.toml (uncalibrated), weak scaling: max(512, 64 x GPUs) "
                 "sequences of 1024 per step")
    tracelib.save(fig, ARGS.out, "perf_model_scaling.png")


# Published measurements next to the model's prediction for the same setup (uncalibrated, A100 file).
# Other trainers' kernels differ from ours (fused/flash attention, recomputation), so these say how far
# this trainer's predicted throughput is from the state of the art, not how accurate the model is.
PUBLISHED = [
    {"what": "llm.c GPT-2 124M, 8 x A100 80GB, bf16, 0.5M tokens per step (about 1.75M tokens/s reported)",
     "published_tokens_per_s": 1.75e6, "published_mfu": None, "ranks": 8,
     "model": {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 1024},
     "seq_len": 1024, "batch": 512, "parallel": {"dp": 8, "zero": 1, "microbatches": 8}, "precision": "bf16"},
    {"what": "Megatron-LM (Narayanan et al. 2021, Table 1): 1.7B GPT, 32 x A100, batch 512 x 2048, 44% of peak",
     "published_tokens_per_s": None, "published_mfu": 0.44, "ranks": 32,
     "model": {"n_layer": 24, "n_head": 24, "n_embd": 2304, "vocab_size": 51200, "block_size": 2048},
     "seq_len": 2048, "batch": 512, "parallel": {"dp": 32, "zero": 1, "microbatches": 16}, "precision": "bf16"},
]


def published():
    rows = []
    for i, p in enumerate(PUBLISHED):
        deck = os.path.join(ARGS.workdir, f"published_{i}.toml")
        gpt2test.write_deck(deck, {"model": p["model"], "data": {"train": "unused.bin", "seq_len": p["seq_len"]},
                                   "train": {"batch_size": p["batch"], "steps": 1}, "parallel": p["parallel"]})
        cmd = [ARGS.gpt2, "simulate", deck, "--hardware", os.path.join(ROOT, "inputs/hardware/a100.toml"),
               "--ranks", str(p["ranks"]), "--precision", p["precision"], "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
        pred = json.loads(r.stdout)
        row = {"setup": p["what"], "published_tokens_per_s": p["published_tokens_per_s"],
               "published_mfu": p["published_mfu"], "predicted_tokens_per_s": pred["tokens_per_s"],
               "predicted_mfu": pred.get("mfu")}
        rows.append(row)
        print(f"{p['what']}:\n  predicted for this trainer: {pred['tokens_per_s']:.3g} tokens/s, "
              f"MFU {100 * (pred.get('mfu') or 0):.1f}%", flush=True)
    with open(os.path.join(ARGS.out, "perf_model_published.json"), "w") as f:
        json.dump(rows, f, indent=1)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["measure", "scale", "all", "repredict"])
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", default="/tmp/gpt2-perf-model")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--calibration", choices=["case", "round"], default="case",
                    help="a calibration run before each layout's run (default) or one a round")
    ARGS = ap.parse_args()
    os.makedirs(ARGS.workdir, exist_ok=True)
    os.makedirs(ARGS.out, exist_ok=True)
    if ARGS.what in ("measure", "all"):
        measure()
    if ARGS.what == "repredict":
        repredict()
    if ARGS.what in ("scale", "all"):
        scale()
        published()


if __name__ == "__main__":
    main()
