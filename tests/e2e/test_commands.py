#!/usr/bin/python3
"""Every command and flag of the README's command table (ctest: commands), on files the test makes.

A text corpus and a numbers-to-digit-words pairs corpus written here, then, each exiting 0:
  - gpt2 prepare: --tokenizer byte with --val-fraction and --shard-tokens (two train shards, the
    token counts adding up to the corpus's bytes); --tokenizer gpt2 with the default vocabulary and
    with --vocab/--merges (when GPT-2's files are in GPT2_CACHE or ~/.cache/gpt2-kokkos, else a
    'skipped:' line); --pairs from a TSV and from SOURCES TARGETS (masks, val.tsv);
  - gpt2 train: a tiny deck written here, --set overrides, checkpoint.dir, trace.file, --metrics-jsonl
    and --stop-at (the checkpoint of that step), then resumed to the end; a short translation run of
    inputs/translation.toml shrunk (BLEU in its metrics);
  - gpt2 sample from the checkpoint folder, its file and the llm.c export (the same seed, the same
    text), --prompt --tokens --temperature --top-k --seed, --no-kv-cache (greedy: the cached text),
    --benchmark (identical tokens);
  - gpt2 eval --bleu with --max-tokens --limit --hypotheses and every --smooth and --tokenize;
  - gpt2 convert (llm.c's header: magic 20240326, version 3, the model's shape);
  - gpt2 info: plain, --json, CONFIG --set --json, --keys (and --json), --checkpoint of the folder,
    the file and the llm.c model, as text and --json (each parsed, a few keys checked);
  - gpt2 simulate CONFIG --set --calibrate (the trace) --hardware --ranks --precision --json,
    --print-schedule, --measure-comm under mpiexec -n 2;
  - gpt2 plan CONFIG --hardware --gpus --global-batch --calibrate --top, --json, --json --all;
  - gpt2 --help and every subcommand's --help.
One line per command with its time; a failure prints the command, its exit status and its output's
tail, and the test exits 1 after running the rest.
"""
import json
import os
import random
import shlex
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import gpt2test  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
HARDWARE = os.path.join(ROOT, "inputs", "hardware")
SUBCOMMANDS = ("prepare", "train", "sample", "eval", "convert", "info", "simulate", "plan")
DIGITS = "zero one two three four five six seven eight nine".split()
STEPS, STOP_AT = 8, 4  # the tiny run stops at STOP_AT (--stop-at), the resumed one ends at STEPS
ENV = {"KOKKOS_NUM_THREADS": "1", "GPT2_COMM_TIMEOUT": "120"}  # (gpt2test.run sets OPENBLAS_NUM_THREADS=1)


class Commands:
    """Runs gpt2 in the work folder (relative paths: short, exact command lines) and keeps the score."""

    def __init__(self, args, w):
        self.gpt2, self.mpiexec, self.w = os.path.abspath(args.gpt2), args.mpiexec, w
        self.checks, self.passed = gpt2test.Checks(), []

    def __call__(self, *argv, ranks=1, as_json=False, required=False):
        """gpt2 argv...: the Result (with .json when as_json), None when it failed."""
        cmd = [self.gpt2] + [str(a) for a in argv]
        shown = " ".join(shlex.quote(a) for a in ["gpt2"] + cmd[1:])
        if ranks > 1:
            shown = f"mpiexec -n {ranks} {shown}"
        r = gpt2test.run(cmd, ranks, self.mpiexec, timeout=120, env=ENV, cwd=self.w)
        r.json, why = None, f"exit {r.rc}"
        if r.rc == 0 and as_json:
            try:
                r.json = json.loads(r.out)
            except ValueError as e:
                why = f"exit 0 but not JSON: {e}"
        ok = r.rc == 0 and (r.json is not None or not as_json)
        print(f"{'ok  ' if ok else 'FAIL'} {r.seconds:6.2f} s  {shown}", flush=True)
        if not ok:
            tail = (r.out[-1500:] + r.err[-1500:]).strip()
            print(f"  command: {shlex.join(([self.mpiexec, '-n', str(ranks)] if ranks > 1 else []) + cmd)}"
                  f"\n  (in {self.w})\n  {why}; output tail:\n{tail}", flush=True)
            self.checks.check(False, f"{shown}: {why}")
            if required:
                self.checks.finish("commands (a command the rest need failed)")
            return None
        self.passed.append(shown)
        return r

    def check(self, ok, what):
        return self.checks.check(ok, what)


def shard_tokens(path):
    """The token count in an llm.c shard's header."""
    return int(np.fromfile(path, dtype="<i4", count=3)[2])


def write_corpus(path, lines=600, seed=1):
    """~33 kB of English-ish text (a byte model's loss falls on it within a few steps)."""
    rng = random.Random(seed)
    words = ("the quick brown fox jumps over a lazy dog while the cat sat on the mat and "
             "birds sing in the old tree by the river").split()
    with open(path, "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(8, 14))) + ".\n")
    return os.path.getsize(path)


def write_pairs(w, n=160, seed=3):
    """Numbers to their digits' words ("407" -> "four zero seven"): a TSV, and the same as two files."""
    rng = random.Random(seed)
    with open(os.path.join(w, "pairs.tsv"), "w") as tsv, open(os.path.join(w, "sources.txt"), "w") as src, \
            open(os.path.join(w, "targets.txt"), "w") as tgt:
        for _ in range(n):
            k = str(rng.randrange(1000))
            words = " ".join(DIGITS[int(c)] for c in k)
            tsv.write(f"{k}\t{words}\n")
            src.write(k + "\n")
            tgt.write(words + "\n")


def gpt2_vocab():
    """GPT-2's encoder.json and vocab.bpe where gpt2 looks for them by default, or None."""
    base = os.environ.get("GPT2_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gpt2-kokkos")
    files = [os.path.join(base, "gpt2-vocab", n) for n in ("encoder.json", "vocab.bpe")]
    return files if all(os.path.exists(f) for f in files) else None


def prepare(g, w):
    """gpt2 prepare: byte shards (two train shards), GPT-2 BPE shards, translation pairs two ways."""
    nbytes = write_corpus(os.path.join(w, "corpus.txt"))
    write_pairs(w)
    g("prepare", "--tokenizer", "byte", "--val-fraction", "0.1", "--shard-tokens", "16384", "--out", "byte",
      "corpus.txt", required=True)
    counts = {n: shard_tokens(os.path.join(w, "byte", n + ".bin")) for n in ("train_000", "train_001", "val_000")
              if os.path.exists(os.path.join(w, "byte", n + ".bin"))}
    g.check(len(counts) == 3 and counts["train_000"] == 16384, f"--shard-tokens 16384: two train shards ({counts})")
    g.check(sum(counts.values()) == nbytes, f"byte shards hold every byte ({sum(counts.values())} of {nbytes})")
    g.check(abs(counts.get("val_000", 0) - 0.1 * nbytes) < 0.01 * nbytes, f"--val-fraction 0.1: {counts}")

    vocab = gpt2_vocab()
    if vocab is None:
        print("skipped: gpt2 prepare --tokenizer gpt2 (GPT-2's encoder.json and vocab.bpe are not in "
              "$GPT2_CACHE/gpt2-vocab or ~/.cache/gpt2-kokkos/gpt2-vocab: job_scripts/fetch_gpt2_vocab.sh)")
    else:
        g("prepare", "--tokenizer", "gpt2", "--out", "bpe", "corpus.txt")
        g("prepare", "--tokenizer", "gpt2", "--vocab", vocab[0], "--merges", vocab[1], "--out", "bpe_named",
          "corpus.txt")
        a, b = (os.path.join(w, d, "train_000.bin") for d in ("bpe", "bpe_named"))
        if os.path.exists(a) and os.path.exists(b):
            g.check(open(a, "rb").read() == open(b, "rb").read(), "--vocab/--merges: the default cache's shards")
            g.check(0 < shard_tokens(a) < 0.5 * nbytes, f"BPE: fewer tokens than bytes ({shard_tokens(a)})")

    g("prepare", "--pairs", "--tokenizer", "byte", "--val-fraction", "0.2", "--out", "pairs", "pairs.tsv",
      required=True)
    g("prepare", "--pairs", "--out", "pairs2", "sources.txt", "targets.txt")
    for d in ("pairs", "pairs2"):
        for f in ("train_000.bin", "train_000.mask", "val_000.bin", "val_000.mask", "val.tsv"):
            g.check(os.path.exists(os.path.join(w, d, f)), f"prepare --pairs ({d}) writes {f}")
    with open(os.path.join(w, "pairs", "val.tsv")) as f:
        held = sum(1 for _ in f)
    g.check(held == 32, f"--val-fraction 0.2 of 160 pairs: 32 held out ({held})")
    return vocab


def steps_logged(w, name):
    path = os.path.join(w, name)
    return [x["step"] for x in gpt2test.read_jsonl(path) if "loss" in x] if os.path.exists(path) else []


def train(g, w):
    """gpt2 train: a tiny deck stopped at STOP_AT (--stop-at), resumed to STEPS; a short translation run.
    Returns the checkpoint file."""
    gpt2test.write_deck(os.path.join(w, "tiny.toml"), {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 64},
        "data": {"train": "byte/train_*.bin", "val": "byte/val_*.bin", "seq_len": 64, "tokenizer": "byte"},
        "train": {"batch_size": 8, "steps": 100, "lr": 3e-3, "log_every": 1, "eval_batches": 1}})
    data = ["--set", f"train.steps={STEPS}", "--set", "checkpoint.dir=ckpt"]
    r = g("train", "tiny.toml", *data, "--set", "trace.file=trace.h5", "--set", "trace.units=true",
          "--metrics-jsonl", "metrics.jsonl", "--stop-at", STOP_AT, required=True)
    g.check(f"step {STOP_AT}/{STEPS}" in r.out and f"step {STOP_AT + 1}/" not in r.out, f"--stop-at {STOP_AT}")
    g.check(steps_logged(w, "metrics.jsonl") == list(range(1, STOP_AT + 1)), "--metrics-jsonl: a line a step")
    g.check(os.path.exists(os.path.join(w, f"ckpt/ckpt_{STOP_AT:08d}.h5")), "--stop-at: its step's checkpoint")
    g.check(os.path.exists(os.path.join(w, "trace.h5")), "trace.file written")
    g("train", "tiny.toml", *data, "--set", "checkpoint.resume=true", "--metrics-jsonl", "metrics_resumed.jsonl",
      required=True)
    g.check(steps_logged(w, "metrics_resumed.jsonl") == list(range(STOP_AT + 1, STEPS + 1)), "resumed to the end")
    ckpt_file = f"ckpt/ckpt_{STEPS:08d}.h5"
    g.check(os.path.exists(os.path.join(w, ckpt_file)), f"{ckpt_file} written")

    # inputs/translation.toml, shrunk: BLEU after its epoch and at the end.
    os.makedirs(os.path.join(w, "translation"), exist_ok=True)
    tiny = [f"{k}={v}" for k, v in (("model.n_layer", 2), ("model.n_head", 2), ("model.n_embd", 32),
                                    ("model.block_size", 64), ("data.seq_len", 64), ("train.batch_size", 8),
                                    ("train.steps", 8), ("train.warmup_steps", 2), ("train.eval_batches", 1),
                                    ("train.log_every", 1), ("train.bleu_examples", 8), ("train.bleu_tokens", 24),
                                    ("data.train", "pairs/train_*.bin"), ("data.val", "pairs/val_*.bin"),
                                    ("train.bleu_pairs", "pairs/val.tsv"), ("checkpoint.dir", "translation/ckpt"),
                                    ("trace.file", ""))]
    g("train", os.path.join(ROOT, "inputs", "translation.toml"), *[a for kv in tiny for a in ("--set", kv)],
      "--metrics-jsonl", "translation/metrics.jsonl")
    path = os.path.join(w, "translation", "metrics.jsonl")
    bleu = [x for x in gpt2test.read_jsonl(path) if "bleu" in x] if os.path.exists(path) else []
    g.check(len(bleu) >= 1 and all(0 <= x["bleu"] <= 100 for x in bleu), f"translation: BLEU logged ({bleu})")
    return ckpt_file


def sample_convert(g, w, ckpt_file, vocab):
    """gpt2 convert, and gpt2 sample from the folder, the file and the export: one model, one text."""
    r = g("convert", "--checkpoint", "ckpt", "--out", "model.bin")
    if r:
        head = np.fromfile(os.path.join(w, "model.bin"), dtype="<i4", count=8)
        g.check(list(head[:6]) == [20240326, 3, 64, 256, 2, 2] and head[6] == 64, f"llm.c header: {head}")
    opts = ["--prompt", "the ", "--tokens", 24, "--temperature", 0.9, "--top-k", 8, "--seed", 7]
    texts = {}
    for src in ("ckpt", ckpt_file, "model.bin"):
        r = g("sample", "--checkpoint", src, *opts)
        texts[src] = r.out if r else None
    g.check(len(set(texts.values())) == 1 and (texts["ckpt"] or "").startswith("the "),
            f"the folder, its file and the export give one text with one seed: {texts}")
    greedy = [g("sample", "--checkpoint", ckpt_file, "--tokens", 24, "--temperature", 0, *kv)
              for kv in ([], ["--no-kv-cache"])]
    g.check(all(greedy) and greedy[0].out == greedy[1].out, "--no-kv-cache: the cached greedy text")
    r = g("sample", "--checkpoint", "ckpt", "--tokens", 32, "--benchmark")
    g.check(r is not None and "tokens identical: yes" in r.out, "--benchmark: identical tokens")
    if vocab:  # GPT-2's BPE end to end: a one-step model on the BPE shards, its text decoded
        r = g("train", "tiny.toml", "-q", "--set", "data.train=bpe/train_*.bin", "--set", "model.vocab_size=50257",
              "--set", "data.tokenizer=gpt2", "--set", "train.steps=1", "--set", "checkpoint.dir=ckpt_bpe")
        r = r and g("sample", "--checkpoint", "ckpt_bpe", "--prompt", "the quick", "--tokens", 8)
        g.check(r is not None and r.out.startswith("the quick"), "BPE sample continues its prompt")


def evaluate(g, w):
    """gpt2 eval --bleu on the translation checkpoint: every smoothing and tokenization."""
    r = g("eval", "--bleu", "pairs/val.tsv", "--checkpoint", "translation/ckpt", "--max-tokens", 24, "--limit", 8,
          "--hypotheses", "hyps.txt")
    g.check(r is not None and "BLEU = " in r.out, "eval prints BLEU")
    if os.path.exists(os.path.join(w, "hyps.txt")):
        with open(os.path.join(w, "hyps.txt")) as f:
            g.check(sum(1 for _ in f) == 8, "--hypotheses: one line per translated pair (--limit 8)")
    for smooth, tok in (("exp", "13a"), ("floor", "none"), ("add-k", "13a"), ("none", "none")):
        r = g("eval", "--bleu", "pairs/val.tsv", "--checkpoint", "translation/ckpt", "--max-tokens", 24, "--limit", 4,
              "--smooth", smooth, "--tokenize", tok)
        g.check(r is not None and "4 pairs translated" in r.out, f"--smooth {smooth} --tokenize {tok}: --limit 4")


def info(g, ckpt_file):
    """gpt2 info: build facts, a deck's effective configuration, the keys, checkpoints; text and JSON."""
    g("info")
    r = g("info", "--json", as_json=True)
    if r:
        g.check("1f1b" in r.json.get("strategies", {}).get("schedule", []) and "version" in r.json,
                "info --json: the version and the registered schedules")
    pp2 = ["--set", "parallel.pp=2", "--set", "parallel.microbatches=2"]
    r = g("info", "tiny.toml", *pp2)
    g.check(r is not None and "pipeline stages (blocks each): 1 1" in r.out, "info CONFIG --set: the stage split")
    r = g("info", "tiny.toml", *pp2, "--json", as_json=True)
    if r:
        j = r.json
        g.check(j.get("grid", {}).get("pp") == 2 and j.get("stage_layers") == [1, 1]
                and j.get("config", {}).get("parallel", {}).get("microbatches") == 2
                and j.get("model", {}).get("num_params", 0) > 0,
                f"info CONFIG --set --json: grid, stages, config: {j.get('grid')}")
    r = g("info", "--keys")
    g.check(r is not None and "seq_len" in r.out, "info --keys lists data.seq_len")
    r = g("info", "--keys", "--json", as_json=True)
    if r:
        g.check(any(k.get("key") == "train.steps" for k in r.json.get("keys", [])), "info --keys --json: train.steps")
    for src, fmt, step in (("ckpt", "gpt2-kokkos", STEPS), (ckpt_file, "gpt2-kokkos", STEPS),
                           ("model.bin", "llm.c", -1)):
        r = g("info", "--checkpoint", src)
        g.check(r is not None and "n_embd=64" in r.out, f"info --checkpoint {src}: the model")
        r = g("info", "--checkpoint", src, "--json", as_json=True)
        if r:
            c = r.json.get("checkpoint", {})
            g.check(fmt in c.get("format", "") and c.get("step") == step and c.get("model", {}).get("n_embd") == 64
                    and len(c.get("tensors", [])) == 2 + 12 * 2 + 2,  # wte wpe, 12 a block, lnf w b
                    f"info --checkpoint {src} --json: format, step, model, tensors: {str(c)[:300]}")


def simulate(g):
    """gpt2 simulate: calibrated by the tiny run's trace, on H100s in bf16; the schedule; the links."""
    h100 = os.path.join(HARDWARE, "h100.toml")
    pp2 = ["--set", "parallel.pp=2", "--set", "parallel.microbatches=4"]
    r = g("simulate", "tiny.toml", "--calibrate", "trace.h5")
    g.check(r is not None and "predicted step" in r.out, "simulate: a predicted step")
    r = g("simulate", "tiny.toml", *pp2, "--calibrate", "trace.h5", "--hardware", h100, "--ranks", 4,
          "--precision", "bf16", "--json", as_json=True)
    if r:
        j, lay = r.json, r.json.get("layout", {})
        g.check(j.get("step_ms", 0) > 0 and j.get("tokens_per_s", 0) > 0 and j.get("bubble", 0) > 0
                and len(j.get("memory_bytes", [])) == 4 and len(j.get("memory_per_stage", [])) == 2
                and "mfu" in j and "exposed_comm_ms" in j,
                f"simulate --json: step, tokens/s, MFU, a pp 2 bubble, memory per rank and stage: {str(j)[:300]}")
        g.check((lay.get("dp"), lay.get("pp"), lay.get("precision"), lay.get("world_size")) == (2, 2, "bf16", 4)
                and j.get("calibration") == "trace.h5" and j.get("hardware", "").endswith("h100.toml"),
                f"simulate --json: --ranks 4 -> dp 2, --precision, --calibrate, --hardware: {lay}")
    r = g("simulate", "tiny.toml", *pp2, "--print-schedule")
    g.check(r is not None and "rank 0:" in r.out and "rank 1:" in r.out, "--print-schedule: a line per rank")
    r = g("simulate", "--measure-comm", ranks=2)
    g.check(r is not None and "bandwidth_gbs" in r.out, "--measure-comm: hardware-file lines")


def plan(g):
    """gpt2 plan: the tiny model on 4 H100s, calibrated; --top, --json, --json --all."""
    base = ["plan", "tiny.toml", "--hardware", os.path.join(HARDWARE, "h100.toml"), "--gpus", 4, "--global-batch", 16,
            "--calibrate", "trace.h5"]
    r = g(*base, "--top", 3)
    g.check(r is not None and "best:" in r.out, "plan names the best layout")
    r = g(*base, "--top", 3, "--json", as_json=True)
    if r:
        j, lays = r.json, r.json.get("layouts", [])
        g.check(1 <= len(lays) <= 3 and j.get("gpus") == 4 and j.get("global_batch") == 16
                and j.get("calibration") == "trace.h5", f"plan --top 3 --json: {str(j)[:300]}")
        g.check(all(x["dp"] * x["tp"] * x["pp"] * x.get("cp", 1) == 4 for x in lays), "every layout uses 4 GPUs")
    r = g(*base, "--json", "--all", as_json=True)
    if r:
        j, lays = r.json, r.json.get("layouts", [])
        g.check(all("fits" in x for x in lays) and sum(x["fits"] for x in lays) == j.get("fitting"),
                f"plan --json --all: every layout with 'fits' ({len(lays)} layouts, {j.get('fitting')} fitting)")


def helps(g):
    """gpt2 --help and each subcommand's."""
    r = g("--help")
    g.check(r is not None and all(s in r.out for s in SUBCOMMANDS), "gpt2 --help names every subcommand")
    for sub in SUBCOMMANDS:
        r = g(sub, "--help")
        g.check(r is not None and f"gpt2 {sub}" in r.out, f"gpt2 {sub} --help: its usage")


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(os.path.abspath(args.workdir))
    g, t0 = Commands(args, w), time.time()
    vocab = prepare(g, w)
    ckpt_file = train(g, w)
    sample_convert(g, w, ckpt_file, vocab)
    evaluate(g, w)
    info(g, ckpt_file)
    simulate(g)
    plan(g)
    helps(g)
    print(f"{len(g.passed)} commands exited 0 in {time.time() - t0:.1f} s")
    g.checks.finish("commands")


if __name__ == "__main__":
    main()
