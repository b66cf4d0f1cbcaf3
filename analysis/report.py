#!/usr/bin/python3
"""Text report of one or more runs: one table row per trace (or --json for a JSON list).

Columns (means over the optimizer steps, the first --skip warm-up steps left out):
  step ms    rank 0's /metrics step_time
  tokens/s   tokens_per_step / mean step time
  MFU        tokens/s * (6N + 12*L*C*T) FLOPs per token / (world_size * --peak-tflops), with N =
             num_params (the tied LM head included), L = n_layer, C = n_embd, T = seq_len. The default
             peak, 1.0 TFLOP/s per rank, is only a round placeholder for a CPU core; pass your device's
             peak (e.g. about 67 for an H100 SXM in FP32, about 495 with TF32 tensor cores)
  comm       per rank, the time in the trace's communication kinds (/meta communication_kinds:
             pipeline transfers, collectives and the waits for them) inside the rank's step windows
             over the total step time; averaged over ranks (--json: comm_by_kind splits it by kind)
  predicted  (below the table) the run's own prediction (gpt2 train prints it at the start: the
             planner's step time and memory, /meta predicted_*), measured against it: the mean step
             time, and the largest rank's most Kokkos memory at once against its predicted memory
  bubble     measured pipeline bubble (see plot_pipeline.py: 1 - sum of the stages' compute time /
             (pp * span from the first forward start to the last compute end)), mean over steps,
             beside the theoretical (p-1)/(m+p-1) ((p-1)/p for the naive schedule; the schedule
             simulator's value for the others)

Example:
    analysis/report.py runs/*.h5 --peak-tflops 67
"""
import argparse
import json
import sys

import tracelib


def summarize(trace, peak_tflops, skip):
    comm, comm_per_rank = tracelib.comm_fraction(trace, skip)
    metrics = trace.metrics
    val = metrics[metrics["val_loss"] >= 0]
    return {
        "trace": trace.path,
        "label": trace.label,
        "world_size": trace.world_size,
        "dp": trace.dp,
        "pp": trace.pp,
        "tp": trace.tp,
        "microbatches": trace.microbatches,
        "schedule": trace.schedule,
        "device": trace.meta.get("device", ""),
        "execution_space": trace.meta.get("execution_space", ""),
        "steps": int(len(metrics)),
        "steps_measured": int(len(trace.metric_rows(skip))),
        "tokens_per_step": trace.tokens_per_step,
        "mean_step_time_s": trace.mean_step_time(skip),
        "tokens_per_s": trace.tokens_per_s(skip),
        "flops_per_token": tracelib.flops_per_token(trace.meta),
        "peak_tflops_per_rank": peak_tflops,
        "mfu": tracelib.mfu(trace, peak_tflops, skip),
        "comm_fraction": comm,
        "comm_fraction_per_rank": {str(r): v for r, v in comm_per_rank.items()},
        # Every communication kind the trace declares: share of step time, bytes per step and rank.
        "comm_by_kind": {k: {"fraction": f, "bytes_per_step": b}
                         for k, (f, b) in tracelib.comm_by_kind(trace, skip).items()},
        # Data-parallel volume per step in units of the stage's parameter bytes, against theory.
        "zero": trace.zero,
        "dp_volume_per_rank": {str(r): v for r, v in tracelib.dp_volume(trace, skip).items()},
        "dp_volume_theory": tracelib.theoretical_dp_volume(trace.zero, trace.microbatches, trace.dp,
                                                           tracelib.gather_fraction(trace)),
        "memory_per_rank": {str(r): m for r, m in tracelib.memory_per_rank(trace).items()},
        # Without a pipeline there is no bubble to speak of: nan (null in JSON).
        "bubble_measured": tracelib.mean_bubble(trace, skip) if trace.pp > 1 else float("nan"),
        "bubble_theoretical": tracelib.theoretical_bubble(trace) if trace.pp > 1 else float("nan"),
        "final_loss": float(metrics["loss"][-1]) if len(metrics) else None,
        "final_val_loss": float(val["val_loss"][-1]) if len(val) else None,
        "dropped_events": trace.dropped,
        "prediction": prediction(trace.meta),
    }


def prediction(meta):
    """The run's prediction (/meta predicted_*, measured_memory_bytes), or None for a trace without one."""
    source = str(meta.get("prediction_source", ""))
    if not source:
        return None
    as_list = lambda v: [float(x) for x in (v if hasattr(v, "__len__") else [v])]  # noqa: E731
    return {"source": source, "step_time_s": float(meta["predicted_step_ms"]) / 1e3,
            "tokens_per_s": float(meta["predicted_tokens_per_s"]),
            "memory_per_rank": as_list(meta.get("predicted_memory_bytes", [])),
            "measured_memory_per_rank": as_list(meta.get("measured_memory_bytes", [])),
            "measured_rss_per_rank": as_list(meta.get("measured_rss_bytes", []))}


def pct(x):
    return f"{100 * x:.1f}%" if x == x else "-"  # x != x: nan


def print_table(rows, peak_tflops, skip):
    header = ["run", "ranks", "dp x pp", "m", "sched", "steps", "step ms", "tokens/s", "MFU", "comm",
              "bubble (theory)", "loss"]
    table = [header]
    for r in rows:
        table.append([
            r["label"].split(" (")[0], str(r["world_size"]), f"{r['dp']} x {r['pp']}", str(r["microbatches"]),
            r["schedule"] if r["pp"] > 1 else "-", str(r["steps"]), f"{1e3 * r['mean_step_time_s']:.2f}",
            f"{r['tokens_per_s']:.0f}", f"{100 * r['mfu']:.2f}%", pct(r["comm_fraction"]),
            f"{pct(r['bubble_measured'])} ({pct(r['bubble_theoretical'])})" if r["pp"] > 1 else "-",
            f"{r['final_loss']:.4f}" if r["final_loss"] is not None else "-",
        ])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\nmeans over steps after the first {skip}; MFU against {peak_tflops:g} TFLOP/s per rank "
          f"(--peak-tflops; the default 1.0 is a CPU placeholder)")
    for r in rows:
        extra = f"{r['label']}: {r['execution_space']} on {r['device']}, {r['flops_per_token']:.3g} FLOPs/token"
        if r["dropped_events"]:
            extra += f"; WARNING: {r['dropped_events']} events dropped (raise trace.max_events)"
        print(extra)
    for r in rows:
        p = r["prediction"]
        if p is None:
            print(f"{r['label'].split(' (')[0]}: no prediction in the trace")
            continue
        mem, pmem = max(p["measured_memory_per_rank"] or [0]), max(p["memory_per_rank"] or [0])
        step_off = r["mean_step_time_s"] / p["step_time_s"] - 1 if p["step_time_s"] > 0 else float("nan")
        mem_off = mem / pmem - 1 if pmem > 0 else float("nan")
        print(f"{r['label'].split(' (')[0]}: step {1e3 * r['mean_step_time_s']:.2f} ms against "
              f"{1e3 * p['step_time_s']:.2f} predicted ({100 * step_off:+.1f}%); memory {mem / 1048576:.1f} MiB "
              f"against {pmem / 1048576:.1f} on the largest rank ({100 * mem_off:+.1f}%); from {p['source']}"
              + (f"; peak RSS {max(p['measured_rss_per_rank']) / 1048576:.1f} MiB" if p["measured_rss_per_rank"] else ""))
    print("\nmemory at rest per rank (MiB: params / grads / optimizer; peak activations, ZeRO workspaces) and "
          "data-parallel volume per step (x the stage's parameter bytes; theory in brackets)")
    for r in rows:
        vols = [v for v in r["dp_volume_per_rank"].values() if v == v]
        vol = f"{sum(vols) / len(vols):.2f} ({r['dp_volume_theory']:g})" if vols and r["dp"] > 1 else "-"
        for rank, m in sorted(r["memory_per_rank"].items(), key=lambda x: int(x[0]))[:8]:
            mib = {k: v / 1048576 for k, v in m.items()}
            print(f"  {r['label'].split(' (')[0]} rank {rank}: {mib['params']:.2f} / {mib['grads']:.2f} / "
                  f"{mib['optimizer']:.2f}; {mib['activations']:.2f}, {mib['workspace']:.2f} | dp volume {vol}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="HDF5 trace files")
    parser.add_argument("--peak-tflops", type=float, default=1.0,
                        help="peak TFLOP/s of ONE rank's device for MFU (default 1.0: a placeholder for a CPU core)")
    parser.add_argument("--skip", type=int, default=1, help="warm-up steps left out of the means (default: 1)")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    args = parser.parse_args(argv)
    if args.peak_tflops <= 0:
        parser.error("--peak-tflops must be positive")
    rows = [summarize(t, args.peak_tflops, args.skip) for t in tracelib.load(args.traces)]
    if args.json:
        # NaN is not JSON: write null for it.
        clean = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows]
        print(json.dumps(clean, indent=2))
    else:
        print_table(rows, args.peak_tflops, args.skip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
