#!/usr/bin/python3
"""The prediction beside every run (ctest: prediction): `gpt2 train` prints the planner's step time,
tokens/s and memory for its own layout at the start and measured against predicted at the end; both
go in --metrics-jsonl ({"predicted": ...}, {"measured": ...}, parsed here) and the trace's /meta. A
second run in the same folder is priced from the first one's trace; analysis/report.py shows it. A hardware file 20x too fast
puts the step off by more than train.predict_warn: one line names the part (the passes, with a
trace to tell; communication when the waits are furthest off); predict_warn = 0 never warns. Two
ranks: a memory entry each. A hardware file that is not there: one line naming train.hardware; one
the planner cannot price from: "predicted: none" and the measurement alone.
"""
import os
import re
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OFF = "gpt2 train: prediction off by more than"


def too_fast_hardware(path):
    """devbox.toml with its peaks and bandwidth 20x: a prediction the run cannot meet."""
    text = open(os.path.join(ROOT, "inputs", "hardware", "devbox.toml")).read()
    for key in ("peak_tflops_fp32", "peak_tflops_bf16", "memory_bandwidth_gbs"):
        text = re.sub(rf"^{key} = ([0-9.]+)", lambda m, k=key: f"{k} = {float(m.group(1)) * 20}", text, flags=re.M)
    open(path, "w").write(text)


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    P = lambda *n: os.path.join(w, *n)  # noqa: E731
    c = gpt2test.Checks()
    gpt2test.write_shard(P("train.bin"), gpt2test.learnable_tokens(20000, 64))
    gpt2test.write_deck(P("tiny.toml"), gpt2test.tiny_deck(P("train.bin"), train__steps=6))
    too_fast_hardware(P("fast.toml"))

    def train(name, *sets, ranks=1):
        metrics = P(f"{name}.jsonl")
        cmd = [args.gpt2, "train", P("tiny.toml"), "--metrics-jsonl", metrics]
        for s in sets:
            cmd += ["--set", s]
        r = gpt2test.run(cmd, ranks, args.mpiexec, timeout=120)
        if r.rc != 0:
            raise SystemExit(f"{name}: exit {r.rc}\n{r.out}\n{r.err}")
        return r, metrics

    # A first run in a fresh folder: the hardware file's prediction, then the measurement.
    r, m = train("first", f"trace.file={P('run.h5')}")
    c.check("gpt2 train: predicted: step" in r.out and "uncalibrated" in r.out, f"the start's prediction:\n{r.out}")
    c.check("gpt2 train: measured against predicted: step" in r.out, f"the end's comparison:\n{r.out}")
    pred, meas = gpt2test.jsonl_objects(m, "predicted"), gpt2test.jsonl_objects(m, "measured")
    c.check(len(pred) == 1 and pred[0]["step_ms"] > 0 and pred[0]["tokens_per_s"] > 0 and pred[0]["problem"] == "",
            f"one predicted object with a step: {pred}")
    c.check(len(meas) == 1 and meas[0]["step_ms"] > 0 and len(meas[0]["memory_bytes"]) == 1
            and len(meas[0]["rss_bytes"]) == 1 and meas[0]["rss_bytes"][0] > meas[0]["memory_bytes"][0],
            f"one measured object, one rank's memory and its peak RSS (above what Kokkos holds): {meas}")
    c.check("; peak RSS " in r.out, f"the end's comparison gives the peak RSS:\n{r.out}")
    if pred and meas:
        ratio = meas[0]["memory_bytes"][0] / pred[0]["memory_bytes"][0]
        c.check(0.5 < ratio < 2, f"the measured memory is the predicted one's kind (ratio {ratio:.2f})")
    with h5py.File(P("run.h5"), "r") as f:
        meta = f["meta"].attrs
        c.check(meta["predicted_step_ms"] > 0 and "devbox" in str(meta["prediction_source"]),
                f"/meta has the prediction: {meta['predicted_step_ms']}, {meta['prediction_source']}")
        c.check(meta["predicted_memory_bytes"][0] > 0 and meta["measured_memory_bytes"][0] > 0
                and meta["measured_rss_bytes"][0] > 0, "/meta has each rank's predicted and measured memory, and RSS")

    rep = gpt2test.run([sys.executable, os.path.join(ROOT, "analysis", "report.py"), P("run.h5")], 1, args.mpiexec)
    c.check(rep.rc == 0 and " predicted (" in rep.out and "devbox" in rep.out and "peak RSS" in rep.out,
            f"analysis/report.py shows the prediction:\n{rep.out}{rep.err}")

    # The same folder again: priced from the first run's trace.
    r, _ = train("second", f"trace.file={P('run.h5')}")
    c.check("the earlier run's trace" in r.out, f"a second run is calibrated by the first's trace:\n{r.out}")

    # A prediction the run cannot meet: the part furthest off named, with and without a trace.
    r, _ = train("fast", f"train.hardware={P('fast.toml')}")
    off = [line for line in r.out.splitlines() if line.startswith(OFF)]
    c.check(len(off) == 1 and "the step (trace.file would split it" in off[0], f"one line, no trace: {off}\n{r.out}")
    r, _ = train("fast_traced", f"train.hardware={P('fast.toml')}", f"trace.file={P('fast.h5')}")
    off = [line for line in r.out.splitlines() if line.startswith(OFF)]
    c.check(len(off) == 1 and "the passes" in off[0], f"one line naming the passes: {off}\n{r.out}")
    r, _ = train("fast_quiet", f"train.hardware={P('fast.toml')}", "train.predict_warn=0")
    c.check(OFF not in r.out and "measured against predicted" in r.out, f"predict_warn = 0: no warning\n{r.out}")

    # Two ranks: the prediction and the measurement of each.
    r, m = train("dp2", "parallel.dp=2", f"trace.file={P('dp2.h5')}", ranks=2)
    pred, meas = gpt2test.jsonl_objects(m, "predicted"), gpt2test.jsonl_objects(m, "measured")
    c.check(len(pred) == 1 and len(pred[0]["memory_bytes"]) == 2 and len(meas[0]["memory_bytes"]) == 2
            and len(meas[0]["rss_bytes"]) == 2,
            f"dp 2: two ranks' memory predicted and measured: {pred} {meas}")
    with h5py.File(P("dp2.h5"), "r") as f:
        c.check(len(f["meta"].attrs["measured_memory_bytes"]) == 2 and len(f["meta"].attrs["measured_rss_bytes"]) == 2,
                "/meta: a measured memory and RSS per rank")

    # A hardware file the planner cannot price from: no prediction, said at the start; the end still
    # gives the measurement.
    text = open(os.path.join(ROOT, "inputs", "hardware", "devbox.toml")).read()
    open(P("broken.toml"), "w").write(re.sub(r"^peak_tflops_fp32 = .*$", "", text, flags=re.M))
    r, _ = train("broken", f"train.hardware={P('broken.toml')}")
    c.check("gpt2 train: predicted: none (" in r.out and "gpt2 train: measured: step" in r.out
            and "no prediction to hold it against" in r.out, f"no prediction: said, and the measurement alone:\n{r.out}")

    bad = gpt2test.run([args.gpt2, "train", P("tiny.toml"), "--set", f"train.hardware={P('nope.toml')}"], 1,
                       args.mpiexec)
    c.check(bad.rc == 2 and "train.hardware" in bad.err and "nope.toml" in bad.err,
            f"a hardware file that is not there: exit 2 naming it ({bad.rc}: {bad.err.strip()})")
    c.finish("prediction")


if __name__ == "__main__":
    main()
