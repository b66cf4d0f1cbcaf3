#!/usr/bin/python3
"""A traced pipeline step replayed against its schedule: which part of the measured bubble the
schedule's order explains, given how long the passes really took, and which part the executor added.

Each rank runs its passes in the order the trace shows them (the schedule's list). In the replay a
pass starts when the rank's previous pass has ended and its input is there: a forward needs the
forward of the virtual stage before it, a backward (or input pass) the backward of the stage after
it; a weight pass follows its own backward, which the rank's order already ensures. A message between
ranks arrives `link` seconds after its pass ends: the median delay the trace shows where a pass
waited for one. Nothing else costs time. Passes last
  each  as long as they ran in the step (what the schedule makes of these very passes),
  mean  their rank's mean for the chunk and kind over the traced steps (unequal stages kept, each
        pass's variation -- the jitter a busy machine adds -- removed).
The bubble is counted as tracelib.measured_bubble counts it (the window from the first forward to
the last compute end, less the ranks' compute). measured / each above 1 is what the executor adds
(waiting for messages beyond the link's delay, work between passes); each / mean above 1 is what
the passes' variation costs the schedule.

  analysis/pipeline_replay.py TRACE [--skip 1]
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracelib  # noqa: E402

VEE_SCHEDULES = ("zb-v", "dualpipev")


def placement(trace):
    """loop (virtual stage = chunk x p + rank) or vee (rank r: stages r and 2p - 1 - r)."""
    return str(trace.meta.get("placement", "vee" if trace.schedule in VEE_SCHEDULES else "loop"))


def virtual_stage(kind, p, rank_index, chunk):
    if kind == "loop":
        return chunk * p + rank_index
    return rank_index if chunk == 0 else 2 * p - 1 - rank_index


def _passes(trace, ranks, step):
    """Each rank's compute passes of the step in order: (kind, microbatch, virtual stage, start, end)."""
    names = trace.kind_names
    where = placement(trace)
    ev = trace.events[trace.mask(trace.compute_kinds, step=step)]
    out = []
    for i, r in enumerate(ranks):
        mine = np.sort(ev[ev["rank"] == r], order="start")
        out.append([(names[e["kind"]], int(e["microbatch"]), virtual_stage(where, len(ranks), i, int(e["chunk"])),
                     float(e["start"]), float(e["end"])) for e in mine])
    return out


def _input_of(kind, mb, stage, stages):
    """The pass on another stage whose output this one needs, or None."""
    if kind == "forward" and stage > 0:
        return ("forward", mb, stage - 1)
    if kind == "backward" and stage < stages - 1:
        return ("backward", mb, stage + 1)
    return None


def link_delay(passes, stages):
    """Median delay from a pass's end to the start of the pass on another rank that waited for it."""
    where = {(k, mb, s): (i, end) for i, lst in enumerate(passes) for k, mb, s, _, end in lst}
    delays = []
    for i, lst in enumerate(passes):
        prev_end = None
        for k, mb, s, start, end in lst:
            need = _input_of(k, mb, s, stages)
            if need in where:
                j, ready = where[need]
                if j != i and (prev_end is None or prev_end < ready) and start >= ready:
                    delays.append(start - ready)
            prev_end = end
    return statistics.median(delays) if delays else 0.0


def replay(passes, stages, durations, link):
    """Start and end of every pass when each starts as soon as its rank and its input allow."""
    done = {}
    clock = [0.0] * len(passes)
    nxt = [0] * len(passes)
    timeline = [[] for _ in passes]
    owner = {(k, mb, s): i for i, lst in enumerate(passes) for k, mb, s, _, _ in lst}
    remaining = sum(len(lst) for lst in passes)
    while remaining:
        progressed = False
        for i, lst in enumerate(passes):
            while nxt[i] < len(lst):
                k, mb, s, _, _ = lst[nxt[i]]
                need = _input_of(k, mb, s, stages)
                if need is not None and need in owner and need not in done:
                    break
                ready = 0.0 if need is None or need not in done else done[need] + (link if owner[need] != i else 0.0)
                start = max(clock[i], ready)
                end = start + durations[i][nxt[i]]
                done[(k, mb, s)] = end
                timeline[i].append((k, start, end))
                clock[i] = end
                nxt[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("the traced order deadlocks when replayed (passes missing from the trace?)")
    return timeline


def bubble_of(timeline):
    """1 - compute / (ranks x window), the window from the first forward to the last end."""
    starts = [s for lst in timeline for k, s, _ in lst if k == "forward"]
    t0, t1 = min(starts), max(e for lst in timeline for _, _, e in lst)
    busy = sum(e - s for lst in timeline for _, s, e in lst)
    return 1.0 - busy / (len(timeline) * (t1 - t0))


def pass_time_cv(times):
    """How much a pass's time varies: the coefficient of variation (sample) of each key's times,
    averaged over the keys with two or more. In 1F1B the ranks meet at every pass, so a rank's wait
    there is about the difference of two such times."""
    cvs = [statistics.stdev(v) / statistics.mean(v) for v in times.values() if len(v) > 1 and statistics.mean(v) > 0]
    return float(np.mean(cvs)) if cvs else float("nan")


def replayed_bubbles(trace, skip=1, link=None):
    """Mean over the steps after `skip` (and the pipelines) of {measured, each, mean, link}, and cv:
    the passes' mean coefficient of variation. `link`: the messages' delay (s); by default the
    step's median (link_delay). With 0, `each` is a lower bound of `measured`: no pass starts later
    than it did."""
    steps = trace.train_steps(skip)
    pipes = trace.pipelines()
    stages = trace.pp * trace.virtual_stages
    traced = {(step, i): _passes(trace, ranks, step) for step in steps for i, ranks in enumerate(pipes)}
    # Mean pass time per (rank, kind, stage) over the steps.
    sums = {}
    for (_, i), passes in traced.items():
        for r, lst in zip(pipes[i], passes):
            for k, _, s, start, end in lst:
                sums.setdefault((r, k, s), []).append(end - start)
    means = {key: statistics.mean(v) for key, v in sums.items()}
    rows = {"measured": [], "each": [], "mean": [], "link": []}
    for step in steps:
        for i, ranks in enumerate(pipes):
            passes = traced[(step, i)]
            if not any(passes):
                continue
            delay = link_delay(passes, stages) if link is None else link
            each = [[end - start for _, _, _, start, end in lst] for lst in passes]
            mean = [[means[(ranks[i], k, s)] for k, _, s, _, _ in lst] for i, lst in enumerate(passes)]
            rows["each"].append(bubble_of(replay(passes, stages, each, delay)))
            rows["mean"].append(bubble_of(replay(passes, stages, mean, delay)))
            rows["link"].append(delay)
        rows["measured"].append(tracelib.measured_bubble(trace, step)[0])
    out = {k: float(np.mean(v)) if v else float("nan") for k, v in rows.items()}
    out["cv"] = pass_time_cv(sums)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=1, help="training steps left out at the start (warm-up)")
    args = ap.parse_args()
    trace = tracelib.Trace(args.trace)
    if trace.pp <= 1:
        sys.exit(f"pipeline_replay.py: {args.trace} has no pipeline (pp 1)")
    if not len(trace.train_steps(args.skip)):
        sys.exit(f"pipeline_replay.py: {args.trace} holds no training step after the first {args.skip}")
    b = replayed_bubbles(trace, args.skip)
    print(f"{trace.label}: bubble measured {b['measured']:.4f}, replayed with each pass's time {b['each']:.4f}, "
          f"with mean pass times {b['mean']:.4f}, schedule theory {tracelib.theoretical_bubble(trace):.4f}; "
          f"link delay {1e6 * b['link']:.0f} us; a pass's time varies {100 * b['cv']:.0f}% (coefficient of variation)")
    print(f"  measured / replayed: {b['measured'] / b['each']:.2f}x (the executor's share), "
          f"replayed / mean: {b['each'] / b['mean']:.2f}x (the passes' variation)")


if __name__ == "__main__":
    main()
