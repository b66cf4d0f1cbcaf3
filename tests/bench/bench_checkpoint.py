#!/usr/bin/python3
"""Checkpoint cost at GPT-2 124M (or another model deck): write bandwidth against the disk's own
O_DIRECT sequential rate and against memcpy, where the writer's time goes, the largest rank's peak
memory against the same run without checkpoints, and the time of the steps that checkpoint against
the others -- all in one run of this script.

Each layout (one rank; dp 2 ZeRO-3; tp 2) trains `--steps` steps of B 4 x T 64 on random tokens, once
without checkpoints and once for each way of writing them (checkpoint.every = 2): h5 (every rank
writes its part, now) and h5 with checkpoint.async = true (a copy, then a background thread). From
the trace: a step's iteration time is from its start to the next step's start (so it holds the
checkpoint written after it); the write time is the `checkpoint` event (synchronous) or the
background `checkpoint_write`; the phases (rank 0's metadata, copy + checksum, waiting for the disk,
finish) from the run's checkpoint lines. Then the async case the issue sizes: a ~0.6 GB state
(n_layer 2), a checkpoint every 4 steps, the step after each against the plain steps.

  tests/bench/bench_checkpoint.py --gpt2 build/bin/gpt2 --workdir /tmp/ckbench [--json out.json]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RSS_WRAPPER = """
import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], close_fds=False)  # (the MPI launcher's descriptors)
with open(sys.argv[1] + "." + __import__("os").environ.get("PMI_RANK", "0"), "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(rc)
"""


def disk_rate(folder, mib=1536):
    """Sequential write rate of `folder`'s file system: dd with O_DIRECT and fsync (bytes/s)."""
    path = os.path.join(folder, "dd.test")
    t0 = time.time()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=16M", f"count={mib // 16}", "oflag=direct",
                    "conv=fsync"], check=True, capture_output=True)
    rate = mib * 2**20 / (time.time() - t0)
    os.remove(path)
    return rate


def memcpy_rate(mib=1024):
    """A large copy's rate in this process (numpy, one thread): bytes/s, best of 3."""
    import numpy as np
    a = np.ones(mib * 2**18, dtype=np.float32)
    b = np.empty_like(a)
    best = 1e30
    for _ in range(3):
        t0 = time.time()
        np.copyto(b, a)
        best = min(best, time.time() - t0)
    return a.nbytes / best


PHASES = re.compile(r"checkpoint: \S+ \(rank 0: ([0-9.]+) GB; metadata ([0-9.]+) s, copy \+ checksum ([0-9.]+) s, "
                    r"disk ([0-9.]+) s, finish ([0-9.]+) s\)")


def read_trace(path):
    import h5py
    with h5py.File(path, "r") as f:
        kinds = f["meta"].attrs["event_kinds"]
        names = (kinds.decode() if isinstance(kinds, bytes) else kinds).split(",")
        ev = f["events"][()]
    return names, ev


def measure(args, name, ranks, sets):
    w = os.path.join(args.workdir, name)
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    trace = os.path.join(w, "trace.h5")
    rss = os.path.join(w, "rss")
    wrapper = os.path.join(w, "rss.py")
    with open(wrapper, "w") as f:
        f.write(RSS_WRAPPER)
    cmd = [args.gpt2, "train", args.deck, "-q", "--set", f"data.train={args.shard}", "--set", "data.val=",
           "--set", "data.tokenizer=byte", "--set", "data.seq_len=64", "--set", "train.batch_size=4",
           "--set", f"train.steps={args.steps}", "--set", "train.eval_every=0", "--set", "train.sample_every=0",
           "--set", "train.tf32=false", "--set", "parallel.microbatches=1", "--set", f"trace.file={trace}",
           "--set", "checkpoint.dir=" + (os.path.join(w, "ck") if sets else "")]
    for s in sets:
        cmd += ["--set", s]
    full = ([args.mpiexec, "-n", str(ranks)] if ranks > 1 else []) + ["/usr/bin/python3", wrapper, rss] + cmd
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)  # BLAS CPU detection on, as a user runs it
    t0 = time.time()
    p = subprocess.run(full, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{name}: exit {p.returncode}: {p.stderr[-2000:]}")
    wall = time.time() - t0
    phases = [tuple(float(x) for x in m.groups()) for m in PHASES.finditer(p.stdout)]
    names, ev = read_trace(trace)

    def of(kind):
        return ev[ev["kind"] == names.index(kind)]

    steps = of("step")
    r0 = steps[steps["rank"] == 0]
    starts = sorted(r0["start"])
    # (a step event's `step` counts from 0: the event of step s + 1)
    iters = {int(s) + 1: starts[i + 1] - starts[i] for i, s in enumerate(sorted(r0["step"])[:-1])}
    out = {"name": name, "ranks": ranks, "wall_s": wall, "iteration_s": iters,
           "peak_rss_bytes": max(int(open(rss + "." + str(r)).read()) for r in range(ranks))}
    if phases:  # the mean over checkpoints of rank 0's phases
        out["phases_s"] = {k: statistics.mean(ph[i + 1] for ph in phases)
                           for i, k in enumerate(("metadata", "copy_checksum", "disk", "finish"))}
    ck_files = [f for f in os.listdir(os.path.join(w, "ck"))] if sets else []
    if ck_files:
        sizes = [os.path.getsize(os.path.join(w, "ck", f)) for f in ck_files if f.startswith("ckpt_")]
        out["checkpoint_bytes"] = max(sizes)
        for kind in ("checkpoint", "checkpoint_stage", "checkpoint_write"):
            e = of(kind)
            if len(e):  # the slowest rank's, per checkpoint, then the mean over checkpoints
                per = {}
                for x in e:
                    per[int(x["step"])] = max(per.get(int(x["step"]), 0), x["end"] - x["start"])
                out[kind + "_s"] = statistics.mean(per.values())
    shutil.rmtree(os.path.join(w, "ck"), ignore_errors=True)
    return out


def report_layout(args, results, rate, copy_rate, lname, ranks, lsets):
    every = ["checkpoint.every=2"]
    modes = [("none", []), ("h5", every + ["checkpoint.format=h5"]),
             ("h5 async", every + ["checkpoint.format=h5", "checkpoint.async=true"])]
    base = None
    for mname, msets in modes:
        r = measure(args, f"{lname}_{mname}".replace(" ", "_"), ranks, lsets + msets)
        r.update(layout=lname, mode=mname)
        results["runs"].append(r)
        it = r["iteration_s"]
        if base is None:
            base = r
            base_iter = statistics.median(it[s] for s in it if s > 1)
            print(f"{lname}, no checkpoints: iteration {base_iter:.3f} s (median), peak RSS "
                  f"{r['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
            continue
        ck_steps = [s for s in it if s % 2 == 0]
        other = [it[s] for s in it if s % 2 == 1 and s > 1]
        write = r.get("checkpoint_s", 0) or r.get("checkpoint_write_s", 0)
        ck_iter = statistics.mean(it[s] for s in ck_steps)
        r.update(checkpoint_iteration_s=ck_iter, other_iteration_s=statistics.median(other),
                 vs_no_checkpoint=ck_iter / base_iter, vs_other_steps=ck_iter / statistics.median(other),
                 write_bytes_per_s=r["checkpoint_bytes"] / write, vs_disk=r["checkpoint_bytes"] / write / rate,
                 vs_memcpy=r["checkpoint_bytes"] / write / copy_rate, rss_vs_none=r["peak_rss_bytes"] / base["peak_rss_bytes"])
        stage = f", staging {r['checkpoint_stage_s']:.2f} s" if "checkpoint_stage_s" in r else ""
        ph = r.get("phases_s")
        phases = (f" [rank 0: metadata {ph['metadata']:.2f} s, copy + checksum {ph['copy_checksum']:.2f} s, disk "
                  f"{ph['disk']:.2f} s, finish {ph['finish']:.2f} s]") if ph else ""
        print(f"{lname}, {mname}: write {write:.2f} s ({r['write_bytes_per_s'] / 1e9:.2f} GB/s = {r['vs_disk']:.2f}x "
              f"the disk, {r['vs_memcpy']:.2f}x memcpy){stage}{phases}; checkpointing steps {ck_iter:.3f} s = "
              f"{r['vs_other_steps']:.2f}x the other steps, {r['vs_no_checkpoint']:.2f}x a run without; peak RSS "
              f"{r['peak_rss_bytes'] / 1e9:.2f} GB = {r['rss_vs_none']:.2f}x", flush=True)


def report_async_interval(args, results):
    """The async case the issue sizes: a ~0.6 GB state (n_layer 2), a checkpoint every 4 steps; the
    iteration that checkpoints (its staging copy) and the one after it (the background write beside
    it) against the same run's deck without checkpoints (steps after the first checkpoint only)."""
    model = ["model.n_layer=2"]
    plain = measure(args, "async_plain", 1, model)
    r = measure(args, "async_every4", 1, model + ["checkpoint.every=4", "checkpoint.async=true"])
    base = statistics.median(plain["iteration_s"][s] for s in plain["iteration_s"] if s > 4)
    it = r["iteration_s"]
    ck = [s for s in it if s % 4 == 0 and s > 4 and s + 1 in it]
    at = statistics.mean(it[s] for s in ck) / base
    after = statistics.mean(it[s + 1] for s in ck) / base
    r.update(layout="1 rank, n_layer 2", mode="h5 async every 4", plain_s=base, checkpointing_vs_plain=at,
             next_vs_plain=after)
    results["runs"] += [plain, r]
    print(f"async, {r.get('checkpoint_bytes', 0) / 1e9:.2f} GB a checkpoint every 4 steps: the iteration that "
          f"checkpoints {at:.2f}x a plain one ({base:.3f} s), the one after it {after:.2f}x", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--workdir", required=True, help="on the file system to measure")
    ap.add_argument("--deck", default=os.path.join(HERE, "..", "..", "inputs", "gpt2-124M.toml"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--async-steps", type=int, default=17)
    ap.add_argument("--only", default="", help="comma-separated: 1rank, dp2, tp2, async (default: all)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    args.shard = os.path.join(args.workdir, "train.bin")
    import numpy as np
    gpt2test.write_shard(args.shard, np.random.default_rng(0).integers(0, 50257, 200000))

    rate, copy_rate = disk_rate(args.workdir), memcpy_rate()
    print(f"disk: {rate / 1e9:.2f} GB/s sequential (dd, O_DIRECT + fsync); memcpy {copy_rate / 1e9:.2f} GB/s", flush=True)
    results = {"disk_bytes_per_s": rate, "memcpy_bytes_per_s": copy_rate, "runs": []}
    only = set(args.only.split(",")) if args.only else {"1rank", "dp2", "tp2", "async"}
    layouts = [("1rank", "1 rank", 1, []), ("dp2", "dp 2 ZeRO-3", 2, ["parallel.dp=2", "parallel.zero=3"]),
               ("tp2", "tp 2", 2, ["parallel.tp=2"])]
    for key, lname, ranks, lsets in layouts:
        if key in only:
            report_layout(args, results, rate, copy_rate, lname, ranks, lsets)
    if "async" in only:
        steps = args.steps
        args.steps = args.async_steps
        report_async_interval(args, results)
        args.steps = steps
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
