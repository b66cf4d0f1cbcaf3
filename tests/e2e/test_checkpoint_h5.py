#!/usr/bin/python3
"""HDF5 checkpoints (checkpoint.format = "h5"; ctest: checkpoint_h5, label faults).

With a 4-step one-rank run (checkpoint-free) as the reference:
a. Written by several ranks -- dp 2 ZeRO-3 and ZeRO-1 (each rank its pieces), pp 2 1F1B, tp 2 (q, k,
   v's rows in three blocks a rank), dp 2 x tp 2 ZeRO-2 -- with --stop-at 2, each rank its own
   part; resumed on one rank: steps 3 and 4 equal the reference (1e-5). The tp 2 checkpoint also
   resumes on pp 2.
b. h5py reads it: the format attributes, the step, every tensor at its GLOBAL shape (wte: vocabulary
   x n_embd) in params, opt.m and opt.v, the values the one-rank run's own checkpoint
   holds (1e-6).
c. One value of the newest checkpoint changed (h5py): resume = "auto" warns naming the file and the
   dataset that fails its checksum and resumes from the one before.
d. checkpoint.async = true, a checkpoint every step, dp 2 ZeRO-3 and tp 2: the losses are the
   reference's (the background writes change nothing), each step's checkpoint is in the folder and
   step 2's resumes on one rank equal to the reference; the trace holds a checkpoint_stage and a
   checkpoint_write event (with its bytes) per checkpoint on every rank.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    args = ap.parse_args()
    import h5py  # Debian's python3-h5py
    w, train = gpt2test.fresh_workdir_with_shard(args.workdir)
    checks = gpt2test.Checks()

    def run(name, ranks=1, stop_at=0, **more):
        cfg = os.path.join(w, name + ".toml")
        gpt2test.write_deck(cfg, gpt2test.tiny_deck(train, **dict(dict(train__steps=4, checkpoint__every=2), **more)))
        metrics = os.path.join(w, name + ".jsonl")
        cmd = [args.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics] + (["--stop-at", str(stop_at)] if stop_at else [])
        r = gpt2test.run(cmd, ranks, args.mpiexec, timeout=90)
        got = {m["step"]: m["loss"] for m in gpt2test.read_jsonl(metrics) if "loss" in m} if os.path.exists(metrics) else {}
        checks.check(r.rc == 0, f"{name}: rc {r.rc}: {r.err[-800:]}")
        return r, got

    def same(name, got, steps):
        diff = max((abs(got.get(s, float("inf")) - ref[s]) for s in steps), default=0)
        return checks.check(sorted(got) == list(steps) and diff <= 1e-5,
                            f"{name}: losses of steps {sorted(got)} differ from the reference by {diff}")

    ref_dir = os.path.join(w, "ref")
    _, ref = run("reference", checkpoint__dir=ref_dir, checkpoint__format="bin")  # (the values for b)

    # a. written on two ranks, resumed on one
    layouts = {"dp2_zero3": {"parallel__dp": 2, "parallel__zero": 3},
               "dp2_zero1": {"parallel__dp": 2, "parallel__zero": 1},
               "pp2": {"parallel__pp": 2, "parallel__microbatches": 2},
               "tp2": {"parallel__tp": 2},
               "dp2_tp2_zero2": {"parallel__dp": 2, "parallel__tp": 2, "parallel__zero": 2}}
    for name, layout in layouts.items():
        ck = os.path.join(w, "ck_" + name)
        ranks = layout.get("parallel__dp", 1) * layout.get("parallel__pp", 1) * layout.get("parallel__tp", 1)
        run(name, ranks=ranks, stop_at=2, checkpoint__dir=ck, checkpoint__format="h5", **layout)
        checks.check(sorted(os.listdir(ck)) == ["ckpt_00000002.h5", "latest"], f"{name}: folder {os.listdir(ck)}")
        one = os.path.join(w, "one_" + name)
        shutil.copytree(ck, one)
        r, got = run(name + "_resumed", checkpoint__dir=one, checkpoint__format="h5", checkpoint__resume=True)
        if checks.check("resuming from " in r.out, f"{name}: did not resume: {r.out[-400:]}"):
            same(name + " resumed on one rank", got, [3, 4])
    two = os.path.join(w, "pp2_from_tp2")
    shutil.copytree(os.path.join(w, "ck_tp2"), two)
    _, got = run("pp2_from_tp2", ranks=2, checkpoint__dir=two, checkpoint__format="h5", checkpoint__resume=True,
                 parallel__pp=2, parallel__microbatches=2)
    same("tp 2 checkpoint resumed on pp 2", got, [3, 4])

    # b. h5py reads the global tensors; they hold what the one-rank run's checkpoint holds
    path = os.path.join(w, "ck_pp2", "ckpt_00000002.h5")
    with h5py.File(path, "r") as f:
        checks.check(f.attrs["format"] in (b"gpt2-kokkos checkpoint", "gpt2-kokkos checkpoint") and int(f.attrs["step"]) == 2,
                     f"b: attributes {dict(f.attrs)}")
        checks.check(f["params/wte"].shape == (64, 32), f"b: wte is {f['params/wte'].shape}, expected (64, 32)")
        checks.check(set(f.keys()) == {"params", "opt.m", "opt.v"}, f"b: groups {list(f.keys())}")
        names = sorted(f["params"].keys())
        checks.check(len(names) == 4 + 2 * 12 and f["params/h.1.qkvw"].shape == (96, 32),
                     f"b: {len(names)} tensors; h.1.qkvw {f['params/h.1.qkvw'].shape}")
        sections = gpt2test.read_checkpoint(os.path.join(ref_dir, "ckpt_00000002.bin"))
        import numpy as np
        bin_params = np.frombuffer(sections["params"], "<f4")
        wte, wpe = f["params/wte"][()].ravel(), f["params/wpe"][()].ravel()
        at = 128 * 32  # the global layout starts with wte's padded rows, then wpe
        worst = max(np.abs(wte - bin_params[:wte.size]).max(), np.abs(bin_params[wte.size:at]).max(),
                    np.abs(wpe - bin_params[at:at + wpe.size]).max())
        checks.check(worst <= 1e-6, f"b: wte, wpe differ from the one-rank checkpoint by {worst}")

    # c. a changed value fails the checksum; auto falls back to the one before
    ck = os.path.join(w, "ck_corrupt")
    run("two_checkpoints", checkpoint__dir=ck, checkpoint__format="h5")
    newest = os.path.join(ck, "ckpt_00000004.h5")
    with h5py.File(newest, "r+") as f:
        d = f["params/h.0.qkvw"]
        d[3, 5] = d[3, 5] + 0.5
    r, got = run("corrupt_resume", checkpoint__dir=ck, checkpoint__format="h5", checkpoint__resume="auto")
    warned = [ln for ln in r.err.splitlines() if "ckpt_00000004.h5" in ln and "params/h.0.qkvw" in ln]
    checks.check(warned and "resuming from " + os.path.join(ck, "ckpt_00000002.h5") in r.out,
                 f"c: no fall-back: {r.out[-400:]} {r.err[-600:]}")
    same("c: resumed from step 2", got, [3, 4])

    # d. async
    for name, layout in (("async_dp2_zero3", {"parallel__dp": 2, "parallel__zero": 3}),
                         ("async_tp2", {"parallel__tp": 2})):
        ck, trace = os.path.join(w, "ck_" + name), os.path.join(w, name + ".h5")
        _, got = run(name, ranks=2, checkpoint__dir=ck, checkpoint__every=1, checkpoint__async=True,
                     trace__file=trace, **layout)
        same(name, got, [1, 2, 3, 4])
        checks.check(sorted(os.listdir(ck)) == [f"ckpt_{s:08d}.h5" for s in range(1, 5)] + ["latest"],
                     f"{name}: folder {sorted(os.listdir(ck))}")
        with h5py.File(trace, "r") as f:
            kinds = f["meta"].attrs["event_kinds"]
            names = (kinds.decode() if isinstance(kinds, bytes) else kinds).split(",")
            ev = f["events"][()]
            for kind in ("checkpoint_stage", "checkpoint_write"):
                mine = ev[ev["kind"] == names.index(kind)]
                per_rank = sorted(int((mine["rank"] == r).sum()) for r in (0, 1))
                checks.check(per_rank == [4, 4], f"{name}: {kind} events per rank {per_rank}, expected 4 each")
                if kind == "checkpoint_write":
                    checks.check(bool((mine["bytes"] > 0).all()), f"{name}: a checkpoint_write event without bytes")
        one = os.path.join(w, "one_" + name)
        os.makedirs(one)
        shutil.copy(os.path.join(ck, "ckpt_00000002.h5"), one)
        _, got = run(name + "_resumed", checkpoint__dir=one, checkpoint__resume=True)
        same(name + " step 2 resumed on one rank", got, [3, 4])
    return checks.finish("checkpoint_h5")


if __name__ == "__main__":
    sys.exit(main())
