#!/usr/bin/python3
"""The `gpt2` command against PyTorch through llm.c's file formats (ctest: e2e_pytorch_*).

Starts from tests/fixtures/e2e_model.bin (an llm.c model file) and trains 20 steps on
tests/fixtures/e2e_train.bin (an llm.c token shard) with shuffle off, constant lr, weight decay on
rank >= 2 tensors, clipping at 1.0, betas 0.9/0.95, eps 1e-8. The loss of every step must equal a
PyTorch GPT-2 trained on the same weights and batches (tests/fixtures/e2e_expected.json, written by
tests/reference/make_fixtures.py) to 1e-4 relative -- on one rank, and with --ranks 2 as dp=2 and as
a 2-stage pipeline.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--ranks", type=int, default=1, choices=[1, 2])
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    want = json.load(open(os.path.join(FIXTURES, "e2e_expected.json")))
    deck = {
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 97, "block_size": 32},
        "data": {"train": os.path.join(FIXTURES, "e2e_train.bin"), "seq_len": want["seq_len"], "shuffle": False},
        "train": {"batch_size": want["batch_size"], "steps": want["steps"], "lr": want["lr"],
                  "schedule": "constant", "warmup_steps": 0, "weight_decay": want["weight_decay"],
                  "grad_clip": want["grad_clip"], "beta1": want["beta1"], "beta2": want["beta2"],
                  "eps": want["eps"]},
        "checkpoint": {"init_from": os.path.join(FIXTURES, "e2e_model.bin")},
    }
    layouts = [{}] if args.ranks == 1 else [{"dp": 2}, {"pp": 2, "microbatches": 2, "schedule": "1f1b"}]
    checks = gpt2test.Checks()
    for layout in layouts:
        deck["parallel"] = layout
        name = "_".join(f"{k}{v}" for k, v in layout.items()) or "one_rank"
        cfg = os.path.join(args.workdir, f"{name}.toml")
        metrics = os.path.join(args.workdir, f"{name}.jsonl")
        gpt2test.write_deck(cfg, deck)
        r = gpt2test.run([args.gpt2, "train", cfg, "--metrics-jsonl", metrics, "-q"], args.ranks, args.mpiexec)
        if not checks.check(r.rc == 0, f"{name}: gpt2 train exited {r.rc}: {r.err[-2000:]}"):
            continue
        got = [m["loss"] for m in gpt2test.read_jsonl(metrics) if "loss" in m]
        checks.check(len(got) == want["steps"], f"{name}: {len(got)} steps, expected {want['steps']}")
        for i, (g, w) in enumerate(zip(got, want["loss"])):
            checks.check(abs(g - w) <= 1e-4 * abs(w), f"{name}: step {i + 1} loss {g:.8f} vs PyTorch {w:.8f}")
        worst = max(abs(g - w) / abs(w) for g, w in zip(got, want["loss"]))
        print(f"{name}: 20 losses within {worst:.2e} relative of PyTorch")
    checks.finish("e2e_pytorch")


if __name__ == "__main__":
    main()
