#!/usr/bin/python3
"""End-to-end test of the HDF5 trace and the analysis scripts (ctest: analysis_scripts).

Makes its own data (llm.c token shards written here) and input deck in --workdir, runs small
trainings with trace.file set (2-rank pipeline 1f1b and gpipe with 4 microbatches, 2-rank data
parallel, 1 rank), reads the traces back with h5py and checks their structure, then runs every script
in analysis/ on them and checks exit status 0 and non-empty PNG/JSON outputs; plot_plan.py plots
`gpt2 plan --json --all` of the same model on 8 H100s.

Trace checks:
  * /meta matches the run (world_size, dp, pp, microbatches, schedule, tokens_per_step);
  * every event has end >= start; events are stored in rank order and every rank has events;
  * per rank, the events that do not enclose or nest in others (all but `step`, the whole
    evaluation `eval` with microbatch -1, and `allreduce_issue`, which runs inside a backward) are
    stored in start order and do not overlap (a rank does one thing at a time);
  * one `step` event per rank and step, steps 0..steps-1; /metrics has steps 1..steps and val_loss
    rows where eval_every says;
  * per stage and step exactly m forward and m backward events, microbatches 0..m-1 once each.

Usage: test_analysis.py --gpt2 build/bin/gpt2 --mpiexec mpiexec --workdir build/test-analysis
(GPT2, MPIEXEC and WORKDIR in the environment work too).
"""
import argparse
import json
import os
import re
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ANALYSIS = os.path.normpath(os.path.join(HERE, "..", "..", "analysis"))
sys.path.insert(0, ANALYSIS)
import tracelib  # noqa: E402
STEPS, MICROBATCHES, SEQ_LEN, BATCH, VOCAB = 4, 4, 16, 8, 64
TIMEOUT = 120  # seconds per command

DECK = """# Written by tests/analysis/test_analysis.py
[model]
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = {vocab}
block_size = {seq_len}

[data]
train = "{train}"
val = "{val}"
seq_len = {seq_len}

[train]
batch_size = {batch}
steps = {steps}
lr = 1e-3
eval_every = 2
eval_batches = 2
"""

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")
    return ok


def write_shard(path, tokens):
    """llm.c token shard: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def make_inputs(workdir):
    data = os.path.join(workdir, "data")
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(1234)
    # A learnable stream: a noisy counter modulo the vocabulary.
    def stream(n):
        return (np.arange(n) + rng.integers(0, 3, n)) % VOCAB
    write_shard(os.path.join(data, "train_000.bin"), stream(8192))
    write_shard(os.path.join(data, "val_000.bin"), stream(2048))
    deck = os.path.join(workdir, "deck.toml")
    with open(deck, "w") as f:
        f.write(DECK.format(vocab=VOCAB, seq_len=SEQ_LEN, batch=BATCH, steps=STEPS,
                            train=os.path.join(data, "train_*.bin"), val=os.path.join(data, "val_*.bin")))
    return deck


def run(cmd, cwd, env, echo=True):
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        check(False, f"timed out after {TIMEOUT} s: {' '.join(cmd)}")
        return None
    if p.stdout.strip() and (echo or p.returncode != 0):
        print(p.stdout.rstrip())
    check(p.returncode == 0, f"exit status {p.returncode}: {' '.join(cmd)}")
    return p


def train(args, env, deck, runs, name, ranks, sets):
    trace = os.path.join(runs, name + ".h5")
    cmd = [args.gpt2, "train", deck, "-q", "--set", f"trace.file={trace}"]
    for s in sets:
        cmd += ["--set", s]
    if ranks > 1:
        cmd = [args.mpiexec, args.np_flag, str(ranks)] + cmd
    run(cmd, args.workdir, env)
    check(os.path.isfile(trace), f"{name}: no trace written at {trace}")
    return trace


def decode(v):
    return v.decode() if isinstance(v, bytes) else v


def check_trace(path, ranks, dp, pp, m, schedule):
    name = os.path.basename(path)
    if not os.path.isfile(path):
        return
    with h5py.File(path, "r") as f:
        meta = {k: decode(v) for k, v in f["meta"].attrs.items()}
        ev = f["events"][...]
        kinds = decode(f["events"].attrs["kind_names"]).split(",")
        metrics = f["metrics"][...]
    code = {k: i for i, k in enumerate(kinds)}
    for key, want in (("world_size", ranks), ("dp", dp), ("pp", pp), ("microbatches", m),
                      ("tokens_per_step", BATCH * SEQ_LEN)):
        check(int(meta.get(key, -1)) == want, f"{name}: meta {key} = {meta.get(key)}, expected {want}")
    if pp > 1:
        check(meta.get("schedule") == schedule, f"{name}: meta schedule = {meta.get('schedule')}")
    for k in ("forward", "backward", "step", "eval", "allreduce_issue", "send", "recv"):
        check(k in code, f"{name}: kind_names lacks {k}")
    # The file describes itself: kind classes, and every rank's place in the dp x pp x tp grid.
    comm_kinds = str(meta.get("communication_kinds", "")).split(",")
    for k in ("send", "recv", "allreduce_wait", "send_wait", "scalar_sync", "tied_sync"):
        check(k in comm_kinds, f"{name}: communication_kinds lacks {k}")
    check(str(meta.get("compute_kinds", "")).split(",")[:2] == ["forward", "backward"],
          f"{name}: compute_kinds = {meta.get('compute_kinds')}")
    coords = [meta.get(k) for k in ("dp_rank", "pp_rank", "tp_rank")]
    coords = [np.atleast_1d(c).tolist() if c is not None else [] for c in coords]
    check(all(len(c) == ranks for c in coords), f"{name}: dp/pp/tp_rank arrays of lengths "
          f"{[len(c) for c in coords]}, expected {ranks}")
    if all(len(c) == ranks for c in coords):
        want = [(r // pp, r % pp, 0) for r in range(ranks)]  # tp = 1: rank = dp_rank * pp + pp_rank
        check(list(zip(*coords)) == want, f"{name}: grid coordinates {list(zip(*coords))}, expected {want}")
    check(len(ev) > 0, f"{name}: no events")
    check(bool(np.all(ev["end"] >= ev["start"])), f"{name}: an event ends before it starts")
    check(bool(np.all(np.diff(ev["rank"]) >= 0)), f"{name}: events not stored in rank order")
    check(sorted(set(ev["rank"].tolist())) == list(range(ranks)), f"{name}: ranks with events "
          f"{sorted(set(ev['rank'].tolist()))}, expected 0..{ranks - 1}")

    # Events that enclose others (step, a whole evaluation) or happen inside a forward/backward (the
    # collectives a unit's gradient or parameters start, and waiting for a gathered unit).
    nested = [code[k] for k in ("allreduce_issue", "reduce_scatter_issue", "all_gather_issue", "all_gather_wait")
              if k in code]
    wrapper = (ev["kind"] == code["step"]) | np.isin(ev["kind"], nested) | \
              ((ev["kind"] == code["eval"]) & (ev["microbatch"] < 0))
    for r in range(ranks):
        leaf = ev[(ev["rank"] == r) & ~wrapper]
        check(bool(np.all(np.diff(leaf["start"]) >= 0)), f"{name}: rank {r}: events not in start order")
        gap = leaf["start"][1:] - leaf["end"][:-1]
        check(bool(np.all(gap >= -1e-9)), f"{name}: rank {r}: {int(np.sum(gap < -1e-9))} events overlap "
              "the previous one")
        steps = np.sort(ev["step"][(ev["rank"] == r) & (ev["kind"] == code["step"])])
        check(steps.tolist() == list(range(STEPS)), f"{name}: rank {r}: step events {steps.tolist()}, "
              f"expected 0..{STEPS - 1}")
    check(metrics["step"].tolist() == list(range(1, STEPS + 1)),
          f"{name}: /metrics steps {metrics['step'].tolist()}, expected 1..{STEPS}")
    check(bool(np.all(np.isfinite(metrics["loss"]))) and bool(np.all(metrics["step_time"] > 0)),
          f"{name}: /metrics has a non-finite loss or a non-positive step time")
    val_steps = metrics["step"][metrics["val_loss"] >= 0].tolist()
    check(val_steps == [2, 4], f"{name}: val_loss rows at steps {val_steps}, expected [2, 4]")

    # Per stage (rank of each pipeline) and step: exactly m forwards and m backwards, 0..m-1 once each.
    for r in range(ranks):
        for s in range(STEPS):
            for k in ("forward", "backward"):
                mbs = ev["microbatch"][(ev["rank"] == r) & (ev["step"] == s) & (ev["kind"] == code[k])]
                check(sorted(mbs.tolist()) == list(range(m)),
                      f"{name}: rank {r} step {s}: {k} microbatches {sorted(mbs.tolist())}, expected 0..{m - 1}")


def check_png(path):
    ok = os.path.isfile(path) and os.path.getsize(path) > 2000
    if ok:
        with open(path, "rb") as f:
            ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
    check(ok, f"missing, empty or not a PNG: {path}")


def run_scripts(args, env, traces):
    py = sys.executable
    out = os.path.join(args.workdir, "plots")
    script = lambda s: os.path.join(ANALYSIS, s)  # noqa: E731
    for s in ("plot_scaling.py", "plot_pipeline.py", "plot_loss.py", "report.py", "to_perfetto.py", "plot_memory.py",
              "pipeline_gaps.py", "pipeline_replay.py"):
        p = run([py, script(s), "--help"], args.workdir, env, echo=False)
        check(p is not None and "usage" in p.stdout, f"{s} --help prints no usage")

    run([py, script("plot_memory.py"), traces["dp1"], traces["dp2"], traces["pp2_1f1b"], "--out",
         os.path.join(out, "memory.png")], args.workdir, env)
    check_png(os.path.join(out, "memory.png"))
    scaling = [traces["dp1"], traces["dp2"], traces["pp2_1f1b"]]
    run([py, script("plot_scaling.py"), *scaling, "--out", os.path.join(out, "scaling_step")], args.workdir, env)
    for f in ("scaling_time.png", "scaling_tokens_per_s.png"):
        check_png(os.path.join(out, "scaling_step", f))
    run([py, script("plot_scaling.py"), *scaling, "--group-by", "pp", "--epoch-tokens", "8192",
         "--out", os.path.join(out, "scaling_epoch")], args.workdir, env)
    for f in ("scaling_time.png", "scaling_tokens_per_s.png"):
        check_png(os.path.join(out, "scaling_epoch", f))

    p = run([py, script("plot_pipeline.py"), traces["pp2_1f1b"], traces["pp2_gpipe"], traces["dp2"],
             traces["dp2_pp2"], "--out", out], args.workdir, env)
    for name in ("pp2_1f1b", "pp2_gpipe", "dp2", "dp2_pp2"):
        check_png(os.path.join(out, f"gantt_{name}.png"))
    check_png(os.path.join(out, "pipeline_comparison.png"))
    check(p is not None and "theoretical" in p.stdout, "plot_pipeline.py prints no bubble fractions")
    run([py, script("plot_pipeline.py"), traces["pp2_1f1b"], "--step", "0", "--out", os.path.join(out, "step0")],
        args.workdir, env)
    check_png(os.path.join(out, "step0", "gantt_pp2_1f1b.png"))

    # Where the idle time goes: the ranks' compute shares of the window are tracelib's bubble's complement.
    p = run([py, script("pipeline_gaps.py"), traces["pp2_1f1b"], "--step", "1"], args.workdir, env)
    shares = [float(x) for x in re.findall(r"passes; compute ([0-9.]+),", p.stdout)] if p else []
    bubble = tracelib.measured_bubble(tracelib.Trace(traces["pp2_1f1b"]), 1)[0]
    check(len(shares) == 2 and abs(1 - sum(shares) / 2 - bubble) < 2e-3,
          f"pipeline_gaps.py: compute shares {shares} against tracelib's bubble {bubble:.4f}")

    check_replay(args, env, traces["pp2_1f1b"], args.vee_trace)

    run([py, script("plot_loss.py"), *traces.values(), "--out", out], args.workdir, env)
    check_png(os.path.join(out, "loss.png"))

    p = run([py, script("report.py"), *traces.values()], args.workdir, env)
    check(p is not None and "tokens/s" in p.stdout and "MFU" in p.stdout, "report.py table lacks columns")
    p = run([py, script("report.py"), "--json", "--peak-tflops", "2.5", *traces.values()], args.workdir, env,
            echo=False)
    if p is not None and p.returncode == 0:
        try:
            rows = json.loads(p.stdout)
            check(len(rows) == len(traces), f"report.py --json: {len(rows)} rows for {len(traces)} traces")
            for row in rows:
                check(row["tokens_per_s"] > 0 and 0 < row["mfu"] < 1 and 0 <= row["comm_fraction"] < 1,
                      f"report.py --json: implausible numbers in {row['label']}")
                if row["pp"] > 1:
                    check(0 <= row["bubble_measured"] < 1, f"report.py --json: bubble of {row['label']}")
                # Every communication kind counts: the per-kind shares add up to the total.
                by_kind = row["comm_by_kind"]
                check({"send_wait", "scalar_sync", "allreduce_wait", "send", "recv"} <= set(by_kind),
                      f"report.py --json: comm_by_kind of {row['label']} lacks kinds: {sorted(by_kind)}")
                total = sum(v["fraction"] for v in by_kind.values())
                check(abs(total - row["comm_fraction"]) < 1e-9,
                      f"report.py --json: kinds add up to {total}, comm_fraction {row['comm_fraction']}")
                # Data-parallel volume per step against theory (2 Psi for DP, about 3 Psi for ZeRO-3).
                if row["dp"] > 1:
                    vols = list(row["dp_volume_per_rank"].values())
                    check(all(abs(v - row["dp_volume_theory"]) < 0.1 for v in vols),
                          f"report.py --json: {row['label']} dp volume {vols}, theory {row['dp_volume_theory']}")
            by_label = {r["label"].split(" (")[0]: r for r in rows}
            if "dp2" in by_label and "dp2_zero3" in by_label:
                for key in ("params", "grads", "optimizer"):
                    z3 = by_label["dp2_zero3"]["memory_per_rank"]["0"][key]
                    dp = by_label["dp2"]["memory_per_rank"]["0"][key]
                    check(z3 <= 0.5 * dp + 1e-9, f"report.py --json: ZeRO-3 {key} {z3} bytes vs {dp} replicated")
        except (ValueError, KeyError, TypeError) as e:
            check(False, f"report.py --json: bad JSON ({e})")

    pf = os.path.join(out, "pp2_1f1b.json")
    run([py, script("to_perfetto.py"), traces["pp2_1f1b"], "--out", pf], args.workdir, env)
    try:
        with open(pf) as f:
            doc = json.load(f)
        events = doc["traceEvents"]
        x = [e for e in events if e["ph"] == "X"]
        with h5py.File(traces["pp2_1f1b"], "r") as f:
            n = len(f["events"])
        check(len(x) == n, f"to_perfetto.py: {len(x)} complete events for {n} trace events")
        check(all(e["dur"] >= 0 and e["ts"] >= 0 for e in x), "to_perfetto.py: negative ts or dur")
        names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        check(names == {"rank 0 (dp 0, stage 0)", "rank 1 (dp 0, stage 1)"},
              f"to_perfetto.py: process names {sorted(names)}")
        check(any(e["name"] == "F3" for e in x) and any(e["name"] == "B3" for e in x),
              "to_perfetto.py: no F3/B3 events")
    except (OSError, ValueError, KeyError) as e:
        check(False, f"to_perfetto.py: unreadable output {pf} ({e})")


def check_replay(args, env, trace, vee_trace):
    """pipeline_replay.py: the replay of a schedule with fixed pass times is its theory; of a trace
    without link delays, at most the measured bubble (it removes the executor's costs, nothing else;
    with the median link delay it may exceed it where messages came faster)."""
    import pipeline_replay as pr
    # GPipe on 2 stages, m 4, forward 1 and backward 2: bubble (p - 1) / (m + p - 1) = 0.2.
    gpipe = [[("forward", mb, s, 0, 0) for mb in range(4)] + [("backward", mb, s, 0, 0) for mb in range(4)]
             for s in (0, 1)]
    times = [[1.0] * 4 + [2.0] * 4 for _ in (0, 1)]
    got = pr.bubble_of(pr.replay(gpipe, 2, times, 0.0))
    check(abs(got - 0.2) < 1e-12, f"pipeline_replay: GPipe p 2 m 4 replays to bubble {got}, theory 0.2")
    # A link delay of half a forward adds one delay to each of the two waits a stage has.
    got = pr.bubble_of(pr.replay(gpipe, 2, times, 0.5))
    check(abs(got - (1 - 24 / (2 * 16))) < 1e-12, f"pipeline_replay: with links, bubble {got}, expected 0.25")
    check([pr.virtual_stage("vee", 2, r, c) for r in (0, 1) for c in (0, 1)] == [0, 3, 1, 2]
          and [pr.virtual_stage("loop", 2, r, c) for r in (0, 1) for c in (0, 1)] == [0, 2, 1, 3],
          "pipeline_replay: virtual stages of the loop and the vee")
    got = pr.pass_time_cv({"a": [1.0, 3.0], "b": [2.0, 2.0], "c": [5.0]})
    check(abs(got - 0.5 ** 0.5 / 2) < 1e-12, f"pipeline_replay: pass-time variation {got}, expected {0.5 ** 0.5 / 2}")
    for path, where in ((trace, "loop"), (vee_trace, "vee")):
        t = tracelib.Trace(path)
        check(t.meta.get("placement") == where, f"{path}: meta placement {t.meta.get('placement')}, expected {where}")
        try:
            b = pr.replayed_bubbles(t, 1)
        except ValueError as e:  # a wrong placement deadlocks the replay
            check(False, f"pipeline_replay on {path}: {e}")
            continue
        measured = tracelib.mean_bubble(t, 1)
        check(abs(b["measured"] - measured) < 1e-12 and 0 <= b["each"] < 1 and 0 <= b["mean"] < 1,
              f"pipeline_replay on {path}: {b}, tracelib's bubble {measured:.4f}")
        # Without link delays no pass can start later than it did: a lower bound, whatever the load.
        bound = pr.replayed_bubbles(t, 1, link=0.0)["each"]
        check(0 <= bound <= measured + 1e-9, f"pipeline_replay on {path}: {bound:.6f} replayed without link "
                                             f"delays, above the measured {measured:.6f}")
    p = run([sys.executable, os.path.join(ANALYSIS, "pipeline_replay.py"), trace], args.workdir, env)
    check(p is not None and "replayed with each pass's time" in p.stdout, "pipeline_replay.py prints the replays")


def check_plot_plan(args, env, deck):
    """analysis/plot_plan.py over a small plan: gpt2 plan --json --all of the test's model on 8 H100s."""
    py = sys.executable
    plan = os.path.join(args.workdir, "plots", "plan.json")
    os.makedirs(os.path.dirname(plan), exist_ok=True)
    hw = os.path.join(HERE, "..", "..", "inputs", "hardware", "h100.toml")
    p = subprocess.run([args.gpt2, "plan", deck, "--hardware", hw, "--gpus", "8", "--global-batch", "64", "--json",
                        "--all"], cwd=args.workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        check(False, f"gpt2 plan --json --all of the test's model failed: {p.stderr.strip()}")
        return
    with open(plan, "w") as f:
        f.write(p.stdout)
    p = run([py, os.path.join(ANALYSIS, "plot_plan.py"), "--help"], args.workdir, env, echo=False)
    check(p is not None and "usage" in p.stdout, "plot_plan.py --help prints no usage")
    png = os.path.join(args.workdir, "plots", "plan.png")
    p = run([py, os.path.join(ANALYSIS, "plot_plan.py"), plan, "--out", png], args.workdir, env)
    check_png(png)
    check(p is not None and "Pareto front" in p.stdout and "chosen" in p.stdout,
          "plot_plan.py names no Pareto front or chosen layout")
    p = subprocess.run([py, os.path.join(ANALYSIS, "plot_plan.py"), deck, "--out", png], cwd=args.workdir, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    check(p.returncode != 0 and "not the JSON of gpt2 plan" in p.stderr, "plot_plan.py accepts a file that is no plan")


def check_checkpoint_report(args, env, folder):
    """analysis/checkpoint_report.py on the ZeRO-3 run's HDF5 checkpoint: its step, the layout that
    wrote it, every tensor at its global shape; a PNG; a trace is refused (exit 2)."""
    script = os.path.join(ANALYSIS, "checkpoint_report.py")
    png = os.path.join(args.workdir, "checkpoint_rms.png")
    p = subprocess.run([sys.executable, script, folder, "--json", "--png", png], env=env, capture_output=True,
                       text=True, timeout=TIMEOUT)
    if not check(p.returncode == 0, f"checkpoint_report: rc {p.returncode}: {p.stderr[-400:]}"):
        return
    rep = json.loads(p.stdout)
    shapes = {t["name"]: t["shape"] for t in rep["tensors"]}
    check(rep["step"] == STEPS and rep["written_by"] == {"dp": 2, "pp": 1, "tp": 1, "zero": 3},
          f"checkpoint_report: step {rep['step']}, written by {rep['written_by']}")
    check(shapes.get("wte") == [64, 32] and len(shapes) == 4 + 12 * 2, f"checkpoint_report: tensors {shapes}")
    check_png(png)
    bad = subprocess.run([sys.executable, script, os.path.join(args.workdir, "runs", "dp1.h5")], env=env,
                         capture_output=True, text=True, timeout=TIMEOUT)
    check(bad.returncode == 2 and "not a gpt2-kokkos checkpoint" in bad.stderr,
          f"checkpoint_report on a trace: rc {bad.returncode}: {bad.stderr[-300:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpt2", default=os.environ.get("GPT2"), help="path of the gpt2 executable")
    parser.add_argument("--mpiexec", default=os.environ.get("MPIEXEC", "mpiexec"), help="MPI launcher")
    parser.add_argument("--np-flag", default="-n", help="launcher flag for the number of ranks (default -n)")
    parser.add_argument("--workdir", default=os.environ.get("WORKDIR"), help="scratch folder (made if missing)")
    args = parser.parse_args()
    if not args.gpt2 or not args.workdir:
        parser.error("--gpt2 and --workdir are required (or GPT2 and WORKDIR in the environment)")
    args.gpt2 = os.path.abspath(args.gpt2)
    args.workdir = os.path.abspath(args.workdir)
    runs = os.path.join(args.workdir, "runs")
    os.makedirs(runs, exist_ok=True)
    for f in os.listdir(runs):  # traces of an earlier run of this test
        if f.endswith(".h5"):
            os.remove(os.path.join(runs, f))

    env = dict(os.environ)
    env["MPLBACKEND"] = "Agg"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("GPT2_COMM_TIMEOUT", "120")

    deck = make_inputs(args.workdir)
    pipe = ["parallel.pp=2", f"parallel.microbatches={MICROBATCHES}"]
    traces = {
        "pp2_1f1b": train(args, env, deck, runs, "pp2_1f1b", 2, pipe + ["parallel.schedule=1f1b"]),
        "pp2_gpipe": train(args, env, deck, runs, "pp2_gpipe", 2, pipe + ["parallel.schedule=gpipe"]),
        "dp2": train(args, env, deck, runs, "dp2", 2, ["parallel.dp=2"]),
        "dp1": train(args, env, deck, runs, "dp1", 1, []),
        "dp2_pp2": train(args, env, deck, runs, "dp2_pp2", 4, ["parallel.dp=2"] + pipe),
        "dp2_zero3": train(args, env, deck, runs, "dp2_zero3", 2,
                           ["parallel.dp=2", "parallel.zero=3", f"checkpoint.dir={os.path.join(runs, 'ck_zero3')}",
                            "checkpoint.format=h5"]),
    }
    # A V (zb-v: rank 0 holds the first and the last virtual stage), for the replay's placement.
    vee = train(args, env, deck, runs, "pp2_zbv", 2, pipe + ["parallel.schedule=zb-v", "model.n_layer=4"])
    check_checkpoint_report(args, env, os.path.join(runs, "ck_zero3"))
    check_trace(traces["pp2_1f1b"], 2, 1, 2, MICROBATCHES, "1f1b")
    check_trace(traces["pp2_gpipe"], 2, 1, 2, MICROBATCHES, "gpipe")
    check_trace(traces["dp2"], 2, 2, 1, 1, None)
    check_trace(traces["dp1"], 1, 1, 1, 1, None)
    check_trace(traces["dp2_pp2"], 4, 2, 2, MICROBATCHES, "1f1b")
    check_trace(traces["dp2_zero3"], 2, 2, 1, 1, None)
    args.vee_trace = vee
    if all(os.path.isfile(t) for t in list(traces.values()) + [vee]):
        run_scripts(args, env, traces)
    check_plot_plan(args, env, deck)

    if failures:
        print(f"\n{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
        return 1
    print("\nall analysis checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
