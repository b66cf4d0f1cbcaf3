#!/usr/bin/python3
"""Convert a trace to the Chrome trace event format (JSON), for ui.perfetto.dev or chrome://tracing.

Every event becomes a complete event (ph "X") with pid = rank and ts/dur in microseconds since the
earliest event. Names: "F3"/"B3" for the forward/backward of microbatch 3, "send 3"/"recv 3",
"eval 3", "data 3", "allreduce b0" (issue of gradient bucket 0), "allreduce wait", "step 7" (0-based),
"optimizer", "tied sync", ...; args carry kind, step, microbatch and stage.

Threads (--tracks): "lanes" (default) puts each rank's events on four named tracks: step (the
`step` events, the whole evaluation and checkpoints), compute (forward, backward, eval microbatches,
data, optimizer), comm (send, recv, allreduce_wait, tied_sync) and allreduce issue (inside the
backward); "kinds" gives every kind its own track. Metadata events name each process "rank r (dp d, stage s)"
and order processes by rank and tracks as listed.

Example:
    analysis/to_perfetto.py runs/pp2.h5 --out pp2.json     # then open pp2.json in ui.perfetto.dev
"""
import argparse
import json
import os
import sys

import tracelib

LANES = {
    "step": ("step", 0), "checkpoint": ("step", 0),
    "forward": ("compute", 1), "backward": ("compute", 1), "eval": ("compute", 1), "data": ("compute", 1),
    "optimizer": ("compute", 1),
    "send": ("comm", 2), "recv": ("comm", 2), "allreduce_wait": ("comm", 2), "tied_sync": ("comm", 2),
    "allreduce_issue": ("allreduce issue", 3),
}


def event_name(kind, step, mb):
    if kind == "forward":
        return f"F{mb}"
    if kind == "backward":
        return f"B{mb}"
    if kind == "step":
        return f"step {step}"
    if kind == "allreduce_issue":
        return f"allreduce b{mb}"
    if kind == "allreduce_wait":
        return "allreduce wait"
    if kind == "tied_sync":
        return "tied sync"
    if kind == "eval" and mb < 0:
        return "evaluation"
    if kind in ("send", "recv", "eval", "data") and mb >= 0:
        return f"{kind} {mb}"
    return kind


def convert(trace, tracks):
    ev = trace.events
    t0 = float(ev["start"].min()) if len(ev) else 0.0
    out = []
    used_tids = {}
    for e in ev:
        kind = trace.kind_name(int(e["kind"]))
        if tracks == "lanes":
            lane, tid = LANES.get(kind, (kind, 10 + int(e["kind"])))
            if kind == "eval" and int(e["microbatch"]) < 0:
                lane, tid = LANES["step"]
        else:
            lane, tid = kind, int(e["kind"])
        rank = int(e["rank"])
        used_tids[(rank, tid)] = lane
        step, mb = int(e["step"]), int(e["microbatch"])
        out.append({
            "name": event_name(kind, step, mb), "cat": kind, "ph": "X", "pid": rank, "tid": tid,
            "ts": round((float(e["start"]) - t0) * 1e6, 3),
            "dur": round((float(e["end"]) - float(e["start"])) * 1e6, 3),
            "args": {"kind": kind, "step": step, "microbatch": mb, "stage": int(e["stage"])},
        })
    meta = []
    for rank in trace.ranks():
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": trace.rank_name(rank)}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
    for (rank, tid), lane in sorted(used_tids.items()):
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": lane}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    info = {k: v for k, v in trace.meta.items() if k != "config"}
    info["trace"] = os.path.abspath(trace.path)
    info["time_origin_s"] = t0
    return {"traceEvents": meta + out, "displayTimeUnit": "ms", "metadata": info}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", metavar="TRACE", help="HDF5 trace file")
    parser.add_argument("--out", required=True, metavar="FILE.json", help="output JSON file")
    parser.add_argument("--tracks", choices=("lanes", "kinds"), default="lanes",
                        help="one track per lane (default) or per event kind")
    args = parser.parse_args(argv)
    (trace,) = tracelib.load([args.trace])
    doc = convert(trace, args.tracks)
    if os.path.dirname(args.out):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    n = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
    print(f"wrote {args.out}: {n} events from {len(trace.ranks())} ranks (open in ui.perfetto.dev)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
