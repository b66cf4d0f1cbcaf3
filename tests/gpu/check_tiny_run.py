#!/usr/bin/python3
"""Tiny GPT-2 training: the GPU run's loss sequence against the host (CPU) build's.

--write DIR (host build): writes the data (DIR/train.bin, DIR/val.bin), the input deck it trains
with (DIR/deck.toml, for reading) and the CPU run's metrics (DIR/metrics_cpu.jsonl): 12 steps of a
2-layer, 4-head, 64-channel model on a 300-token vocabulary (padded to 384) at T=32, B=8, cosine
schedule with warm-up, gradient clipping, weight decay, validation at steps 6 and 12.

--write with --set keeps the settings in DIR/info.json (train.optimizer=muon: a reference for Muon).

--compare DIR (CUDA build, on a GPU): trains the same deck on the same data, with the reference's
settings and then any --set overrides (parallel.comm=nccl, parallel.dp=2 on --ranks 2, ...), and
checks that every step's loss and every validation loss equals the reference's to --tol (default
1e-4, absolute). Prints a step-by-step table; exit 0 when all match, 1 otherwise.

Usage:
  check_tiny_run.py --write DIR --gpt2 build/bin/gpt2
  check_tiny_run.py --compare DIR --gpt2 build-cuda/bin/gpt2 [--ranks 2 --mpiexec M] [--set k=v]...
                    [--workdir W] [--trace] [--tol 1e-4]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

VOCAB, SEQ, BATCH, STEPS = 300, 32, 8, 12


def deck(train, val):
    return gpt2test.tiny_deck(
        train, val,
        model__n_layer=2, model__n_head=4, model__n_embd=64, model__vocab_size=VOCAB, model__block_size=SEQ,
        data__seq_len=SEQ, train__batch_size=BATCH, train__steps=STEPS, train__lr=2e-3,
        train__warmup_steps=2, train__schedule="cosine", train__min_lr=2e-4, train__weight_decay=0.1,
        train__grad_clip=1.0, train__eval_every=6, train__eval_batches=2, train__seed=4242)


def train(gpt2, deck_path, metrics, sets, ranks, mpiexec, cwd, timeout, stop_at=0):
    cmd = [gpt2, "train", deck_path, "--metrics-jsonl", metrics] + (["--stop-at", str(stop_at)] if stop_at else [])
    for s in sets:
        cmd += ["--set", s]
    return gpt2test.run(cmd, ranks=ranks, mpiexec=mpiexec, timeout=timeout, cwd=cwd)


def split(rows):
    losses = {m["step"]: m for m in rows if "loss" in m}
    vals = {m["step"]: m["val_loss"] for m in rows if "val_loss" in m}
    return losses, vals


def write(args):
    d = os.path.abspath(args.write)
    os.makedirs(d, exist_ok=True)
    tr, va = os.path.join(d, "train.bin"), os.path.join(d, "val.bin")
    gpt2test.write_shard(tr, gpt2test.learnable_tokens(BATCH * SEQ * STEPS + 1, VOCAB, seed=7))
    gpt2test.write_shard(va, gpt2test.learnable_tokens(4 * BATCH * SEQ + 1, VOCAB, seed=8))
    cfg = os.path.join(d, "deck.toml")
    # The deck names the shards relative to DIR (the run's working directory).
    gpt2test.write_deck(cfg, deck("train.bin", "val.bin"))
    metrics = os.path.join(d, "metrics_cpu.jsonl")
    r = train(args.gpt2, cfg, metrics, args.set, args.ranks, args.mpiexec, d, args.timeout)
    if r.rc != 0:
        print(f"check_tiny_run: the reference run failed (exit {r.rc}):\n{r.out[-2000:]}\n{r.err[-3000:]}")
        return 1
    losses, vals = split(gpt2test.read_jsonl(metrics))
    ok = sorted(losses) == list(range(1, STEPS + 1)) and len(vals) == 2
    first, last = losses[1]["loss"], losses[STEPS]["loss"]
    ok = ok and last < first
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump({"steps": STEPS, "vocab_size": VOCAB, "seq_len": SEQ, "batch_size": BATCH,
                   "gpt2": os.path.abspath(args.gpt2), "sets": args.set, "first_loss": first,
                   "last_loss": last, "val_losses": vals}, f, indent=1)
    print(f"check_tiny_run: reference in {d}: {STEPS} steps, loss {first:.6f} -> {last:.6f}, "
          f"val {', '.join(f'{s}: {v:.6f}' for s, v in sorted(vals.items()))}")
    if not ok:
        print("check_tiny_run: FAIL: the reference run did not report every step, two evaluations and a falling loss")
        return 1
    return 0


def compare(args):
    ref = os.path.abspath(args.compare)
    ref_metrics = os.path.join(ref, "metrics_cpu.jsonl")
    for f in ("train.bin", "val.bin", "metrics_cpu.jsonl"):
        if not os.path.isfile(os.path.join(ref, f)):
            print(f"check_tiny_run: {os.path.join(ref, f)} is missing: make the reference with --write "
                  f"(a host build; job_scripts/gpu_bundle.sh does it)")
            return 2
    work = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="gpt2-tiny-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = os.path.join(work, "deck.toml")
    gpt2test.write_deck(cfg, deck(os.path.join(ref, "train.bin"), os.path.join(ref, "val.bin")))
    metrics = os.path.join(work, "metrics.jsonl")
    info = os.path.join(ref, "info.json")
    sets = (json.load(open(info)).get("sets", []) if os.path.isfile(info) else []) + list(args.set)
    if args.trace:
        sets.append(f"trace.file={os.path.join(work, 'trace.h5')}")
    label = args.label or " ".join(sets) or "defaults"
    r = train(args.gpt2, cfg, metrics, sets, args.ranks, args.mpiexec, work, args.timeout, args.stop_at)
    print(f"check_tiny_run [{label}], {args.ranks} rank(s), {r.seconds:.1f} s, exit {r.rc}")
    if r.rc != 0 or not os.path.isfile(metrics):
        print(f"check_tiny_run: FAIL: the run failed (exit {r.rc})\n--- stdout\n{r.out[-3000:]}\n--- stderr\n{r.err[-3000:]}")
        return 1
    got_l, got_v = split(gpt2test.read_jsonl(metrics))
    want_l, want_v = split(gpt2test.read_jsonl(ref_metrics))
    if args.stop_at:  # the first steps only (the run's own evaluation at its last step has no reference)
        want_l = {s: m for s, m in want_l.items() if s <= args.stop_at}
        want_v = {s: v for s, v in want_v.items() if s < args.stop_at}
        got_v = {s: v for s, v in got_v.items() if s < args.stop_at or s in want_v}
    checks = gpt2test.Checks()
    checks.check(sorted(got_l) == sorted(want_l), f"steps {sorted(got_l)} != reference {sorted(want_l)}")
    checks.check(sorted(got_v) == sorted(want_v), f"evaluations at {sorted(got_v)} != reference {sorted(want_v)}")
    worst = 0.0
    print(f"{'step':>5} {'cpu loss':>12} {'gpu loss':>12} {'|diff|':>10} {'cpu gnorm':>10} {'gpu gnorm':>10}")
    for s in sorted(set(got_l) & set(want_l)):
        a, b = got_l[s], want_l[s]
        d = abs(a["loss"] - b["loss"])
        worst = max(worst, d)
        print(f"{s:5d} {b['loss']:12.7f} {a['loss']:12.7f} {d:10.2e} {b['grad_norm']:10.5f} {a['grad_norm']:10.5f}")
        checks.check(d <= args.tol, f"step {s}: loss {a['loss']!r} vs reference {b['loss']!r} (|diff| {d:.2e} > {args.tol})")
    for s in sorted(set(got_v) & set(want_v)):
        d = abs(got_v[s] - want_v[s])
        worst = max(worst, d)
        print(f"{'val' + str(s):>5} {want_v[s]:12.7f} {got_v[s]:12.7f} {d:10.2e}")
        checks.check(d <= args.tol, f"val at step {s}: {got_v[s]!r} vs reference {want_v[s]!r} (|diff| {d:.2e})")
    if args.save_metrics:
        shutil.copyfile(metrics, args.save_metrics)
    print(f"check_tiny_run [{label}]: largest |loss - cpu loss| {worst:.3e} (tolerance {args.tol:g})")
    try:
        checks.finish(f"check_tiny_run [{label}]")
    except SystemExit as e:
        return int(e.code or 1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="DIR", help="make the reference (host build)")
    mode.add_argument("--compare", metavar="DIR", help="compare with the reference in DIR")
    ap.add_argument("--gpt2", required=True, help="the gpt2 executable (or a wrapper)")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to gpt2 train --set")
    ap.add_argument("--workdir", help="where the compared run writes (default: a fresh temporary folder)")
    ap.add_argument("--trace", action="store_true", help="also write an HDF5 trace (trace.h5 in the workdir)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--label", default="")
    ap.add_argument("--save-metrics", help="copy the compared run's metrics JSONL here")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--stop-at", type=int, default=0, help="compare: run and compare only the first N steps")
    args = ap.parse_args()
    # The runs happen in other working directories: paths given relative to here become absolute.
    for name in ("gpt2", "mpiexec"):
        v = getattr(args, name)
        if os.sep in v:
            setattr(args, name, os.path.abspath(v))
    if not (os.path.isfile(args.gpt2) and os.access(args.gpt2, os.X_OK)):
        print(f"check_tiny_run: {args.gpt2} is not an executable file")
        sys.exit(2)
    sys.exit(write(args) if args.write else compare(args))


if __name__ == "__main__":
    main()
