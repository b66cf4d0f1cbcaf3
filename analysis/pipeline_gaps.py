#!/usr/bin/python3
"""Where a pipeline's idle time goes, rank by rank: each rank's share of the pipeline's compute
window (tracelib.measured_bubble's window) split into its compute, the time it waited for a
receive, for its sends to complete, and the rest (between passes: the executor's own work, message
issue, data loading), and the longest gaps with the passes around them.

  analysis/pipeline_gaps.py TRACE [--step N] [--gaps 8]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracelib  # noqa: E402


def rank_report(trace, rank, step, t0, t1, n_gaps):
    """(compute, recv, send_wait, rest) seconds of one rank in [t0, t1], and its longest gaps."""
    ev = trace.events[(trace.events["rank"] == rank) & (trace.events["step"] == step)]
    ev = ev[(ev["end"] > t0) & (ev["start"] < t1)]
    names = trace.kind_names
    sums = {"compute": 0.0, "recv": 0.0, "send_wait": 0.0}
    compute = ev[np.isin(ev["kind"], [names.index(k) for k in trace.compute_kinds])]
    for e in ev:
        k = names[e["kind"]]
        d = min(e["end"], t1) - max(e["start"], t0)
        if k in trace.compute_kinds:
            sums["compute"] += d
        elif k in sums:
            sums[k] += d
    sums["rest"] = (t1 - t0) - sum(sums.values())
    gaps = []
    last_end, last = t0, "start"
    for e in compute:
        label = trace.pass_label(names[e["kind"]], int(e["microbatch"]), int(e["chunk"]))
        if e["start"] > last_end:
            gaps.append((e["start"] - last_end, last, label))
        last_end, last = max(last_end, e["end"]), label
    if t1 > last_end:
        gaps.append((t1 - last_end, last, "end"))
    gaps.sort(reverse=True)
    return sums, gaps[:n_gaps], len(compute)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=-1, help="a training step (default: the last traced)")
    ap.add_argument("--gaps", type=int, default=6, help="longest gaps to list a rank")
    args = ap.parse_args()
    trace = tracelib.Trace(args.trace)
    steps = trace.train_steps(0)
    if not len(steps):
        sys.exit(f"pipeline_gaps.py: {args.trace} holds no training step")
    step = args.step if args.step >= 0 else int(steps[-1])
    fwd = trace.code("forward")
    ev = trace.events[trace.mask(trace.compute_kinds, step=step)]
    for ranks in trace.pipelines():
        mine = ev[np.isin(ev["rank"], ranks)]
        f = mine[mine["kind"] == fwd]
        if not len(f):
            continue
        t0, t1 = float(f["start"].min()), float(mine["end"].max())
        print(f"step {step}, pipeline of ranks {list(ranks)}: window {1e3 * (t1 - t0):.1f} ms")
        for r in ranks:
            sums, gaps, n = rank_report(trace, r, step, t0, t1, args.gaps)
            span = t1 - t0
            print(f"  rank {r}: {n} passes; compute {sums['compute'] / span:.3f}, recv wait "
                  f"{sums['recv'] / span:.3f}, send wait {sums['send_wait'] / span:.3f}, rest {sums['rest'] / span:.3f}")
            for d, before, after in gaps:
                print(f"    {1e3 * d:7.2f} ms idle between {before} and {after}")


if __name__ == "__main__":
    main()
