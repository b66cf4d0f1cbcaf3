#!/usr/bin/python3
"""Slow ranks named while the run goes (ctest: stragglers). Rank 1 of a dp 2 run is slowed from
outside the program -- stopped half the time by SIGSTOP / SIGCONT from this test, its compute about
2-3x its peer's -- and is named (its line, its {"straggler": ...} JSON object, a `straggler` event in its own
trace) within two report intervals; rank 0 never is. The same run left alone names nobody (at a ratio
of 2: sharing one CPU, the two ranks' compute differs by up to 1.25x on its own, and by 1.47-1.63x
once among the suite's other tests). A memory limit below what a rank holds (train.memory_limit_mb)
names every rank once, after the first step.
The end's table has each rank's compute, waits and peak memory. train.straggler_ratio <= 1 is bad
input naming the key.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402
from rankprocs import Job, run_slowed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis"))
from tracelib import Trace  # noqa: E402

EVERY = 20
SLOW = gpt2test.SLOW_RANK


def one_cpu():
    """Both ranks on one CPU, this process's last: a box's CPUs may differ (a virtual machine's can
    run 1.7x apart), and a clean run on unequal cores rightly names the rank on the slower one."""
    return ["taskset", "-c", str(max(os.sched_getaffinity(0)))]


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    P = lambda *n: os.path.join(w, *n)  # noqa: E731
    c = gpt2test.Checks()
    gpt2test.write_shard(P("train.bin"), gpt2test.learnable_tokens(40000, 64))
    # Steps of ~10-30 ms on this kind of box: several stop/continue cycles a step.
    deck = gpt2test.tiny_deck(P("train.bin"), train__steps=4 * EVERY, train__batch_size=16,
                              train__straggler_every=EVERY, parallel__dp=2,
                              model__n_embd=64, model__n_layer=4, model__block_size=64, data__seq_len=64)
    gpt2test.write_deck(P("dp2.toml"), deck)
    base = [args.gpt2, "train", P("dp2.toml")]

    # Left alone: nobody named.
    # (Two ranks time-slicing one CPU end up to 1.25x apart on this kind of box, the one that waits
    # taking turns from the one that computes: a real difference, not what this checks. Among the
    # suite's other tests one run was 1.47-1.63x apart (2026-12-02, a 2-vCPU EPYC); the slowed rank
    # below is 2-3.4x. 2 here.)
    r = gpt2test.run(one_cpu() + [args.mpiexec, "-n", "2"] + base +
                     ["--metrics-jsonl", P("clean.jsonl"), "--set", "train.straggler_ratio=2"], timeout=300)
    c.check(r.rc == 0, f"the clean run: exit {r.rc}\n{r.out}\n{r.err}")
    c.check(not gpt2test.jsonl_objects(P("clean.jsonl"), "straggler"), f"a clean run names nobody:\n{r.out}")  # (run() checks the lines)
    table = [line for line in r.out.splitlines() if line.strip().startswith("compute ")]
    c.check(len(table) == 2 and all("waits" in t and "peak memory" in t for t in table),
            f"the end's table: compute, waits and memory of each rank:\n{r.out}")

    # Rank 1 stopped half the time.
    job = Job(args, "slow", [*one_cpu(), *base, "--metrics-jsonl", P("slow.jsonl"), "--set",
                             f"trace.file={P('slow.h5')}"], 2, {})
    ranks = run_slowed(job, 2, 1)
    out, err = job.output()
    c.check(ranks is not None, "found the ranks' processes")
    c.check(job.proc.returncode == 0, f"the slowed run: exit {job.proc.returncode}\n{out}\n{err}")
    named = gpt2test.jsonl_objects(P("slow.jsonl"), "straggler")
    c.check(named and all(s["rank"] == 1 for s in named), f"rank 1 named, and only rank 1: {named}\n{out}")
    if named:
        first = named[0]
        c.check(first["steps"] == [2, 2 * EVERY] and first["ratio"] > 1.2 and first["coords"]["dp"] == 1
                and first["host"] and first["device"], f"named after its second slow interval (steps 2-{2 * EVERY}; step 1 is not timed), with where it runs: {first}")
    lines = [line for line in out.splitlines() if line.startswith(SLOW)]
    c.check(lines and all(line.startswith(SLOW + " 1 (host ") and "dp 1, stage 0" in line and "over steps" in line
                          for line in lines), f"the printed lines name rank 1 only:\n{out}")
    if os.path.exists(P("slow.h5")):
        t = Trace(P("slow.h5"))
        ev = t.events[t.mask(["straggler"])]
        c.check(len(ev) == len(named) and set(int(x) for x in ev["rank"]) <= {1},
                f"one straggler event in rank 1's trace a naming: {len(ev)} events, ranks {set(ev['rank'])}")

    # A memory limit every rank is past: each named once, after step 1.
    r = gpt2test.run(base + ["--metrics-jsonl", P("mem.jsonl"), "--set", "train.memory_limit_mb=8",
                             "--set", "train.steps=3"], 2, args.mpiexec, timeout=300)
    warned = gpt2test.jsonl_objects(P("mem.jsonl"), "memory_warning")
    c.check(r.rc == 0 and sorted(x["rank"] for x in warned) == [0, 1] and all(x["step"] == 1 for x in warned),
            f"memory: each rank named once, after step 1: {warned}\n{r.out}\n{r.err}")
    near = [line for line in r.out.splitlines() if "is near its memory limit" in line]
    c.check(len(near) == 2 and all("of 8.0 MiB" in line and "train.memory_limit_mb" in line for line in near),
            f"memory: one line a rank:\n{r.out}")
    c.check(not gpt2test.jsonl_objects(P("clean.jsonl"), "memory_warning"), "no memory warning under the node's own limit")

    bad = gpt2test.run(base + ["--set", "train.straggler_ratio=1"], 2, args.mpiexec, timeout=120)
    c.check(bad.rc == 2 and bad.err.count("train.straggler_ratio") >= 1,
            f"straggler_ratio = 1: exit 2 naming the key ({bad.rc}: {bad.err.strip()})")
    c.finish("stragglers")


if __name__ == "__main__":
    main()
