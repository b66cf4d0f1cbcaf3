#!/usr/bin/python3
"""Non-finite steps (ctest: nonfinite, label faults): a diverging run (train.lr = 1e9, no clipping).

train.nonfinite = "stop" (the default), on 1 rank, dp = 2 and pp = 2 (where only the last stage
computes the loss): the run stops on every rank after the first step whose loss or gradient norm
is not finite, with exit status 5 and ONE error line naming that step and what was not finite; the
checkpoints (checkpoint.every = 1) stop at the step before; its metrics line carries null values.
train.nonfinite = "skip" (1 rank and dp = 2): the run completes; every later step is skipped
("skipped": true in the metrics, skipped = 1 in the trace's /metrics); its final checkpoint holds
the parameters and AdamW moments of the last finite step bit for bit, and 1 optimizer update.
A finite run gives the same losses with "skip" as with "stop".
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

LAYOUTS = {1: {}, "dp2": {"parallel__dp": 2}, "pp2": {"parallel__pp": 2, "parallel__microbatches": 2}}


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w, train = gpt2test.fresh_workdir_with_shard(args.workdir)
    checks = gpt2test.Checks()

    def run(name, layout, steps, **more):
        cfg = os.path.join(w, name + ".toml")
        gpt2test.write_deck(cfg, gpt2test.tiny_deck(train, train__steps=steps, checkpoint__dir=os.path.join(w, "ck_" + name),
                                                    **LAYOUTS[layout], **more))
        metrics = os.path.join(w, name + ".jsonl")
        r = gpt2test.run([args.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics], 1 if layout == 1 else 2,
                         args.mpiexec, timeout=60)
        # (the step lines: the prediction's lines have no step)
        return r, [x for x in gpt2test.read_jsonl(metrics) if "step" in x] if os.path.exists(metrics) else []

    diverge = dict(train__lr=1e9, train__grad_clip=0.0, checkpoint__every=1)
    for layout in LAYOUTS:
        name = f"stop_{layout}"
        r, m = run(name, layout, 6, **diverge)
        errors = [ln for ln in (r.out + r.err).splitlines() if ln.startswith("error")]
        bad = next((x["step"] for x in m if x.get("loss") is None or x.get("grad_norm") is None), None)
        ok = checks.check(r.rc == 5, f"{name}: exit status {r.rc}, expected 5: {r.err[-800:]}")
        ok &= checks.check(bad is not None and len(m) == bad, f"{name}: metrics {m}")
        ok &= checks.check(len(errors) == 1 and f"step {bad}: non-finite " in errors[0],
                           f"{name}: expected one error line naming step {bad}: {errors}")
        if not ok:
            continue
        ck = os.path.join(w, "ck_" + name)
        saved = sorted(n for n in os.listdir(ck) if n.startswith("ckpt_"))
        checks.check(saved == [f"ckpt_{s:08d}.h5" for s in range(1, bad)],
                     f"{name}: checkpoints {saved}, expected those of steps 1..{bad - 1} only")
        print(f"ok   {name}: exit 5 after step {bad}: {errors[0][:150]}; checkpoints {saved}", flush=True)

    # "skip": the same diverging run goes on; nothing moves after the last finite step.
    for layout in (1, "dp2"):
        name = f"skip_{layout}"
        trace = os.path.join(w, name + ".h5")
        r, m = run(name, layout, 4, train__nonfinite="skip", trace__file=trace, **diverge)
        if not checks.check(r.rc == 0, f"{name}: exit status {r.rc}: {r.err[-800:]}"):
            continue
        skipped = [x["skipped"] for x in m if "loss" in x]
        checks.check(skipped == [False, True, True, True], f"{name}: skipped flags {skipped}")
        checks.check("3 update(s) skipped" in r.out, f"{name}: no summary of the skipped updates: {r.out[-500:]}")
        with h5py.File(trace, "r") as f:
            checks.check(list(f["metrics"]["skipped"]) == [0, 1, 1, 1], f"{name}: trace /metrics skipped "
                                                                        f"{list(f['metrics']['skipped'])}")
        first = gpt2test.read_checkpoint(os.path.join(w, f"ck_stop_{layout}", "ckpt_00000001.h5"))
        last = gpt2test.read_checkpoint(os.path.join(w, "ck_" + name, "ckpt_00000004.h5"))
        for sec in ("params", "opt.m", "opt.v"):
            checks.check(first[sec] == last[sec], f"{name}: {sec} changed after the last finite step")
        updates = int.from_bytes(last["updates"], "little")
        checks.check(updates == 1, f"{name}: the checkpoint counts {updates} optimizer updates, expected 1")
        checks.check(np.isfinite(np.frombuffer(last["params"], "<f4")).all(), f"{name}: non-finite parameters saved")
        print(f"ok   {name}: steps 2-4 skipped, parameters and moments as after step 1, 1 update", flush=True)

    # A finite run: "skip" reads the step's values before the update instead of after; same losses.
    _, a = run("finite_stop", 1, 4)
    _, b = run("finite_skip", 1, 4, train__nonfinite="skip")
    la, lb = [x["loss"] for x in a if "loss" in x], [x["loss"] for x in b if "loss" in x]
    checks.check(len(la) == 4 and la == lb, f"finite run: losses differ between stop and skip: {la} {lb}")
    checks.finish("nonfinite")


if __name__ == "__main__":
    main()
