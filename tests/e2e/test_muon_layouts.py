#!/usr/bin/python3
"""Muon on the layouts that split its matrices (ctest: muon_layouts): ZeRO-1/2/3 over 2, 3 or 4
replicas (with buckets small enough that a matrix reaches a rank as several ranges), tensor
parallelism (qkv and fc split by rows, the projections by columns, with and without sequence
parallelism), both at once, with pipeline and context parallelism, under NCCL's ordering modelled on
the host (mpi-ordered, teams of 2 threads), and in bf16; and ZeRO over 3 replicas on a model whose
units do not split evenly (n_embd 40: the layout pads each unit), with AdamW and Muon: every step's
loss, gradient norm and validation loss equal the one-rank run's (fp32 1e-5 / 1e-4; bf16 1e-3 / 5e-2).
A run resumed on another layout from a checkpoint of the padded, sharded one continues the one-rank
run. (The layout matrix holds Muon to one rank on every axis pairwise; this is the quick check, a few
seconds a case.)
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

STEPS = 4
TOLERANCE = {"fp32": (1e-5, 1e-4), "bf16": (1e-3, 5e-2)}  # losses, gradient norms (relative)
SMALL_BUCKETS = 0.0015  # MiB: ~390 values, so each matrix of the tiny model spans several buckets
LAYOUTS = [
    {"dp": 2, "bucket_mb": SMALL_BUCKETS},  # (replicated, each matrix over several buckets: still whole)
    {"dp": 2, "zero": 1, "bucket_mb": SMALL_BUCKETS},
    {"dp": 2, "zero": 2},
    {"dp": 4, "zero": 3, "bucket_mb": SMALL_BUCKETS},
    {"dp": 3, "zero": 3, "bucket_mb": SMALL_BUCKETS},
    {"tp": 2},
    {"tp": 4, "sequence_parallel": True},
    {"dp": 2, "tp": 2, "zero": 3, "bucket_mb": SMALL_BUCKETS},
    {"dp": 2, "pp": 2, "zero": 1, "bucket_mb": SMALL_BUCKETS},
    {"dp": 2, "cp": 2, "zero": 2},
    {"dp": 2, "zero": 3, "comm": "mpi-ordered", "bucket_mb": SMALL_BUCKETS},
    {"dp": 2, "tp": 2, "zero": 2, "precision": "bf16"},
    {"dp": 3, "zero": 3, "n_embd": 40, "optimizer": "adamw", "bucket_mb": SMALL_BUCKETS},
    {"dp": 3, "zero": 1, "n_embd": 40},
    {"dp": 3, "zero": 2, "n_embd": 40, "precision": "bf16", "bucket_mb": SMALL_BUCKETS},
]
UNEVEN = {"dp": 3, "zero": 3, "n_embd": 40, "bucket_mb": SMALL_BUCKETS}  # resumed on RESUMED
RESUMED = {"dp": 2, "tp": 2, "zero": 1, "n_embd": 40}


def model_of(layout):
    """(precision, n_embd, optimizer): the one-rank run a layout is held to."""
    return layout.get("precision", "fp32"), layout.get("n_embd", 48), layout.get("optimizer", "muon")


def ranks(par):
    return par.get("dp", 1) * par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1)


def describe(par):
    return " ".join(f"{k} {v}" for k, v in par.items())


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    P = lambda *n: os.path.join(w, *n)  # noqa: E731
    c = gpt2test.Checks()
    gpt2test.write_shard(P("train.bin"), gpt2test.learnable_tokens(8000, 64))
    gpt2test.write_shard(P("val.bin"), gpt2test.learnable_tokens(2000, 64, seed=99))

    def train(name, layout, stop_at=STEPS, ckpt=""):
        precision, n_embd, optimizer = model_of(layout)
        par = {k: v for k, v in layout.items() if k not in ("precision", "n_embd", "optimizer")}
        deck = {"model": {"n_layer": 4, "n_head": 4, "n_embd": n_embd, "vocab_size": 64, "block_size": 16},
                "data": {"train": P("train.bin"), "val": P("val.bin"), "seq_len": 16},
                "train": {"batch_size": 12, "steps": STEPS, "lr": 1e-3, "eval_every": 2, "eval_batches": 2,
                          "precision": precision, "seed": 3, "optimizer": optimizer, "muon_lr": 0.05},
                "parallel": par}
        if ckpt:
            deck["checkpoint"] = {"dir": ckpt, "every": 2, "keep": 0, "resume": "auto"}
        gpt2test.write_deck(P(name + ".toml"), deck)
        metrics = P(name + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        ordered = par.get("comm") == "mpi-ordered"
        env = {"OMP_NUM_THREADS": "2" if ordered else "1", "KOKKOS_NUM_THREADS": "2" if ordered else "1"}
        if ordered:
            env["GPT2_TEAM_SIZE"] = "2"  # a GPU's teams have many threads
        r = gpt2test.run([args.gpt2, "train", P(name + ".toml"), "--metrics-jsonl", metrics, "-q",
                          "--stop-at", str(stop_at)], ranks(par), args.mpiexec, timeout=180, env=env)
        if not c.check(r.rc == 0, f"{name} ({describe(layout)}): exit {r.rc}\n{r.err[-3000:]}"):
            return None
        rows = gpt2test.read_jsonl(metrics)
        return {k: {m["step"]: m[k] for m in rows if k in m} for k in ("loss", "grad_norm", "val_loss")}

    def compare(what, got, ref, precision, steps):
        loss_tol, norm_tol = TOLERANCE[precision]
        for kind in ("loss", "grad_norm", "val_loss"):
            want_steps = [s for s in steps if kind != "val_loss" or s % 2 == 0]
            c.check(sorted(got[kind]) == want_steps, f"{what}: {kind} rows {sorted(got[kind])}, expected {want_steps}")
            tol = norm_tol if kind == "grad_norm" else loss_tol
            for s in want_steps:
                v, want = got[kind].get(s), ref[kind][s]
                if v is not None:
                    c.check(abs(v - want) <= tol * abs(want), f"{what}: step {s} {kind} {v!r}, one rank {want!r}")

    refs = {}
    for key in sorted({model_of(layout) for layout in LAYOUTS + [UNEVEN]}):
        precision, n_embd, optimizer = key
        refs[key] = train(f"ref_{precision}_{n_embd}_{optimizer}",
                          {"precision": precision, "n_embd": n_embd, "optimizer": optimizer})
    if None in refs.values():
        c.finish("muon_layouts")
    first = refs[("fp32", 48, "muon")]
    c.check(first["loss"][STEPS] < first["loss"][1], f"the one-rank Muon run learns: losses {first['loss']}")
    for i, layout in enumerate(LAYOUTS):
        got = train(f"case{i}", layout)
        if got is not None:
            precision = model_of(layout)[0]
            compare(f"case{i} ({describe(layout)})", got, refs[model_of(layout)], precision, list(range(1, STEPS + 1)))
            print(f"  case{i}: {describe(layout)}: equal to one rank", flush=True)
    # Resume across layouts: steps 1-2 sharded unevenly (ZeRO-3 over 3, units padded), steps 3-4 on
    # tp 2 with ZeRO-1 over 2.
    ck = gpt2test.fresh_dir(P("resume_ck"))
    if train("resume_a", UNEVEN, stop_at=2, ckpt=ck) is not None:
        for f in os.listdir(ck):
            if not f.startswith("ckpt_00000002"):
                (shutil.rmtree if os.path.isdir(os.path.join(ck, f)) else os.remove)(os.path.join(ck, f))
        second = train("resume_b", RESUMED, ckpt=ck)
        if second is not None:
            compare(f"resumed on {describe(RESUMED)} from {describe(UNEVEN)}", second, refs[model_of(RESUMED)], "fp32",
                    [3, 4])
    c.finish("muon_layouts")


if __name__ == "__main__":
    main()
