#!/usr/bin/python3
"""Loss curves from one or more traces: DIR/loss.png.

Each trace gets one colour: its training loss per optimizer step as a solid line, and its
validation loss (the /metrics rows with val_loss >= 0) as a dashed line with markers. Steps are the
1-based /metrics steps (after step k, k optimizer steps have run). Lines are labelled from /meta
(file name, dp x pp, microbatches, schedule). Runs that should agree (same config on different
layouts) coincide: earlier traces are drawn with wider lines so that each stays visible.

Example:
    analysis/plot_loss.py runs/dp1.h5 runs/dp2.h5 runs/pp2.h5 --out plots
"""
import argparse
import sys

import tracelib


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="HDF5 trace files")
    parser.add_argument("--out", default="plots", metavar="DIR", help="output folder (default: plots)")
    parser.add_argument("--log", action="store_true", help="logarithmic loss axis")
    args = parser.parse_args(argv)
    plt = tracelib.pyplot()
    traces = tracelib.load(args.traces)

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, t in enumerate(traces):
        m = t.metrics
        if len(m) == 0:
            print(f"{t.path}: no /metrics rows, skipped", file=sys.stderr)
            continue
        color = f"C{i % 10}"
        # Earlier traces drawn wider, so curves that coincide (same run on another layout) stay visible.
        width = 1.2 + 2.5 * (len(traces) - 1 - i) / max(1, len(traces) - 1)
        ax.plot(m["step"], m["loss"], "-", color=color, lw=width, label=f"{t.label} train")
        val = m[m["val_loss"] >= 0]
        if len(val):
            ax.plot(val["step"], val["val_loss"], "o--", color=color, lw=width, ms=3 + 1.5 * width,
                    label=f"{t.label} val")
        last = f", val {val['val_loss'][-1]:.4f}" if len(val) else ""
        print(f"{t.label}: {len(m)} steps, final train loss {m['loss'][-1]:.4f}{last}")
    if args.log:
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title("training (solid) and validation (dashed) loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    tracelib.save(fig, args.out, "loss.png")
    plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
