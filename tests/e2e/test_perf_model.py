#!/usr/bin/python3
"""gpt2 simulate and gpt2 plan end to end (ctest: perf_model): a one-rank calibration trace of a tiny
model, predictions from it (JSON keys, one memory entry per rank, a pipeline's bubble), many
predictions in one process (simulate --batch: one JSON line each, a bad line named and the rest
predicted), the plan for GPT-2 124M on 1024 H100s (ranked, fitting) and for GPT-2 1.5B on 64 H100s
(--json --all: the layouts that do not fit too; in seconds, not minutes), and bad input: a trace of
another model shape, a hardware file missing a key, a file that is no trace, ranks that do not fit
the grid -- each one line naming the input, exit status 2.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    args = ap.parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    P = lambda *n: os.path.join(w, *n)  # noqa: E731
    c = gpt2test.Checks()
    gpt2test.write_shard(P("train.bin"), gpt2test.learnable_tokens(20000, 64))
    gpt2test.write_deck(P("tiny.toml"), gpt2test.tiny_deck(P("train.bin"), train__steps=3, parallel__blas_threads=1))
    gpt2test.write_deck(P("other.toml"), gpt2test.tiny_deck(P("train.bin"), model__n_layer=3))
    g = args.gpt2

    def run(*cmd, ranks=1):
        return gpt2test.run([g] + list(cmd), ranks, args.mpiexec, timeout=120)

    r = run("train", P("tiny.toml"), "-q", "--set", f"trace.file={P('cal.h5')}", "--set", "trace.units=true")
    if r.rc != 0:
        raise SystemExit(f"calibration run failed: {r.err}")

    # One rank, calibrated.
    r = run("simulate", P("tiny.toml"), "--calibrate", P("cal.h5"), "--json")
    c.check(r.rc == 0, f"simulate --json exits 0 (got {r.rc}: {r.err.strip()})")
    if r.rc == 0:
        d = json.loads(r.out)
        for k in ("step_ms", "tokens_per_s", "bubble", "memory_bytes", "exposed_comm_ms"):
            c.check(k in d, f"simulate --json has {k}")
        c.check(d.get("step_ms", 0) > 0 and len(d.get("memory_bytes", [])) == 1, f"one rank, a positive step: {d}")
        c.check(abs(d["tokens_per_s"] - 8 * 16 / (d["step_ms"] / 1e3)) < 1e-6 * d["tokens_per_s"],
                "tokens/s = batch x T / step")

    # A pipeline on 2 ranks: a bubble, two memory entries.
    r = run("simulate", P("tiny.toml"), "--calibrate", P("cal.h5"), "--ranks", "2", "--set", "parallel.pp=2",
            "--set", "parallel.microbatches=4", "--set", "parallel.schedule=gpipe", "--json")
    c.check(r.rc == 0, f"simulate pp 2 exits 0 ({r.err.strip()})")
    if r.rc == 0:
        d = json.loads(r.out)
        c.check(len(d["memory_bytes"]) == 2 and d["bubble"] > 0, f"pp 2: two ranks and a bubble: {d}")
        c.check(d["layout"]["pp"] == 2 and d["layout"]["dp"] == 1, "the layout is the deck's")
    r = run("simulate", P("tiny.toml"), "--calibrate", P("cal.h5"), "--ranks", "2")
    c.check(r.rc == 0 and "predicted step" in r.out and "dp 2" in r.out, f"--ranks 2 makes dp 2 ({r.out}{r.err})")
    r = run("simulate", P("tiny.toml"))
    c.check(r.rc == 0 and "calibration: none" in r.out, "without a trace: the hardware's peak")

    # Many predictions in one process: one JSON line each, in order; a line the model refuses gets
    # its error and the others still run (exit 1).
    with open(P("batch.txt"), "w") as f:
        f.write("# a comment\n"
                f"id=dp2 ranks=2 hardware={os.path.join(ROOT, 'inputs', 'hardware', 'a100.toml')} precision=bf16\n"
                "\n"
                "id=pp2 parallel.pp=2 parallel.microbatches=4 parallel.schedule=gpipe perf.fused_attention=true\n"
                "id=bad parallel.tp=5\n")
    r = run("simulate", P("tiny.toml"), "--batch", P("batch.txt"))
    out = [json.loads(x) for x in r.out.splitlines() if x.strip()]
    c.check(r.rc == 1 and [x.get("id") for x in out] == ["dp2", "pp2", "bad"], f"--batch: three lines in order, exit 1 ({r.rc}: {r.out}{r.err})")
    if len(out) == 3:
        c.check(out[0].get("world_size") == 2 and out[0].get("step_ms", 0) > 0 and "a100" in out[0].get("hardware", ""),
                f"--batch: ranks and hardware per line: {out[0]}")
        c.check("dp 1 x tp 1 x pp 2" in out[1].get("layout", "") and out[1].get("step_ms", 0) > 0, f"--batch: {out[1]}")
        c.check("parallel.tp" in out[2].get("error", ""), f"--batch: the refused line names its key: {out[2]}")
    # One GEMM as the step model prices it: dearer with more depth; a shape that is not one is named.
    h100 = os.path.join(ROOT, "inputs", "hardware", "h100.toml")
    with open(P("batch_gemm.txt"), "w") as f:
        f.write(f"id=g1 hardware={h100} precision=bf16 gemm=4096,4096,4096\n"
                f"id=g2 hardware={h100} precision=bf16 gemm=4096,4096,8192,2\n"
                "id=g3 gemm=4096,0,1\n")
    r = run("simulate", P("tiny.toml"), "--batch", P("batch_gemm.txt"))
    out = [json.loads(x) for x in r.out.splitlines() if x.strip()]
    c.check(r.rc == 1 and [x.get("id") for x in out] == ["g1", "g2", "g3"], f"--batch gemm rows ({r.rc}: {r.out}{r.err})")
    if len(out) == 3:
        g1, g2 = out[0].get("gemm_ms", 0), out[1].get("gemm_ms", 0)
        # 137 GFLOP at most at the H100's 989 TFLOP/s peak: no faster than 0.139 ms
        c.check(0.139 < g1 < 1.0 and 3.5 * g1 < g2 < 4.5 * g1, f"gemm rows priced: {out[:2]}")
        c.check("gemm" in out[2].get("error", ""), f"a bad gemm row names gemm: {out[2]}")
    # ZeRO-3 without the prefetch: each gather waits for the unit before it, so the step is longer.
    a100 = os.path.join(ROOT, "inputs", "hardware", "a100.toml")
    z3 = (f"hardware={a100} precision=bf16 ranks=64 parallel.zero=3 train.batch_size=512 model.n_layer=8 "
          "model.n_embd=2048 model.n_head=16 model.block_size=2048 data.seq_len=2048")
    with open(P("batch_z3.txt"), "w") as f:
        f.write(f"id=on {z3}\nid=off {z3} perf.zero3_prefetch=false\n")
    r = run("simulate", P("tiny.toml"), "--batch", P("batch_z3.txt"))
    out = [json.loads(x) for x in r.out.splitlines() if x.strip()]
    c.check(r.rc == 0 and len(out) == 2 and out[1].get("step_ms", 0) > 1.02 * out[0].get("step_ms", 0),
            f"ZeRO-3 without prefetch is slower: {out} {r.err}")
    with open(P("batch_bad.txt"), "w") as f:
        f.write("id=x perf.no_such=true\n")
    r = run("simulate", P("tiny.toml"), "--batch", P("batch_bad.txt"))
    c.check(r.rc == 1 and "perf.no_such" in r.out, f"--batch: an unknown perf key is named ({r.out})")

    # The plan at scale.
    r = run("plan", os.path.join(ROOT, "inputs", "gpt2-124M.toml"), "--hardware",
            os.path.join(ROOT, "inputs", "hardware", "h100.toml"), "--gpus", "1024", "--json")
    c.check(r.rc == 0, f"plan 124M on 1024 H100s exits 0 ({r.err.strip()})")
    if r.rc == 0:
        d = json.loads(r.out)
        tok = [x["tokens_per_s"] for x in d["layouts"]]
        c.check(len(tok) > 1 and tok == sorted(tok, reverse=True), "ranked by tokens/s")
        c.check(all(x["dp"] * x["tp"] * x["pp"] == 1024 for x in d["layouts"]), "every layout uses 1024 GPUs")
        c.check(d["fitting"] > 0 and d["considered"] >= d["fitting"], "counts")
    # GPT-2 1.5B on 64 H100s, every layout (for analysis/plot_plan.py): those that do not fit too.
    # (How long the plan takes is a benchmark's business, not a test's: sanitizers slow it 10x.)
    r = run("plan", os.path.join(ROOT, "inputs", "gpt2-1.5B.toml"), "--hardware",
            os.path.join(ROOT, "inputs", "hardware", "h100.toml"), "--gpus", "64", "--json", "--all")
    c.check(r.rc == 0, f"plan 1.5B on 64 H100s exits 0 ({r.err.strip()})")
    if r.rc == 0:
        d = json.loads(r.out)
        fits = [x for x in d["layouts"] if x["fits"]]
        c.check(len(fits) == d["fitting"] and len(d["layouts"]) > len(fits), "--all: every fitting layout and others")
        c.check(all(x["peak_memory_bytes"] <= d["usable_memory_bytes"] for x in fits), "the fitting ones fit")
        c.check(d["seconds"] > 0, "the plan reports its own time")
    r = run("plan", os.path.join(ROOT, "inputs", "gpt2-124M.toml"), "--hardware",
            os.path.join(ROOT, "inputs", "hardware", "h100.toml"), "--gpus", "8")
    c.check(r.rc == 0 and "best:" in r.out, f"plan text names the best layout ({r.err.strip()})")

    # Bad input: one line naming the input, exit 2.
    def bad(what, cmd, *needles, one_line=True):
        r = run(*cmd)
        lines = [x for x in r.err.strip().splitlines() if x]
        ok = r.rc == 2 and (len(lines) == 1 or not one_line) and lines and all(n in lines[0] for n in needles)
        c.check(ok, f"{what}: exit 2 and one line with {needles} (got {r.rc}: {r.err.strip()})")

    bad("trace of another model shape", ["simulate", P("other.toml"), "--calibrate", P("cal.h5")],
        P("cal.h5"), "another model shape", "n_layer: 3 vs 2")
    with open(os.path.join(ROOT, "inputs", "hardware", "h100.toml")) as f:
        text = f.read()
    with open(P("no_latency.toml"), "w") as f:
        f.write(text.replace("latency_us = 8.0", ""))
    bad("hardware file missing a key", ["simulate", P("tiny.toml"), "--hardware", P("no_latency.toml")],
        P("no_latency.toml"), "missing key inter_node.latency_us")
    bad("plan with it", ["plan", P("tiny.toml"), "--hardware", P("no_latency.toml"), "--gpus", "8"],
        "missing key inter_node.latency_us")
    bad("not a trace", ["simulate", P("tiny.toml"), "--calibrate", P("tiny.toml")], P("tiny.toml"), "HDF5")
    bad("no such trace", ["simulate", P("tiny.toml"), "--calibrate", P("nope.h5")], P("nope.h5"))
    bad("ranks that split no pipeline", ["simulate", P("tiny.toml"), "--ranks", "3", "--set", "parallel.pp=2"],
        "--ranks")
    bad("plan without --gpus", ["plan", P("tiny.toml"), "--hardware", P("no_latency.toml")], "--gpus",
        one_line=False)  # the command line's own errors add a hint to --help

    with open(P("tiny_device.toml"), "w") as f:
        f.write(text.replace("memory_gb = 80", "memory_gb = 0.001"))
    r = run("plan", os.path.join(ROOT, "inputs", "gpt2-124M.toml"), "--hardware", P("tiny_device.toml"), "--gpus", "8")
    c.check(r.rc == 1 and "no layout fits" in r.out, f"nothing fits a 1 MB device: exit 1 ({r.rc})")
    for sub in ("simulate", "plan"):
        r = run(sub, "--help")
        c.check(r.rc == 0 and "--hardware" in r.out, f"{sub} --help")
    c.finish("perf_model")


if __name__ == "__main__":
    main()
