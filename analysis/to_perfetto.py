#!/usr/bin/python3
"""Convert a trace to the Chrome trace event format (JSON), for ui.perfetto.dev or chrome://tracing.

Every event becomes a complete event (ph "X") with pid = rank and ts/dur in microseconds since the
earliest event. Names: a compute pass is "F3"/"B3"/"W3" for microbatch 3 ("F3.1" on the rank's
pipeline chunk 1); a data-parallel collective's issue "allreduce b0" (gradient bucket 0); a whole
optimizer step "step 7" (0-based); the whole evaluation "evaluation"; any other kind its name with
spaces for underscores, followed by the microbatch where it has one ("recv 3", "allreduce wait").
args carry kind, step, microbatch, stage, chunk and unit.

Threads (--tracks): "lanes" (default) puts each rank's events on named tracks chosen from what the
trace says of each kind (/meta kind_display, compute_kinds, communication_kinds):
  step       kinds displayed as a whole step, checkpoints and the whole evaluation
  compute    the compute kinds, the other kinds drawn in a rank's row (data loading, the optimizer)
             and the evaluation's microbatches
  comm       communication kinds drawn in a rank's row (pipeline transfers, waits for collectives)
  one track per "lane" kind, named after it (collectives issued inside a compute pass)
  units      model units inside a pass (trace.units)
  detail     kinds left off the Gantt chart (short waits and reductions)
"kinds" gives every kind its own track. Metadata events name each process "rank r (dp d, stage s)"
and order processes by rank and tracks as listed.

Example:
    analysis/to_perfetto.py runs/pp2.h5 --out pp2.json     # then open pp2.json in ui.perfetto.dev
"""
import argparse
import json
import os
import sys

import tracelib


def event_name(trace, kind, step, mb, chunk):
    label = trace.pass_label(kind, mb, chunk)
    if label:
        return label
    if kind == "step":
        return f"step {step}"
    if kind == "eval" and mb < 0:
        return "evaluation"
    words = kind.replace("_", " ")
    if kind in trace.dp_collective_kinds and mb >= 0:
        return f"{words.replace(' issue', '')} b{mb}"
    return f"{words} {mb}" if mb >= 0 else words


def lane_tracks(trace):
    """{kind: (track name, track id)} for --tracks lanes, from the trace's description of its kinds."""
    lanes = trace.kinds_with_display("lane")
    units, detail = 3 + len(lanes), 4 + len(lanes)
    tracks = {}
    for code, kind in enumerate(trace.kind_names):
        display, cls = trace.kind_display(kind), trace.kind_class(kind)
        if display == "step" or kind == "checkpoint":
            tracks[kind] = ("step", 0)
        elif display == "lane":
            tracks[kind] = (kind.replace("_", " "), 3 + lanes.index(kind))
        elif cls == "compute" or (display == "row" and cls == "other"):
            tracks[kind] = ("compute", 1)
        elif display == "row":
            tracks[kind] = ("comm", 2)
        elif display == "unit":
            tracks[kind] = ("units", units)
        elif display == "detail":
            tracks[kind] = ("detail", detail)
        else:  # a display this script does not know: a track of its own
            tracks[kind] = (kind, 10 + detail + code)
    # The evaluation's microbatches beside the training passes (the whole evaluation: step track).
    if "eval" in tracks:
        tracks["eval"] = ("compute", 1)
    return tracks


def convert(trace, tracks):
    ev = trace.events
    t0 = float(ev["start"].min()) if len(ev) else 0.0
    out = []
    used_tids = {}
    tracks_of_kind = lane_tracks(trace)
    for e in ev:
        kind = trace.kind_name(int(e["kind"]))
        step, mb, chunk = int(e["step"]), int(e["microbatch"]), int(e["chunk"])
        if tracks == "lanes":
            lane, tid = tracks_of_kind.get(kind, (kind, 100 + int(e["kind"])))
            if kind == "eval" and mb < 0:
                lane, tid = tracks_of_kind["step"]
        else:
            lane, tid = kind, int(e["kind"])
        rank = int(e["rank"])
        used_tids[(rank, tid)] = lane
        out.append({
            "name": event_name(trace, kind, step, mb, chunk), "cat": kind, "ph": "X", "pid": rank, "tid": tid,
            "ts": round((float(e["start"]) - t0) * 1e6, 3),
            "dur": round((float(e["end"]) - float(e["start"])) * 1e6, 3),
            "args": {"kind": kind, "step": step, "microbatch": mb, "stage": int(e["stage"]), "chunk": chunk,
                     "unit": int(e["unit"])},
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
