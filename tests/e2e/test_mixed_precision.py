#!/usr/bin/python3
"""Mixed precision end to end (ctest: mixed_precision): 20 steps of the tiny model.

- bf16 and fp16 (initial loss scale 2^16) losses within 5e-2 relative of fp32's at every step, and
  not equal to them (the low precision is really in use); bf16 on dp = 2, pp = 2 and tp = 2 with
  sequence parallelism within 1e-2 of bf16 on one rank at every step.
- fp16 from train.initial_loss_scale = 2^40: steps are skipped ("skipped": true, the scale halved
  each time, printed), the scale falls, the run completes and its loss falls.
- Every metrics line carries "loss_scale" and "skipped".
- Checkpoints hold the fp32 master weights (not bf16-rounded values) and the precision may change
  across a resume: bf16 -> fp32 and fp32 -> fp16 continue within 5e-2 of the run that never stopped.
- parallel.grad_reduce_dtype = "bf16" on dp = 2 stays within 1e-2 of the fp32 reduction, and no step
  allocates (the reducer's 16-bit buffers are made at set-up).
- ZeRO-1 and ZeRO-3 at bf16 gathering 16-bit weight matrices (param_gather_dtype auto) give fp32
  gathers' losses bit for bit on the bytes the trace's param_gather_bytes gives; volume = theory.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "analysis"))
import tracelib  # noqa: E402

STEPS = 20


def reduction_bytes(path):
    """Bytes of the data-parallel gradient reductions over all ranks and steps of a trace, and each
    rank's allocations in a step (None where this Kokkos reports no fences: its counters are off)."""
    t = tracelib.Trace(path)
    kinds = [k for k in ("allreduce_issue", "reduce_scatter_issue") if k in t.comm_kinds]
    counted = all(tracelib.as_list(t.meta.get("fences_reported", [0])))
    allocations = tracelib.as_list(t.meta["allocations_per_step"]) if counted else None
    return int(np.sum(t.events[t.mask(kinds)]["bytes"])), allocations


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w, train = gpt2test.fresh_workdir_with_shard(args.workdir, 40000)
    checks = gpt2test.Checks()

    def run(name, ranks=1, steps=STEPS, **more):
        cfg = os.path.join(w, name + ".toml")
        gpt2test.write_deck(cfg, gpt2test.tiny_deck(train, train__steps=steps, train__lr=3e-3, **more))
        metrics = os.path.join(w, name + ".jsonl")
        r = gpt2test.run([args.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics], ranks, args.mpiexec, timeout=120)
        checks.check(r.rc == 0, f"{name}: exit status {r.rc}: {r.err[-1500:]}")
        m = gpt2test.read_jsonl(metrics) if os.path.exists(metrics) else []
        m = [x for x in m if "loss" in x]
        checks.check(all("loss_scale" in x and "skipped" in x for x in m) and len(m) > 0,
                     f"{name}: metrics lines without loss_scale / skipped: {m[:2]}")
        return r, m

    def close(name, got, want, tol):
        worst = max((abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(got, want)), default=1.0)
        ok = checks.check(len(got) == len(want) and worst <= tol, f"{name}: worst relative difference {worst:.2e} > {tol}")
        if ok:
            print(f"ok   {name}: every step within {worst:.1e} (bound {tol})", flush=True)
        return worst

    _, fp32 = run("fp32")
    _, bf16 = run("bf16", train__precision="bf16")
    _, fp16 = run("fp16", train__precision="fp16")
    close("bf16 vs fp32", bf16, fp32, 5e-2)
    close("fp16 vs fp32", fp16, fp32, 5e-2)
    checks.check(any(a["loss"] != b["loss"] for a, b in zip(bf16, fp32)), "bf16 losses equal fp32's bit for bit")
    checks.check(all(x["loss_scale"] == 65536 and not x["skipped"] for x in fp16), f"fp16 at 2^16: {fp16}")
    _, bf16_dp2 = run("bf16_dp2", 2, train__precision="bf16", parallel__dp=2)
    close("bf16 dp 2 vs bf16 1 rank", bf16_dp2, bf16, 1e-2)
    # Other layouts carry 16-bit activations too: pipeline stages, and tensor parallelism with
    # sequence parallelism (16-bit rows gathered over tp).
    _, bf16_pp2 = run("bf16_pp2", 2, train__precision="bf16", parallel__pp=2, parallel__microbatches=2)
    close("bf16 pp 2 vs bf16 1 rank", bf16_pp2, bf16, 1e-2)
    _, bf16_sp = run("bf16_tp2_sp", 2, train__precision="bf16", parallel__tp=2, parallel__sequence_parallel=True)
    close("bf16 tp 2 + sequence parallel vs bf16 1 rank", bf16_sp, bf16, 1e-2)

    # fp16 from 2^40: overflows until the scale fits fp16's range, then training.
    steps = 40
    r, m = run("fp16_big", steps=steps, train__precision="fp16", train__initial_loss_scale=2.0 ** 40)
    skipped = [x["step"] for x in m if x["skipped"]]
    scales = [x["loss_scale"] for x in m]
    done = [x["loss"] for x in m if not x["skipped"]]
    ok = checks.check(len(m) == steps and len(skipped) >= 1, f"fp16 2^40: no step skipped: {m}")
    ok &= checks.check(scales[0] == 2.0 ** 40 and scales[-1] < scales[0], f"fp16 2^40: the scale did not fall: {scales}")
    ok &= checks.check(all(scales[i + 1] == scales[i] / 2 for i in range(len(m) - 1) if m[i]["skipped"]),
                       f"fp16 2^40: a skipped step did not halve the scale: {scales}")
    ok &= checks.check(len(done) >= 5 and done[-1] < done[0] - 0.05, f"fp16 2^40: the loss did not fall: {done}")
    ok &= checks.check(f"step {skipped[0] if skipped else 0}: gradient overflow at loss scale" in r.out,
                       f"fp16 2^40: no overflow line: {r.out[-600:]}")
    if ok:
        print(f"ok   fp16 from 2^40: {len(skipped)} steps skipped, scale {scales[0]:g} -> {scales[-1]:g}, "
              f"loss {done[0]:.3f} -> {done[-1]:.3f}", flush=True)

    # Checkpoints: fp32 masters; precision changes across a resume.
    def resumed(name, first, second, straight):
        ck = os.path.join(w, "ck_" + name)
        run(name + "_a", steps=10, train__precision=first, checkpoint__dir=ck)
        params = gpt2test.read_checkpoint(os.path.join(ck, open(os.path.join(ck, "latest")).read().strip()))["params"]
        values = struct.unpack(f"<{len(params) // 4}I", params)
        low_bits = sum(1 for v in values if v & 0xFFFF)
        checks.check(low_bits > len(values) // 2, f"{name}: checkpoint params look bf16-rounded ({low_bits} of {len(values)})")
        _, tail = run(name + "_b", steps=STEPS, train__precision=second, checkpoint__dir=ck, checkpoint__resume=True)
        checks.check([x["step"] for x in tail] == list(range(11, STEPS + 1)), f"{name}: resumed steps {[x['step'] for x in tail]}")
        close(f"resume {first} -> {second}", tail, straight[10:], 5e-2)

    resumed("bf16_to_fp32", "bf16", "fp32", fp32)
    resumed("fp32_to_fp16", "fp32", "fp16", fp32)

    # The gradient reduction in bf16: half the bytes on the wire (the trace's reduction events), on
    # an all-reduce (ZeRO-0) and a reduce-scatter (ZeRO-2), the losses within 1e-2 of fp32's.
    for zero in (0, 2):
        vol = {}
        for dtype in ("fp32", "bf16"):
            name = f"reduce_{dtype}_zero{zero}"
            trace = os.path.join(w, name + ".h5")
            _, vol[dtype + "_m"] = run(name, 2, parallel__dp=2, parallel__zero=zero, parallel__grad_reduce_dtype=dtype,
                                       trace__file=trace)
            vol[dtype], allocations = reduction_bytes(trace)
            # (the reducer's 16-bit wire buffers are made at set-up: no step allocates them)
            checks.check(allocations is None or not any(allocations),
                         f"{name}: allocations in a step, by rank: {allocations}")
        close(f"grad_reduce_dtype bf16 vs fp32 (dp 2, ZeRO-{zero})", vol["bf16_m"], vol["fp32_m"], 1e-2)
        checks.check(any(a["loss"] != b["loss"] for a, b in zip(vol["bf16_m"], vol["fp32_m"])),
                     f"ZeRO-{zero}: the bf16 reduction changed nothing")
        if checks.check(vol["fp32"] > 0 and vol["bf16"] * 2 == vol["fp32"],
                        f"ZeRO-{zero}: reduction bytes bf16 {vol['bf16']} vs fp32 {vol['fp32']}: not half"):
            print(f"ok   ZeRO-{zero} reduction volume: fp32 {vol['fp32']} bytes, bf16 {vol['bf16']} bytes", flush=True)
    # ZeRO's parameter all-gathers at bf16: the weight matrices as their 16-bit values (auto) train
    # bit for bit as fp32 gathers rounded after (the same values reach the GEMMs), on the bytes the
    # trace's param_gather_bytes says; the data-parallel volume matches its theory.
    for zero in (1, 3):
        got = {}
        for g in ("fp32", "auto"):
            name = f"gather_{g}_zero{zero}"
            trace = os.path.join(w, name + ".h5")
            _, m = run(name, 2, steps=6, train__precision="bf16", parallel__dp=2, parallel__zero=zero,
                       parallel__param_gather_dtype=g, trace__file=trace)
            t = tracelib.Trace(trace)
            moved = int(np.sum(t.events[t.mask(["all_gather_issue"])]["bytes"]))
            theory = tracelib.theoretical_dp_volume(zero, 1, 2, tracelib.gather_fraction(t))
            vols = list(tracelib.dp_volume(t, 2).values())
            checks.check(all(abs(v - theory) < 0.05 for v in vols), f"{name}: dp volume {vols}, theory {theory}")
            got[g] = (m, moved, tracelib.gather_fraction(t))
        (m32, b32, f32), (m16, b16, f16) = got["fp32"], got["auto"]
        checks.check([x["loss"] for x in m16] == [x["loss"] for x in m32] and len(m16) == 6,
                     f"ZeRO-{zero}: 16-bit gathers changed the losses: {m16} vs {m32}")
        # ZeRO-1 gathers everything once a step; ZeRO-3 gathers blocks more often than the ends.
        ok = checks.check(f32 == 1.0 and f16 < 0.75 and b32 > 0 and abs(b16 / b32 - f16) < (1e-9 if zero == 1 else 0.02),
                          f"ZeRO-{zero}: gathered bytes 16-bit {b16} vs fp32 {b32}, param_gather_bytes {f16:.3f} Psi")
        if ok:
            print(f"ok   ZeRO-{zero} bf16 parameter gathers: {b16} bytes vs fp32 {b32} ({b16 / b32:.3f}x), "
                  f"losses bit for bit", flush=True)
    checks.finish("mixed precision")


if __name__ == "__main__":
    main()
