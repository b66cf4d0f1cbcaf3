#!/usr/bin/python3
"""Every pipeline schedule side by side on one model: the bubble measured from traces against the
schedule's own theory, the most microbatch-chunks a rank holds, and the point-to-point messages
and bytes a step moves -- for p 2 and 4 and m 8 and 16, in one run of this script.

Each case trains `--steps` steps of an 8-block model (n_embd 256, T 64, one sequence a
microbatch) with a trace, --rounds times (interleaved; the table gives each column's median and the
median of the ratios); the measured bubble is tracelib's (a pipeline's compute window minus its
ranks' compute), averaged over the steps after the first. Two theories: the schedule's own
(/meta bubble_theory: simulated with the model's pass costs and equal stages, as the trainer orders
it) and the same schedule simulated with this run's measured pass times and links (`gpt2 simulate
--calibrate`: unequal stages -- the head and the loss on the last -- and messages included), which
was what the measured bubble was held to until 2026-11-27. Two replays of the traced passes
(analysis/pipeline_replay.py): the schedule's order with each pass as long as it ran -- what the
measured bubble is held to: its excess is the executor's -- and with each rank's mean pass times (the
passes' variation removed); cv is how much a pass's time varies (the mean coefficient of variation
of each rank's passes of one kind and stage over the steps), the cause of the gap between the two
replays. interleaved and interleaved-zb run 2 chunks a rank. With more ranks than cores (p 4 here
on 2) the ranks share cores, which the measured bubble also shows.

  tests/bench/bench_schedules.py --gpt2 build/bin/gpt2 --workdir /tmp/schedules [--json out.json]
      [--rounds 1] [--n-embd 256] [--seq-len 64] [--ps 2,4] [--ms 8,16] [--schedules 1f1b,zb-h1,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "analysis"))
import gpt2test  # noqa: E402
import pipeline_replay  # noqa: E402
import tracelib  # noqa: E402

SCHEDULES = ["naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "interleaved-zb", "dualpipev"]


def run_case(args, sched, p, m):
    w = os.path.join(args.workdir, f"{sched}_p{p}_m{m}")
    os.makedirs(w, exist_ok=True)
    trace = os.path.join(w, "trace.h5")
    v = 2 if sched.startswith("interleaved") else 1
    deck = {
        "model": {"n_layer": 8, "n_head": 4, "n_embd": args.n_embd, "vocab_size": 256, "block_size": args.seq_len},
        "data": {"train": args.shard, "seq_len": args.seq_len},
        "train": {"batch_size": m, "steps": args.steps, "lr": 1e-3, "eval_every": 0, "sample_every": 0},
        "parallel": {"pp": p, "microbatches": 1 if sched == "naive" else m, "schedule": sched, "virtual_stages": v},
        "trace": {"file": trace},
    }
    if sched == "naive":
        deck["train"]["batch_size"] = 1
    path = os.path.join(w, "deck.toml")
    gpt2test.write_deck(path, deck)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", KOKKOS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    r = subprocess.run([args.mpiexec, "-n", str(p), args.gpt2, "train", path, "-q"], capture_output=True, text=True,
                       env=env, timeout=600)
    if r.returncode != 0:
        return {"schedule": sched, "p": p, "m": m, "error": r.stderr[-500:]}
    sim = subprocess.run([args.gpt2, "simulate", path, "--calibrate", trace, "--json"], capture_output=True, text=True,
                         timeout=120)
    calibrated = json.loads(sim.stdout)["bubble"] if sim.returncode == 0 else float("nan")
    t = tracelib.Trace(trace)
    steps = t.train_steps(1)
    measured = statistics.mean(tracelib.measured_bubble(t, s)[0] for s in steps)
    replayed = pipeline_replay.replayed_bubbles(t, 1)
    sends = t.events[t.mask(["send"], step=steps[0])]
    return {"schedule": sched, "p": p, "m": deck["parallel"]["microbatches"], "v": v,
            "bubble_measured": measured, "bubble_theory": float(t.meta["bubble_theory"]), "bubble_calibrated": calibrated,
            "bubble_replayed": replayed["each"], "bubble_replayed_mean": replayed["mean"],
            "pass_cv": replayed["cv"],
            "peak_microbatches": [int(x) for x in t.meta.get("peak_microbatches", [])],
            "messages": int(len(sends)), "message_bytes": int(sends["bytes"].sum()),
            "tokens_per_s": t.tokens_per_s(1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1, help="runs of every case, interleaved; the table gives medians")
    ap.add_argument("--json", default="")
    ap.add_argument("--n-embd", type=int, default=256, help="the model's width (passes grow with its square)")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--ps", default="2,4", help="pipeline sizes, comma-separated")
    ap.add_argument("--ms", default="8,16", help="microbatch counts, comma-separated")
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    args.shard = os.path.join(args.workdir, "train.bin")
    gpt2test.write_shard(args.shard, gpt2test.learnable_tokens(200000, 256))
    cases = [(sched, p, m) for p in map(int, args.ps.split(",")) for m in map(int, args.ms.split(","))
             for sched in args.schedules.split(",")]
    rows = []
    for k in range(args.rounds):  # every case once a round: a slow minute of the machine hits them all
        for sched, p, m in cases:
            r = run_case(args, sched, p, m)
            r["round"], r["case"] = k, [sched, p, m]
            rows.append(r)
            if "error" in r:
                print(f"{sched:15s} {p:2d} {m:3d} error: {r['error'][:200]}", flush=True)
        print(f"round {k + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'schedule':15s} {'p':>2s} {'m':>3s} {'bubble':>7s} {'theory':>7s} {'calib.':>7s} {'ratio':>6s} "
          f"{'replay':>7s} {'mean':>7s} {'ratio':>6s} {'cv':>4s} "
          f"{'peak mb/rank':>14s} {'msgs':>5s} {'MiB':>6s}", flush=True)
    for sched, p, m in cases:
        mine = [r for r in rows if r["case"] == [sched, p, m] and "error" not in r]
        if not mine:
            continue
        med = {key: statistics.median(r[key] for r in mine)
               for key in ("bubble_measured", "bubble_theory", "bubble_calibrated", "bubble_replayed", "bubble_replayed_mean",
                           "pass_cv")}
        ratio = statistics.median(r["bubble_measured"] / r["bubble_calibrated"] for r in mine if r["bubble_calibrated"] > 0)
        replay_ratio = statistics.median(r["bubble_measured"] / r["bubble_replayed"] for r in mine)
        r = mine[0]
        print(f"{sched:15s} {p:2d} {r['m']:3d} {med['bubble_measured']:7.3f} {med['bubble_theory']:7.3f} "
              f"{med['bubble_calibrated']:7.3f} {ratio:6.2f} {med['bubble_replayed']:7.3f} "
              f"{med['bubble_replayed_mean']:7.3f} {replay_ratio:6.2f} {100 * med['pass_cv']:3.0f}% "
              f"{'/'.join(map(str, r['peak_microbatches'])):>14s} {r['messages']:5d} "
              f"{r['message_bytes'] / 2**20:6.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
