#!/usr/bin/python3
"""Translation pairs end to end (ctest: translation): the seed course's experiment, small.

A parallel corpus the test makes (numbers to their English words, "123" -> "one hundred twenty
three"), `gpt2 prepare --pairs` (shards of whole examples with loss masks, val.tsv), then
inputs/translation.toml shrunk to a tiny model, trained on dp 1, dp 2, pp 2 (1F1B, 4 microbatches)
and pp 2 naive (model parallel), each logging corpus BLEU after every epoch beside the epoch's time
and tokens/s. Checks:
  - every run logs BLEU after each epoch and at the end (stdout and metrics JSONL);
  - dp 2 and both pp 2 runs give dp 1's losses and gradient norms at every step (1e-5, relative);
  - sources shuffled (each source's characters permuted: the same lengths, the same packing, the
    masked tokens changed): the first-step loss is dp 1's to 1e-4 relative (the target still attends
    to its source, so not bit for bit; measured 3.5e-5), and the same shuffle moves the loss of the
    shards read as plain text (the source tokens counted) at least twice as much (measured 2.8x);
  - `gpt2 eval --bleu` on the final checkpoint gives the last BLEU the trainer logged;
  - `gpt2 sample --benchmark`: the KV cache's tokens equal the uncached ones, and at 256 new tokens
    (a 264-token window) it is faster;
  - the assignment's plots from the traces: analysis/plot_scaling.py (time per epoch and tokens/s by
    world size) and analysis/plot_pipeline.py (pipeline vs naive model parallel).
"""
import os
import random
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import gpt2test  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def corpus(path, n, seed, shuffle_sources=False):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            k = rng.randrange(1000)
            src = str(k)
            if shuffle_sources:
                chars = list(src)
                random.Random(k * 31 + 7).shuffle(chars)
                src = "".join(chars)
            f.write(f"{src}\t{gpt2test.number_words(k)}\n")


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    args = ap.parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    checks = gpt2test.Checks()
    py = sys.executable

    def run(cmd, ranks=1, **kw):
        r = gpt2test.run(cmd, ranks, args.mpiexec, **kw)
        if r.rc != 0:
            print(f"$ {' '.join(cmd)}\n{r.out}\n{r.err}", flush=True)
        return r

    # The corpus and its shards: 140 pairs, 28 held out.
    for name, shuffled in (("pairs", False), ("shuffled", True)):
        corpus(os.path.join(w, name + ".tsv"), 140, 5, shuffled)
        r = run([args.gpt2, "prepare", "--pairs", "--val-fraction", "0.2", "--out", os.path.join(w, name),
                 os.path.join(w, name + ".tsv")])
        checks.check(r.rc == 0, f"prepare --pairs ({name}) exits 0: {r.err}")
    for f in ("train_000.bin", "train_000.mask", "val_000.bin", "val_000.mask", "val.tsv"):
        checks.check(os.path.exists(os.path.join(w, "pairs", f)), f"prepare --pairs writes {f}")

    # inputs/translation.toml, made tiny: 2 layers of 64 channels, T = 64, 8 sequences a step.
    tiny = ["--set", "model.n_layer=2", "--set", "model.n_head=2", "--set", "model.n_embd=64",
            "--set", "model.block_size=64", "--set", "data.seq_len=64", "--set", "train.batch_size=8",
            "--set", "train.eval_batches=1", "--set", "train.eval_every=0", "--set", "train.log_every=1",
            "--set", "train.bleu_examples=8", "--set", "train.bleu_tokens=32", "--set", "train.warmup_steps=2"]

    def train(name, data, ranks=1, steps=13, layout=(), plain=False):
        out = os.path.join(w, "runs", name)
        os.makedirs(out, exist_ok=True)
        d = os.path.join(w, data)
        if plain:  # the same shards without their masks: every token counts
            d = os.path.join(w, data + "_plain")
            os.makedirs(d, exist_ok=True)
            shutil.copy(os.path.join(w, data, "train_000.bin"), d)
        cmd = [args.gpt2, "train", os.path.join(ROOT, "inputs", "translation.toml"), *tiny,
               "--set", f"data.train={d}/train_*.bin", "--set", "data.val=" + ("" if plain else f"{d}/val_*.bin"),
               "--set", "data.shuffle=false",
               "--set", "train.bleu_pairs=" + ("" if plain else f"{d}/val.tsv"), "--set", f"train.steps={steps}",
               "--set", "checkpoint.dir=" + ("" if steps == 1 else f"{out}/ckpt"),
               "--set", "trace.file=" + ("" if steps == 1 else f"{out}/{name}.h5"),
               "--metrics-jsonl", f"{out}/metrics.jsonl"]
        for kv in layout:
            cmd += ["--set", kv]
        r = run(cmd, ranks, timeout=120)
        checks.check(r.rc == 0, f"train {name} exits 0")
        lines = gpt2test.read_jsonl(f"{out}/metrics.jsonl") if os.path.exists(f"{out}/metrics.jsonl") else []
        return r, [x for x in lines if "loss" in x], [x for x in lines if "bleu" in x]

    # 112 training pairs, 2 or 3 to a sequence of 64: 6 batches of 8 an epoch; 2 epochs and a step.
    runs = {}
    for name, ranks, layout in (("dp1", 1, ()), ("dp2", 2, ("parallel.dp=2",)),
                                ("pp2_1f1b", 2, ("parallel.pp=2", "parallel.microbatches=4", "parallel.schedule=1f1b")),
                                ("pp2_naive", 2, ("parallel.pp=2", "parallel.microbatches=1", "parallel.schedule=naive"))):
        runs[name] = train(name, "pairs", ranks, layout=layout)
    r, steps1, bleu1 = runs["dp1"]
    epochs = [round(b["epoch"], 3) for b in bleu1]
    print("dp1 BLEU log:", [(b["epoch"], round(b["bleu"], 2), round(b["train_s"], 3), round(b["tokens_per_s"])) for b in bleu1])
    checks.check(len(steps1) == 13, f"dp1 ran 13 steps ({len(steps1)})")
    checks.check("6 batches/epoch" in r.out, "the packed data: 6 batches an epoch")
    checks.check(len(epochs) == 3 and epochs[0] == 1.0 and epochs[1] == 2.0,
                 f"BLEU logged after each epoch: epochs {epochs}")
    checks.check(all(0 <= b["bleu"] <= 100 and b["train_s"] > 0 and b["tokens_per_s"] > 0 for b in bleu1),
                 "each BLEU line carries BLEU, the epoch's training time and tokens/s")
    checks.check("| BLEU " in r.out and "tok/s since the last" in r.out, "the BLEU lines are printed")
    for name in ("dp2", "pp2_1f1b", "pp2_naive"):
        _, steps, bleu = runs[name]
        ok = len(steps) == len(steps1) and all(
            abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"] and abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * b["grad_norm"]
            for a, b in zip(steps, steps1))
        checks.check(ok, f"{name}: losses and norms equal dp1's (1e-5): "
                         f"{[(a['loss'], b['loss']) for a, b in zip(steps, steps1)][:3]}")
        checks.check([round(b["epoch"], 3) for b in bleu] == epochs, f"{name}: BLEU after the same epochs")

    # Shuffled sources: the first-step loss of the target-only loss barely moves.
    first = {}
    for name, data, plain in (("orig", "pairs", False), ("shuf", "shuffled", False),
                              ("orig_plain", "pairs", True), ("shuf_plain", "shuffled", True)):
        _, steps, _ = train("first_" + name, data, steps=1, plain=plain)
        first[name] = steps[0]["loss"] if steps else float("nan")
    masked_d = abs(first["shuf"] - first["orig"])
    plain_d = abs(first["shuf_plain"] - first["orig_plain"])
    print(f"first-step loss: masked {first['orig']:.7f} -> shuffled sources {first['shuf']:.7f} (|d| {masked_d:.2e}); "
          f"as plain text {first['orig_plain']:.7f} -> {first['shuf_plain']:.7f} (|d| {plain_d:.2e})")
    checks.check(masked_d <= 1e-4 * first["orig"], f"shuffled sources: first-step loss within 1e-4 ({masked_d:.2e})")
    checks.check(plain_d > 2 * masked_d, f"counting the sources would move it more ({plain_d:.2e} vs {masked_d:.2e})")

    # gpt2 eval --bleu: the trainer's last BLEU, from the final checkpoint.
    ckpt = os.path.join(w, "runs", "dp1", "ckpt")
    r = run([args.gpt2, "eval", "--bleu", os.path.join(w, "pairs", "val.tsv"), "--checkpoint", ckpt, "--limit", "8",
             "--max-tokens", "32", "--seq-len", "64", "--hypotheses", os.path.join(w, "hyps.txt")])
    checks.check(r.rc == 0 and "BLEU = " in r.out, f"gpt2 eval --bleu prints BLEU: {r.out}")
    if r.rc == 0 and bleu1:
        score = float(r.out.split("BLEU = ")[1].split()[0])
        checks.check(abs(score - bleu1[-1]["bleu"]) < 0.01, f"eval's BLEU {score} is the trainer's {bleu1[-1]['bleu']:.4f}")

    # The KV cache: the same tokens as recomputing the window.
    r = run([args.gpt2, "sample", "--checkpoint", ckpt, "--prompt", "417\t", "--tokens", "40", "--benchmark"])
    checks.check(r.rc == 0 and "tokens identical: yes" in r.out, f"sample --benchmark: identical tokens\n{r.out}")

    # ... and faster at 256 new tokens: a model whose window holds them (block_size 320), one step old.
    bench = os.path.join(w, "runs", "bench")
    r = run([args.gpt2, "train", os.path.join(ROOT, "inputs", "translation.toml"), *tiny, "--set", "model.block_size=320",
             "--set", f"data.train={w}/pairs/train_*.bin", "--set", "data.val=", "--set", "train.bleu_pairs=",
             "--set", "train.steps=1", "--set", f"checkpoint.dir={bench}", "--set", "trace.file=", "-q"])
    r = run([args.gpt2, "sample", "--checkpoint", bench, "--prompt", "417\t", "--tokens", "256", "--seq-len", "264",
             "--temperature", "0", "--benchmark"], timeout=300)
    speedup = float(r.out.split("speed-up ")[1].split("x")[0]) if "speed-up " in r.out else 0.0
    print(r.out.strip())
    checks.check(r.rc == 0 and "tokens identical: yes" in r.out, "256 new tokens: identical with and without the cache")
    checks.check(speedup > 1.5, f"256 new tokens: the KV cache is faster ({speedup:.2f}x)")

    # The assignment's plots, from the traces.
    plots = os.path.join(w, "plots")
    env = {"MPLBACKEND": "Agg"}
    traces = {n: os.path.join(w, "runs", n, n + ".h5") for n in runs}
    r = gpt2test.run([py, os.path.join(ROOT, "analysis", "plot_scaling.py"), traces["dp1"], traces["dp2"],
                      "--trace-epochs", "--out", plots], env=env)
    checks.check(r.rc == 0, f"plot_scaling.py exits 0: {r.err}")
    r = gpt2test.run([py, os.path.join(ROOT, "analysis", "plot_pipeline.py"), traces["pp2_naive"], traces["pp2_1f1b"],
                      "--out", plots], env=env)
    checks.check(r.rc == 0, f"plot_pipeline.py exits 0: {r.err}")
    for png in ("scaling_time.png", "scaling_tokens_per_s.png", "pipeline_comparison.png"):
        checks.check(os.path.exists(os.path.join(plots, png)), f"{png} written")
    checks.finish("translation")


if __name__ == "__main__":
    main()
