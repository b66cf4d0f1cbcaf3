#!/usr/bin/python3
"""A schedule of one's own (ctest: schedule_file): `gpt2 simulate --print-schedule` writes zb-v's
passes as a schedule file, and a 2-rank run with parallel.schedule_file naming it gives the same
losses, bit for bit, as the built-in zb-v (the same passes in the same order); the trace names the
file's schedule. Then an edited file (another order) still matches the one-rank losses to 1e-5.
"""
import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def losses(args, w, name, ranks, sets=(), **overrides):
    deck = os.path.join(w, f"{name}.toml")
    metrics = os.path.join(w, f"{name}.jsonl")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), trace__file=os.path.join(w, f"{name}.h5"),
                                                 **overrides))
    cmd = [args.gpt2, "train", deck, "-q", "--metrics-jsonl", metrics]
    for s in sets:
        cmd += ["--set", s]
    r = gpt2test.run(cmd, ranks, args.mpiexec)
    if r.rc != 0:
        raise SystemExit(f"{name}: exit {r.rc}\n{r.out}\n{r.err}")
    with h5py.File(os.path.join(w, f"{name}.h5"), "r") as f:
        schedule = f["meta"].attrs["schedule"]
    schedule = schedule.decode() if isinstance(schedule, bytes) else str(schedule)
    return [m["loss"] for m in gpt2test.read_jsonl(metrics) if "loss" in m], schedule


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    gpt2test.write_shard(os.path.join(w, "train.bin"), gpt2test.learnable_tokens(4000, 64))
    model = dict(model__n_layer=4, parallel__microbatches=4, train__steps=4)
    pp2 = dict(model, parallel__pp=2, parallel__schedule="zb-v")

    deck = os.path.join(w, "print.toml")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), **pp2))
    r = gpt2test.run([args.gpt2, "simulate", deck, "--print-schedule"])
    if r.rc != 0 or "rank 1:" not in r.out:
        raise SystemExit(f"--print-schedule: exit {r.rc}\n{r.out}\n{r.err}")
    printed = os.path.join(w, "zbv.sched")
    with open(printed, "w") as f:
        f.write(r.out)

    checks = gpt2test.Checks()
    one, _ = losses(args, w, "one", 1, **model)
    builtin, _ = losses(args, w, "builtin", 2, **pp2)
    mine, name = losses(args, w, "file", 2, sets=[f"parallel.schedule_file={printed}"], **pp2)
    checks.check(mine == builtin, f"the printed zb-v file's losses {mine} differ from zb-v's {builtin}")
    checks.check(name == "zb-v-custom", f"the trace names schedule {name!r}, expected the file's zb-v-custom")

    # Edit it: rank 0 runs all its weight passes last (a valid, different order).
    lines = open(printed).read().splitlines()
    edited = []
    for line in lines:
        if line.startswith("rank 0:"):
            passes = line.split(":", 1)[1].split()
            line = "rank 0: " + " ".join([p for p in passes if p[0] != "W"] + [p for p in passes if p[0] == "W"])
        edited.append("name = w-last" if line.startswith("name =") else line)
    with open(os.path.join(w, "w_last.sched"), "w") as f:
        f.write("\n".join(edited) + "\n")
    late, name = losses(args, w, "late", 2, sets=[f"parallel.schedule_file={os.path.join(w, 'w_last.sched')}"], **pp2)
    checks.check(name == "w-last", f"the trace names schedule {name!r}, expected w-last")
    checks.check(len(late) == len(one) and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(late, one)),
                 f"the edited schedule's losses {late} differ from one rank's {one}")
    checks.finish(f"schedule_file (zb-v printed and run: {len(mine)} equal losses; edited: matches one rank)")


if __name__ == "__main__":
    main()
