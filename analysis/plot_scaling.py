#!/usr/bin/python3
"""Scaling plots from several traces of one model run on different numbers of ranks (e.g. dp=1,2,4).

Writes two PNGs into DIR:
  scaling_time.png         time per epoch vs ranks when the epoch size is known (--epoch-tokens N or
                           --shards GLOB), otherwise time per optimizer step vs ranks
  scaling_tokens_per_s.png tokens/s vs ranks
each with the ideal (linear) line from the smallest run of each series: ideal tokens/s grows in
proportion to the ranks; ideal time is the work of the run divided by that ideal throughput (for a
fixed global batch, the time of the smallest run times its ranks / ranks). Points are annotated with
the parallel efficiency (measured / ideal).

Step times are rank 0's /metrics step_time, mean over steps with the first --skip (warm-up) left
out; tokens/s = tokens_per_step / mean step time. An epoch is as the loader counts it: (count - 1) // T
sequences per shard, grouped into global batches of tokens_per_step / T sequences; or, with
--trace-epochs, the batches per epoch each trace's /meta records (any data, e.g. translation pairs
packed into sequences).

Example:
    analysis/plot_scaling.py runs/dp1.h5 runs/dp2.h5 runs/dp4.h5 --out plots --shards 'data/licenses/train_*.bin'
"""
import argparse
import sys
from collections import defaultdict

import numpy as np

import tracelib


def series_key(trace, group_by):
    if group_by == "none":
        return "runs"
    if group_by == "schedule":
        return f"schedule {trace.schedule}" if trace.pp > 1 else "no pipeline"
    return f"{group_by}={getattr(trace, group_by)}"


def measure(traces, args):
    """Rows of (series, ranks, tokens/s, seconds per step, seconds per epoch or None, trace)."""
    counts = None
    if getattr(args, "trace_epochs", False):
        counts = "trace"
    elif args.epoch_tokens:
        counts = [args.epoch_tokens]
    elif args.shards:
        counts = tracelib.shard_tokens(args.shards)
    rows = []
    for t in traces:
        step_s = t.mean_step_time(args.skip)
        epoch_s = None
        if counts == "trace":
            batches = int(t.meta.get("batches_per_epoch", 0))
            if batches <= 0:
                raise SystemExit(f"{t.path}: /meta records no batches_per_epoch")
            epoch_s = step_s * batches
        elif counts is not None:
            batches = tracelib.batches_per_epoch(t, counts)
            if batches <= 0:
                raise SystemExit(f"{t.path}: the epoch holds no full batch of {t.tokens_per_step} tokens")
            epoch_s = step_s * batches
        rows.append((series_key(t, args.group_by), t.world_size, t.tokens_per_s(args.skip), step_s,
                     epoch_s, t))
    return rows


def plot_series(ax, rows, value, ideal, ylabel, title, log_y, higher_is_better):
    """One line per series, measured (markers) and ideal (dashed), efficiency annotated."""
    by_series = defaultdict(list)
    for r in rows:
        by_series[r[0]].append(r)
    all_ranks = sorted({r[1] for r in rows})
    for i, (name, rs) in enumerate(sorted(by_series.items())):
        rs.sort(key=lambda r: r[1])
        color = f"C{i}"
        x = np.array([r[1] for r in rs], dtype=float)
        y = np.array([value(r) for r in rs])
        yi = np.array([ideal(r, rs[0]) for r in rs])
        label = name if len(by_series) > 1 else "measured"
        ax.plot(x, y, "o-", color=color, label=label)
        ideal_label = f"ideal ({name})" if len(by_series) > 1 else "ideal (linear)"
        ax.plot(x, yi, "--", color=color, alpha=0.6, label=ideal_label)
        for xv, yv, iv in zip(x, y, yi):
            eff = (yv / iv) if higher_is_better else (iv / yv)
            ax.annotate(f"{100 * eff:.0f}%", (xv, yv), textcoords="offset points", xytext=(6, 6), fontsize=8,
                        color=color)
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlim(all_ranks[0] / 1.3, all_ranks[-1] * 1.3)
    ax.margins(y=0.1)
    ax.set_xticks(all_ranks)
    ax.set_xticklabels([str(r) for r in all_ranks])
    ax.set_xlabel("ranks (world size)")
    ax.set_ylabel(ylabel)
    ax.set_title(title + "\n(percent: parallel efficiency against the ideal line)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="HDF5 trace files, one per run")
    parser.add_argument("--out", default="plots", metavar="DIR", help="output folder (default: plots)")
    epoch = parser.add_mutually_exclusive_group()
    epoch.add_argument("--epoch-tokens", type=int, metavar="N",
                       help="tokens in the training data (one shard's worth): plot time per epoch")
    epoch.add_argument("--shards", metavar="GLOB",
                       help="training shards (llm.c format) to count the epoch from: plot time per epoch")
    epoch.add_argument("--trace-epochs", action="store_true",
                       help="the epoch as each trace's /meta batches_per_epoch says: plot time per epoch")
    parser.add_argument("--group-by", choices=("none", "pp", "dp", "schedule"), default="none",
                        help="one line (and ideal line) per value of this setting (default: none)")
    parser.add_argument("--skip", type=int, default=1, help="warm-up steps left out of the means (default: 1)")
    parser.add_argument("--log", action="store_true", help="logarithmic y axes")
    args = parser.parse_args(argv)
    plt = tracelib.pyplot()
    rows = measure(tracelib.load(args.traces), args)

    print(f"{'trace':<40} {'ranks':>5} {'tokens/s':>10} {'step (ms)':>10} {'epoch (s)':>10}")
    for series, ranks, tps, step_s, epoch_s, t in sorted(rows, key=lambda r: (r[0], r[1])):
        epoch_txt = f"{epoch_s:10.3f}" if epoch_s is not None else f"{'-':>10}"
        print(f"{t.label:<40} {ranks:>5} {tps:>10.0f} {1e3 * step_s:>10.2f} {epoch_txt}")

    per_epoch = all(r[4] is not None for r in rows)
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    if per_epoch:
        # Ideal: the run's epoch work (batches * tokens_per_step) at the base run's per-rank throughput.
        plot_series(ax, rows, lambda r: r[4],
                    lambda r, base: r[4] * r[2] / (base[2] * r[1] / base[1]),
                    "time per epoch (s)", "time per epoch vs ranks", args.log, False)
    else:
        plot_series(ax, rows, lambda r: 1e3 * r[3],
                    lambda r, base: 1e3 * r[5].tokens_per_step / (base[2] * r[1] / base[1]),
                    "time per step (ms)", "time per optimizer step vs ranks (epoch size not given)",
                    args.log, False)
    tracelib.save(fig, args.out, "scaling_time.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    plot_series(ax, rows, lambda r: r[2], lambda r, base: base[2] * r[1] / base[1],
                "tokens/s", "throughput vs ranks", args.log, True)
    tracelib.save(fig, args.out, "scaling_tokens_per_s.png")
    plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
