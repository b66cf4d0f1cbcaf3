#!/usr/bin/python3
"""Bad input (ctest: bad_input): every case must stop with ONE line `error: <input>: <what was
expected>` (printed once, not once per rank), a non-zero exit on every rank within 10 s, and leave
an existing checkpoint folder and trace untouched. Training cases run on 2 ranks unless the case is
about the number of ranks.
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


HARDWARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "inputs", "hardware", "h100.toml")


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    args = ap.parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    P = lambda *n: os.path.join(w, *n)  # noqa: E731
    tokens = gpt2test.learnable_tokens(4000, 64)

    # Good inputs, and a protected checkpoint folder + trace made by a real run. Its checkpoints are
    # binary: the broken ones below are made by editing that format's sections (the HDF5 format's
    # corruptions are checkpoint_h5's and checkpoint_dir's).
    gpt2test.write_shard(P("train.bin"), tokens)
    gpt2test.write_deck(P("good.toml"), gpt2test.tiny_deck(P("train.bin"), checkpoint__dir=P("ckpt"),
                                                           trace__file=P("trace.h5"), train__steps=2,
                                                           parallel__dp=2, checkpoint__format="bin"))
    r = gpt2test.run([args.gpt2, "train", P("good.toml"), "-q"], 2, args.mpiexec)
    if r.rc != 0:
        raise SystemExit(f"setup run failed: {r.err}")
    protected = [P("ckpt"), P("trace.h5")]
    before = gpt2test.digest(protected)
    ckpt = os.path.join(P("ckpt"), open(P("ckpt", "latest")).read().strip())

    # Broken files.
    gpt2test.write_shard(P("truncated.bin"), tokens, count=len(tokens) + 100)
    gpt2test.write_shard(P("magic.bin"), tokens, magic=12345)
    gpt2test.write_shard(P("version.bin"), tokens, version=7)
    gpt2test.write_shard(P("big_token.bin"), np.append(tokens, 64))
    with open(P("short.bin"), "wb") as f:
        f.write(b"\0" * 100)
    corrupt = P("corrupt.bin")
    shutil.copy(ckpt, corrupt)
    with open(corrupt, "r+b") as f:  # flip one byte in the middle of the parameters
        f.seek(os.path.getsize(corrupt) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x40]))
    with open(P("empty.txt"), "w"):
        pass
    with open(P("bad_utf8.txt"), "wb") as f:
        f.write(b"hello \xff\xfe world")
    with open(P("syntax.toml"), "w") as f:
        f.write("[model]\nn_layer = = 2\n")
    with open(P("base_dot.toml"), "w") as f:
        f.write('base = "."\n')
    with open(P("base_self.toml"), "w") as f:
        f.write('base = "base_self.toml"\n')
    # Our checkpoint claiming a model of 2^20 layers of width 2^14 (~3e15 parameters) over a few
    # bytes of parameters: refused before anything is allocated for that shape.
    absurd = dict(gpt2test.read_checkpoint(ckpt))
    absurd["model"] = np.array([1 << 20, 16, 1 << 14, 64, 16], "<i4").tobytes()
    absurd["params"] = absurd["params"][:64]
    gpt2test.write_checkpoint(P("absurd.bin"), list(absurd.items()))
    os.makedirs(P("empty_ck"))
    os.makedirs(P("all_corrupt"))
    shutil.copy(corrupt, P("all_corrupt", "ckpt_00000002.bin"))
    # A minimal byte-level BPE vocabulary (the 256 byte symbols and one merge): enough to reach the
    # UTF-8 check without GPT-2's real files.
    byte_syms = [c for c in range(ord("!"), ord("~") + 1)] + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra, syms = 0, []
    for b in range(256):
        syms.append(chr(b) if b in byte_syms else chr(256 + extra))
        extra += b not in byte_syms
    json.dump(dict({s: i for i, s in enumerate(syms)}, ab=256), open(P("encoder.json"), "w"))
    with open(P("vocab.bpe"), "w") as f:
        f.write("#version: 0.2\na b\n")

    schedules = {"typo.sched": "# a schedule file with a typo\nrank 0: F0 B0\nrank 1: F0 X0\n",
                 "m2.sched": "rank 0: F0 F1 B0 B1\nrank 1: F0 B0 F1 B1\n",      # 2 microbatches
                 "hangs.sched": "rank 0: F0 B0 F1 B1\nrank 1: F1 B1 F0 B0\n"}   # each waits for the other
    for name, text in schedules.items():
        with open(P(name), "w") as f:
            f.write(text)

    def deck(name, **overrides):
        base = dict(checkpoint__dir=P("ckpt"), trace__file=P("trace.h5"), parallel__dp=2)
        base.update(overrides)
        path = P(name + ".toml")
        if os.path.exists(path):  # cases are built up front: a reused name would run another case's deck
            raise SystemExit(f"test defect: two cases write deck {name}")
        gpt2test.write_deck(path, gpt2test.tiny_deck(P("train.bin"), **base))
        return path

    train = lambda cfg, *more: [args.gpt2, "train", cfg, "-q", *more]  # noqa: E731
    cases = [  # (name, command, ranks, expected text)
        ("missing shard", train(deck("c1", data__train=P("nope_*.bin"))), 2, "data.train: no token shard matches"),
        ("truncated shard", train(deck("c2", data__train=P("truncated.bin"))), 2, "truncated or corrupt"),
        ("shard shorter than its header", train(deck("c3", data__train=P("short.bin"))), 2, "1024-byte header"),
        ("wrong magic", train(deck("c4", data__train=P("magic.bin"))), 2, "not a token shard: magic 12345"),
        ("wrong version", train(deck("c5", data__train=P("version.bin"))), 2, "unsupported token shard version 7"),
        ("token beyond vocabulary", train(deck("c6", data__train=P("big_token.bin"))), 2, "not below model.vocab_size (64)"),
        ("missing validation shard", train(deck("c7", data__val=P("val_*.bin"))), 2, "data.val: no token shard matches"),
        ("checkpoint of another config", train(deck("c8", checkpoint__init_from=ckpt, model__n_embd=48)), 2, "n_embd: 32 vs 48"),
        ("corrupted checkpoint", train(deck("c9", checkpoint__init_from=corrupt)), 2, "checksum mismatch"),
        ("init_from not a model", train(deck("c10", checkpoint__init_from=P("train.bin"))), 2, "neither a gpt2-kokkos checkpoint"),
        ("misspelled key", train(deck("c11"), "--set", "train.lrr=1e-3"), 2, "train.lrr: unknown configuration key (did you mean train.lr?)"),
        ("wrong value type", train(deck("c12"), "--set", "train.lr=\"fast\""), 2, "train.lr: expected a number, got a string"),
        ("zero batch size", train(deck("c13", train__batch_size=0)), 2, "train.batch_size: must be a positive integer"),
        ("negative steps", train(deck("c14", train__steps=-3)), 2, "train.steps: must be a positive integer"),
        ("unknown Newton-Schulz dtype", train(deck("c14b"), "--set", "train.ns_dtype=\"fp8\""), 2,
         "train.ns_dtype: expected fp32 or bf16, got \"fp8\""),
        ("dp*pp is not the world size", train(deck("c15", parallel__dp=1)), 2, "must equal the number of MPI ranks (2)"),
        ("more stages than layers", train(deck("c16", parallel__dp=1, parallel__pp=4)), 4, "more pipeline stages (4) than model.n_layer (2)"),
        ("batch not divisible", train(deck("c17", parallel__microbatches=3)), 2, "must be divisible by parallel.dp * parallel.microbatches"),
        ("seq_len above block_size", train(deck("c18", data__seq_len=32)), 2, "data.seq_len: must be at most model.block_size (16)"),
        ("negative host threads", train(deck("c40", parallel__host_threads=-2)), 2, "parallel.host_threads: must be >= 0, got -2"),
        ("unknown schedule", train(deck("c19", parallel__schedule="zigzag")), 2,
         "parallel.schedule: expected naive, gpipe, 1f1b, interleaved, zb-h1, zb-v, interleaved-zb or dualpipev"),
        ("virtual stages that do not divide the layers",
         train(deck("c30", parallel__dp=1, parallel__pp=2, parallel__schedule="interleaved", parallel__virtual_stages=3)), 2,
         "parallel.virtual_stages: interleaved splits the blocks into 3 chunks per rank x parallel.pp = 6 virtual stages"),
        ("interleaved with microbatches not a multiple of pp",
         train(deck("c31", parallel__dp=1, parallel__pp=2, parallel__schedule="interleaved", parallel__virtual_stages=2,
                    parallel__microbatches=3, model__n_layer=4, train__batch_size=9)), 2,
         "parallel.microbatches: the interleaved schedule runs microbatches in groups of parallel.pp (2)"),
        ("a layer split zb-v cannot use", train(deck("c32", parallel__dp=1, parallel__pp=2, parallel__schedule="zb-v")), 2,
         "parallel.schedule: zb-v splits the blocks into 2 chunks per rank x parallel.pp = 4 virtual stages, which must divide model.n_layer (2)"),
        ("missing schedule file", train(deck("s1", parallel__dp=1, parallel__pp=2, parallel__schedule_file=P("nope.sched"))), 2,
         f"parallel.schedule_file: expected a schedule file, got {P('nope.sched')} (no such file)"),
        ("schedule file with a typo", train(deck("s2", parallel__dp=1, parallel__pp=2, parallel__schedule_file=P("typo.sched"))), 2,
         f"parallel.schedule_file: {P('typo.sched')}:3: expected a pass such as F3"),
        ("schedule file for another layout",
         train(deck("s3", parallel__dp=1, parallel__pp=2, parallel__schedule_file=P("m2.sched"))), 2,
         "is written for 2 pipeline ranks and 2 microbatches (its rank lines, its largest microbatch + 1); the deck has "
         "parallel.pp = 2 and parallel.microbatches = 1"),
        ("schedule file that deadlocks",
         train(deck("s4", parallel__dp=1, parallel__pp=2, parallel__microbatches=2, parallel__schedule_file=P("hangs.sched"))), 2,
         "pass lists for parallel.pp = 2, parallel.microbatches = 2 cannot run: deadlock: rank 0 waits for the gradient of microbatch 0 from virtual stage 1"),
        ("virtual stages with a one-chunk schedule", train(deck("c33", parallel__virtual_stages=2)), 2,
         "parallel.virtual_stages: is for the schedules whose chunks per rank you choose"),
        ("unwritable trace folder", train(deck("c20", trace__file="/proc/gpt2/trace.h5")), 2, "trace.file: cannot create folder"),
        ("unwritable checkpoint folder", train(deck("c21", checkpoint__dir="/proc/gpt2-ckpt")), 2, "checkpoint.dir: cannot create folder"),
        ("unwritable trace folder, 1 rank", train(deck("c20b", parallel__dp=1, trace__file="/proc/gpt2/trace.h5")), 1, "trace.file: cannot create folder"),
        ("unwritable checkpoint folder, 1 rank", train(deck("c21b", parallel__dp=1, checkpoint__dir="/proc/gpt2-ckpt")), 1, "checkpoint.dir: cannot create folder"),
        ("stage_layers not summing", train(deck("c22", parallel__dp=1, parallel__pp=2, parallel__stage_layers=[1, 2])), 2, "entries must sum to model.n_layer (2)"),
        ("missing input deck", train(P("nope.toml")), 2, "cannot open the input deck"),
        ("TOML syntax error", train(P("syntax.toml")), 2, "(line 2)"),
        ("malformed --set", train(deck("c23"), "--set", "lr"), 2, "expected section.key=value"),
        ("resume without a folder", train(deck("c24", checkpoint__dir="", checkpoint__resume=True)), 2, "checkpoint.resume: needs checkpoint.dir"),
        ("unknown ZeRO level", train(deck("c25", parallel__zero=5)), 2, "parallel.zero: expected 0, 1, 2 or 3, got 5"),
        ("tp that does not divide the heads", train(deck("c27", parallel__dp=1, parallel__tp=4)), 4,
         "parallel.tp: must divide model.n_head (2)"),
        ("tp that does not divide the padded vocabulary",
         train(deck("c28", parallel__dp=1, parallel__tp=3, model__n_head=6, model__n_embd=48)), 3,
         "parallel.tp: must divide the padded vocabulary (128"),
        ("sequence parallel with tokens not divisible by tp",
         train(deck("c41", parallel__dp=1, parallel__tp=2, parallel__sequence_parallel=True, train__batch_size=1, data__seq_len=15)), 2,
         "parallel.sequence_parallel: needs a microbatch's tokens (15) divisible by parallel.tp (2)"),
        ("dp*pp*tp is not the world size", train(deck("c29", parallel__dp=1, parallel__tp=2)), 4,
         "parallel.dp * parallel.pp * parallel.tp: must equal the number of MPI ranks (4), got 1 * 1 * 2 = 2"),
        ("empty text for prepare", [args.gpt2, "prepare", "--out", P("out_empty"), P("empty.txt")], 1, "no text to tokenize"),
        ("invalid UTF-8 for the GPT-2 tokenizer", [args.gpt2, "prepare", "--tokenizer", "gpt2", "--vocab", P("encoder.json"),
                                                   "--merges", P("vocab.bpe"), "--out", P("out_utf8"), P("bad_utf8.txt")], 1, "invalid UTF-8 at byte offset 6"),
        ("unknown tokenizer", [args.gpt2, "prepare", "--tokenizer", "wordpiece", "--out", P("o"), P("empty.txt")], 1, "--tokenizer"),
        ("sample from a missing checkpoint", [args.gpt2, "sample", "--checkpoint", P("nope.bin")], 1, "no such checkpoint"),
        # Every output is checked before step 1, on the ranks that write it.
        ("checkpoint.dir is a file", train(deck("p25", checkpoint__dir=P("train.bin"))), 2, f"checkpoint.dir: {P('train.bin')} is a file, expected a folder"),
        ("checkpoint.dir under a file", train(deck("p26", checkpoint__dir=P("train.bin", "ck"))), 2, f"checkpoint.dir: {P('train.bin')} is a file, expected a folder"),
        ("trace.file is a folder", train(deck("p27", trace__file=w)), 2, f"trace.file: {w} is a folder, expected a file name"),
        ("--metrics-jsonl is a folder", train(deck("p28"), "--metrics-jsonl", w), 2, f"--metrics-jsonl: {w} is a folder, expected a file name"),
        ("--metrics-jsonl unwritable", train(deck("p29"), "--metrics-jsonl", "/proc/gpt2/m.jsonl"), 2, "--metrics-jsonl: cannot create folder /proc/gpt2"),
        # Resuming: true needs a checkpoint; only true, false and "auto"; none that verifies.
        ("resume true on an empty folder", train(deck("p30", checkpoint__dir=P("empty_ck"), checkpoint__resume=True)), 2, "checkpoint.resume: is true but"),
        ("resume with an unknown word", train(deck("p31"), "--set", "checkpoint.resume=sometimes"), 2, 'checkpoint.resume: expected true, false or "auto", got "sometimes"'),
        ("unknown model.attention", train(deck("at1"), "--set", "model.attention=flash"), 2,
         'model.attention: expected auto, fused or materialized, got "flash"'),
        ("unknown checkpoint.format", train(deck("cf1"), "--set", "checkpoint.format=zip"), 2,
         'checkpoint.format: expected h5 or bin, got "zip"'),
        ("tf32 with an unknown word", train(deck("p31t"), "--set", "train.tf32=maybe"), 2, 'train.tf32: expected true, false or "auto", got "maybe"'),
        ("no checkpoint verifies", train(deck("p32", checkpoint__dir=P("all_corrupt"), checkpoint__resume="auto")), 2, "checkpoint.resume: no checkpoint in"),
        ("negative checkpoint.keep", train(deck("p33", checkpoint__keep=-1)), 2, "checkpoint.keep: must be >= 0"),
        ("unknown train.nonfinite", train(deck("p34", train__nonfinite="ignore")), 2, "train.nonfinite: expected stop or skip, got \"ignore\""),
        # Document masks need the fused kernels and an end-of-text token of the vocabulary.
        ("document masks, materialized attention", train(deck("dm1", data__document_mask=True, model__attention="materialized")), 2,
         "model.attention: materialized attention cannot keep to documents (data.document_mask = true)"),
        ("document masks, eot_token beyond the vocabulary", train(deck("dm2", data__document_mask=True, data__eot_token=70000)), 2,
         "data.eot_token: must be a token of the vocabulary"),
        # Mixed precision: the precision's name, loss-scale settings that make no sense, the reduction's dtype.
        ("unknown train.precision", train(deck("mp1", train__precision="fp8")), 2, 'train.precision: expected fp32, bf16 or fp16, got "fp8"'),
        ("unknown train.recompute", train(deck("rc1", train__recompute="some")), 2,
         'train.recompute: expected none, selective or full, got "some"'),
        ("zero train.recompute_every", train(deck("rc2", train__recompute="full", train__recompute_every=0)), 2,
         "train.recompute_every: must be at least 1"),
        ("plan for no devices", [args.gpt2, "plan", P("good.toml"), "--hardware", HARDWARE, "--gpus", "0"], 2,
         "a positive whole number is needed, got 0"),
        ("zero initial_loss_scale", train(deck("mp2", train__precision="fp16", train__initial_loss_scale=0)), 2,
         "train.initial_loss_scale: must be a positive finite number"),
        ("negative initial_loss_scale", train(deck("mp3", train__initial_loss_scale=-1.0)), 2,
         "train.initial_loss_scale: must be a positive finite number"),
        ("infinite initial_loss_scale", train(deck("mp4", train__precision="fp16"), "--set", "train.initial_loss_scale=inf"), 2,
         "train.initial_loss_scale: must be a positive finite number"),
        ("zero loss_scale_window", train(deck("mp5", train__precision="fp16", train__loss_scale_window=0)), 2,
         "train.loss_scale_window: must be at least 1"),
        ("unknown grad_reduce_dtype", train(deck("mp6", parallel__grad_reduce_dtype="fp16")), 2,
         'parallel.grad_reduce_dtype: expected fp32 or bf16, got "fp16"'),
        ("unknown param_gather_dtype", train(deck("mp7", parallel__param_gather_dtype="bf16")), 2,
         'parallel.param_gather_dtype: expected auto or fp32, got "bf16"'),
        ("base is a folder", train(P("base_dot.toml")), 2, "base: " + w + "/. is a folder, expected another deck"),
        ("base is the deck itself", train(P("base_self.toml")), 2, "base_self.toml is this deck itself"),
        # A shape read from a checkpoint is checked against the file before anything is allocated.
        ("absurd checkpoint shape (sample)", [args.gpt2, "sample", "--checkpoint", P("absurd.bin")], 1, "corrupt checkpoint: section params holds 64 bytes"),
        ("absurd checkpoint shape (info)", [args.gpt2, "info", "--checkpoint", P("absurd.bin")], 1, "corrupt checkpoint: section params holds 64 bytes"),
        ("absurd checkpoint shape (init_from)", train(deck("p35", checkpoint__init_from=P("absurd.bin"))), 2, "corrupt checkpoint: section params holds 64 bytes"),
    ]
    exit_two = {"absurd checkpoint shape (sample)", "absurd checkpoint shape (info)", "absurd checkpoint shape (init_from)",
                "checkpoint.dir is a file", "trace.file is a folder", "--metrics-jsonl is a folder", "no checkpoint verifies"}
    checks = gpt2test.Checks()
    for name, cmd, ranks, expected in cases:
        r = gpt2test.run(cmd, ranks, args.mpiexec, timeout=30)
        text = r.out + r.err
        lines = [l for l in text.splitlines() if l.startswith("error")]
        ok = checks.check(r.rc not in (0, 124) and (r.rc == 2 or name not in exit_two), f"{name}: exit status {r.rc}")
        ok &= checks.check(r.seconds < 10, f"{name}: took {r.seconds:.1f} s (limit 10)")
        ok &= checks.check(expected in text, f"{name}: expected {expected!r} in:\n{text.strip()[-600:]}")
        ok &= checks.check(len(lines) == 1, f"{name}: {len(lines)} error lines (want 1):\n{text.strip()[-600:]}")
        if ok:
            print(f"ok   {name:40s} rc={r.rc} {r.seconds:4.1f}s  {lines[0][:110]}")
    checks.check(gpt2test.digest(protected) == before, "a failed run changed the existing checkpoint folder or trace")
    checks.check(not os.path.exists(P("out_empty", "train_000.bin")), "prepare wrote shards for empty text")
    checks.finish(f"bad_input ({len(cases)} cases)")


if __name__ == "__main__":
    main()
