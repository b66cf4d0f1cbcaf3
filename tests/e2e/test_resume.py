#!/usr/bin/python3
"""Checkpoint and resume (ctest: e2e_resume).

A run of 8 steps that never stops, against a run stopped after 4 steps (its checkpoint written at
step 4) and resumed with checkpoint.resume = true: the losses of steps 5..8 must be bit-identical
(JSON carries them with 17 significant digits), with shuffling on so the data position matters too,
and the text sampled at step 8 must be the same (the sampler's random state travels in the checkpoint).
Also: `gpt2 convert` to llm.c's format and `gpt2 sample` from the checkpoint work, and a resume
with a different model configuration is refused with a message naming what differs and leaves
the checkpoints untouched.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--ranks", type=int, default=1)
    args = ap.parse_args()
    w, train = gpt2test.fresh_workdir_with_shard(args.workdir)
    extra = {"parallel__dp": args.ranks} if args.ranks > 1 else {}
    checks = gpt2test.Checks()

    def train_run(name, steps, resume, ckpt_dir, stop_at=0, **more):
        deck = gpt2test.tiny_deck(
            train, data__shuffle=True, train__steps=steps, train__schedule="cosine", train__warmup_steps=2,
            train__sample_every=4, train__sample_tokens=12,
            checkpoint__dir=ckpt_dir, checkpoint__every=4, checkpoint__resume=resume, **extra, **more)
        cfg = os.path.join(w, name + ".toml")
        gpt2test.write_deck(cfg, deck)
        metrics = os.path.join(w, name + ".jsonl")
        cmd = [args.gpt2, "train", cfg, "--metrics-jsonl", metrics, "-q"]
        r = gpt2test.run(cmd + (["--stop-at", str(stop_at)] if stop_at else []), args.ranks, args.mpiexec)
        return r, metrics

    def sample_at(r, step):
        """The text the run sampled at `step` (printed between its marker lines)."""
        marker = f"--- sample at step {step} ---\n"
        return r.out.split(marker, 1)[1].split("\n---\n", 1)[0] if marker in r.out else None

    # The run that never stops; then the same run stopped after step 4 and resumed to 8.
    r, full = train_run("full", 8, False, os.path.join(w, "ck_full"))
    checks.check(r.rc == 0, f"full run failed: {r.err[-1500:]}")
    full_sample = sample_at(r, 8)
    deck_dir = os.path.join(w, "ck_split")
    r, first = train_run("first_half", 8, False, deck_dir, stop_at=4)
    checks.check(r.rc == 0, f"first half failed: {r.err[-1500:]}")
    r, second = train_run("second_half", 8, True, deck_dir)
    checks.check(r.rc == 0, f"resume failed: {r.err[-1500:]}")
    checks.check(full_sample is not None and sample_at(r, 8) == full_sample,
                 f"the sample at step 8 differs after resume:\n  never stopped {full_sample!r}\n  resumed {sample_at(r, 8)!r}")
    if not checks.failures:
        a = [m["loss"] for m in gpt2test.read_jsonl(full) if "loss" in m]
        b = [m["loss"] for m in gpt2test.read_jsonl(second) if "loss" in m]
        steps_b = [m["step"] for m in gpt2test.read_jsonl(second) if "loss" in m]
        checks.check(steps_b == [5, 6, 7, 8], f"resumed run reported steps {steps_b}, expected 5..8")
        checks.check(a[4:] == b, f"losses after resume differ:\n  never stopped {a[4:]}\n  resumed       {b}")

    # Export to llm.c and sample from the checkpoint folder.
    out = os.path.join(w, "model_llmc.bin")
    r = gpt2test.run([args.gpt2, "convert", "--checkpoint", deck_dir, "--out", out])
    checks.check(r.rc == 0 and os.path.getsize(out) > 1024, f"convert failed: {r.err}")
    r = gpt2test.run([args.gpt2, "sample", "--checkpoint", out, "--tokens", "8", "--tokenizer", "byte"])
    checks.check(r.rc == 0, f"sample from the llm.c export failed: {r.err}")

    # A resume with another model is refused, naming the difference, touching nothing.
    before = gpt2test.digest([deck_dir])
    r, _ = train_run("mismatch", 12, True, deck_dir, model__n_layer=3)
    checks.check(r.rc != 0, "resume with a different n_layer was accepted")
    checks.check("n_layer" in r.err and r.err.count("error:") == 1, f"unclear mismatch message: {r.err}")
    checks.check(gpt2test.digest([deck_dir]) == before, "the refused resume changed the checkpoint folder")
    checks.finish("e2e_resume")


if __name__ == "__main__":
    main()
