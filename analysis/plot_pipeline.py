#!/usr/bin/python3
"""Per-rank timeline (Gantt) of one optimizer step and the measured pipeline bubble.

For each trace, writes DIR/gantt_<trace>.png: one row per rank, the step's events coloured by kind.
The trace says where each kind goes and its colour (/meta kind_display, kind_colours): "row" kinds
(compute passes, pipeline transfers, waits for collectives, data loading, the optimizer, ...) in
the rank's row, "lane" kinds (collectives issued inside a compute pass) in a thin lane under it;
"detail" and "unit" kinds are left out. Compute boxes carry their microbatch ("F3", "B3", "W3");
where a rank runs several pipeline chunks (interleaved, interleaved-zb, zb-v, dualpipev), chunks
after the first add theirs -- "F3.1" is the forward of microbatch 3 on the rank's chunk 1, "F3" on
its chunk 0 -- and are hatched. A forward and a backward the schedule pairs (dualpipev's steady
state: on a GPU one's computation overlaps the other's communication) are outlined together. The
grey band is the rank's `step` event; dashed lines mark each pipeline's compute window.

Bubble fraction (measured), per step and per pipeline (the ranks sharing dp, cp and tp rank):
    t0 = start of the first forward, t1 = end of the last compute pass of that step on any stage,
    bubble = 1 - sum over stages of compute time / (pp * (t1 - t0)),
averaged over the pipelines. Time spent waiting for pipeline transfers or loading data inside the
window is bubble. It is printed beside the theoretical value for equal stage times: (p-1)/(m+p-1)
for gpipe and 1f1b, (p-1)/p for naive (no two stages ever work at once). Differences come from
unequal stages (the last one also runs the LM head and loss), communication, and noise on an
oversubscribed machine.

With several traces (e.g. naive vs gpipe vs 1f1b of one config), also writes
DIR/pipeline_comparison.png: tokens/s per run and the bubble fractions (measured mean over steps,
warm-up left out, and theoretical).

Example:
    analysis/plot_pipeline.py runs/naive.h5 runs/gpipe.h5 runs/1f1b.h5 --out plots
"""
import argparse
import sys

import numpy as np

import tracelib


def step_events(trace, step):
    """Events of the step on every rank (the `step` events themselves excluded).

    An event belongs to the step when it lies inside the rank's `step` window (so the evaluation
    that shares the next step's index stays out); without `step` events the index decides."""
    owner = trace.containing_step()
    if np.any(trace.mask(["step"], step=step)):
        sel = owner == step
    else:
        sel = trace.mask(step=step) & ~trace.mask(["eval"])
    sel &= ~trace.mask(["step"])
    return trace.events[sel]


def box_label(trace, event, width_pt):
    """(text, fontsize) for a box: 'F3' ('F3.1' on the rank's chunk 1), smaller when narrow, then
    without the letter, else no text."""
    full = trace.pass_label(trace.kind_name(int(event["kind"])), int(event["microbatch"]), int(event["chunk"]))
    if not full:
        return "", 0
    short = full[1:]
    for text, fontsize in ((full, 8), (full, 6), (short, 8), (short, 6)):
        if width_pt >= 0.65 * fontsize * len(text) + 2:
            return text, fontsize
    return "", 0


def plot_gantt(trace, step, plt):
    row_kinds, lane_kinds = trace.kinds_with_display("row"), trace.kinds_with_display("lane")
    lane_codes = [trace.code(k) for k in lane_kinds]
    events = step_events(trace, step)
    events = events[np.isin(events["kind"], [trace.code(k) for k in row_kinds + lane_kinds])]
    windows = trace.events[trace.mask(["step"], step=step)]
    ref = float(min(windows["start"].min() if len(windows) else np.inf,
                    events["start"].min() if len(events) else np.inf))
    if not np.isfinite(ref):
        raise SystemExit(f"{trace.path}: no events for step {step}")
    end = float(max(windows["end"].max() if len(windows) else -np.inf,
                    events["end"].max() if len(events) else -np.inf))
    span_ms = (end - ref) * 1e3
    ranks = trace.ranks()

    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.75 * len(ranks)))
    ax.set_xlim(0, span_ms * 1.01)
    ax.set_ylim(len(ranks) - 0.35, -0.6)
    ax_width_pt = ax.get_window_extent().width * 72.0 / fig.dpi
    pt_per_ms = ax_width_pt / (span_ms * 1.01)
    seen = set()
    for w in windows:
        ax.broken_barh([((w["start"] - ref) * 1e3, (w["end"] - w["start"]) * 1e3)], (w["rank"] - 0.45, 0.9),
                       facecolors=trace.kind_colour("step"), edgecolors="#BBBBBB", linewidth=0.5, zorder=0)
    for e in events:
        kind = trace.kind_name(int(e["kind"]))
        x, width = (e["start"] - ref) * 1e3, (e["end"] - e["start"]) * 1e3
        y, height = (e["rank"] + 0.22, 0.18) if int(e["kind"]) in lane_codes else (e["rank"] - 0.3, 0.5)
        ax.broken_barh([(x, max(width, span_ms * 1e-4))], (y, height), facecolors=trace.kind_colour(kind),
                       edgecolors="black", linewidth=0.3, zorder=2, hatch="///" if int(e["chunk"]) > 0 else None)
        seen.add(kind)
        text, fontsize = box_label(trace, e, width * pt_per_ms)
        if text:
            ax.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=fontsize,
                    color="white", fontweight="bold", zorder=3)
    # Paired passes: one outline around each pair's boxes.
    paired = events[events["pair"] > 0] if "pair" in (events.dtype.names or ()) else events[:0]
    for r in np.unique(paired["rank"]):
        mine = paired[paired["rank"] == r]
        for pair in np.unique(mine["pair"]):
            both = mine[mine["pair"] == pair]
            x0, x1 = (both["start"].min() - ref) * 1e3, (both["end"].max() - ref) * 1e3
            ax.add_patch(plt.Rectangle((x0, r - 0.36), x1 - x0, 0.62, fill=False, edgecolor="#D81B60", lw=1.2,
                                       zorder=5))
        seen.add("(pair)")
    # Compute window of each pipeline (the denominator of the measured bubble).
    fwd, bwd = trace.code("forward"), trace.code("backward")
    compute = np.isin(events["kind"], [trace.code(k) for k in trace.compute_kinds])
    for pipe in trace.pipelines():
        mine = events[np.isin(events["rank"], pipe) & compute]
        f, b = mine[mine["kind"] == fwd], mine[mine["kind"] == bwd]
        if len(f) and len(b):
            lo, hi = min(pipe) - 0.5, max(pipe) + 0.5
            for t in (f["start"].min(), mine["end"].max()):
                ax.plot([(t - ref) * 1e3] * 2, [lo, hi], ls="--", color="black", lw=0.8, zorder=4)

    measured, _ = tracelib.measured_bubble(trace, step)
    theory = tracelib.theoretical_bubble(trace)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([trace.rank_name(r).replace(" (", "\n(") for r in ranks], fontsize=9)
    ax.set_xlabel(f"time since step {step} began (ms)")
    ax.set_title(f"{trace.label}: step {step} (0-based)\nbubble measured {100 * measured:.1f}% vs "
                 f"theoretical {theory_formula(trace)} = {100 * theory:.1f}%", fontsize=11)
    # Legend: compute kinds, the rest of the row, then the lane; only kinds the step has.
    computes = [k for k in row_kinds if k in trace.compute_kinds]
    order = [k for k in computes + [k for k in row_kinds + lane_kinds if k not in computes] if k in seen]
    pairs = "(pair)" in seen
    labels = list(order)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=trace.kind_colour(k), edgecolor="black", linewidth=0.3)
               for k in order]
    if trace.has_chunks:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch="///", linewidth=0.3))
        labels.append("F3.1: microbatch 3 on the\nrank's chunk 1, hatched (F3: chunk 0)")
    if pairs:
        handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="#D81B60", lw=1.2))
        labels.append("a forward and a backward\nthe schedule pairs")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig


def theory_formula(trace):
    if trace.pp <= 1:
        return "(no pipeline)"
    if trace.schedule == "naive":
        return "(p-1)/p"
    if trace.schedule in ("gpipe", "1f1b"):
        return f"(p-1)/(m+p-1) [p={trace.pp}, m={trace.microbatches}]"
    return f"{trace.schedule}, simulated [p={trace.pp}, m={trace.microbatches}]"


def plot_comparison(traces, skip, plt):
    labels = [t.label.replace(" (", "\n(") for t in traces]
    tps = [t.tokens_per_s(skip) for t in traces]
    measured = [tracelib.mean_bubble(t, skip) for t in traces]
    theory = [tracelib.theoretical_bubble(t) for t in traces]
    x = np.arange(len(traces))
    colour = traces[0].kind_colour  # one kind's colour per series, as in the Gantt charts
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(10, 2.6 * len(traces) * 2), 4.8))
    bars = a1.bar(x, tps, color=[colour("forward")] * len(traces), width=0.6)
    a1.bar_label(bars, fmt="%.0f", fontsize=8)
    a1.set_ylabel("tokens/s (mean over steps, warm-up left out)")
    a1.set_title("throughput")
    w = 0.38
    b1 = a2.bar(x - w / 2, [100 * v for v in measured], w, label="measured",
                color=colour("recv"))
    b2 = a2.bar(x + w / 2, [100 * v for v in theory], w, label="theoretical",
                color=colour("allreduce_wait"), alpha=0.7)
    a2.bar_label(b1, fmt="%.1f", fontsize=8)
    a2.bar_label(b2, fmt="%.1f", fontsize=8)
    a2.set_ylabel("bubble fraction (%)")
    a2.set_title("pipeline bubble")
    a2.legend(fontsize=8)
    for a in (a1, a2):
        a.set_xticks(x)
        a.set_xticklabels(labels, fontsize=8)
        a.grid(axis="y", alpha=0.3)
    fig.suptitle("pipeline schedules vs naive model parallel")
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="HDF5 trace files (trace.file of a run)")
    parser.add_argument("--out", default="plots", metavar="DIR", help="output folder (default: plots)")
    parser.add_argument("--step", type=int, default=None,
                        help="0-based step to draw (default: the middle traced step)")
    parser.add_argument("--skip", type=int, default=1,
                        help="warm-up steps left out of the mean bubble and tokens/s (default: 1)")
    args = parser.parse_args(argv)
    plt = tracelib.pyplot()
    traces = tracelib.load(args.traces)
    for t in traces:
        steps = t.train_steps(skip=0)
        if not steps:
            raise SystemExit(f"{t.path}: the trace has no step events")
        step = args.step if args.step is not None else steps[len(steps) // 2]
        if step not in steps:
            raise SystemExit(f"{t.path}: no step {step} (traced steps: {steps[0]}..{steps[-1]})")
        fig = plot_gantt(t, step, plt)
        tracelib.save(fig, args.out, f"gantt_{t.name}.png")
        plt.close(fig)
        measured, per_replica = tracelib.measured_bubble(t, step)
        theory = tracelib.theoretical_bubble(t)
        print(f"{t.label}: step {step}: bubble measured {measured:.3f}"
              + (f" (replicas {', '.join(f'{v:.3f}' for v in per_replica)})" if len(per_replica) > 1 else "")
              + f", mean over steps {tracelib.mean_bubble(t, args.skip):.3f}; "
              f"theoretical {theory_formula(t)} = {theory:.3f}")
    if len(traces) > 1:
        fig = plot_comparison(traces, args.skip, plt)
        tracelib.save(fig, args.out, "pipeline_comparison.png")
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
