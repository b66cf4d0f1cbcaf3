#!/usr/bin/python3
"""Stop signals (ctest: signals, label faults): SIGTERM, SIGINT and SIGUSR1 save the run.

A long training run (checkpoint.dir set, checkpoint.every = 0: nothing saved until the end) gets a
signal once it has logged some steps:
  1 rank, no launcher: SIGTERM, SIGINT, SIGUSR1 to the process; 1 rank under mpiexec: SIGTERM to
  mpiexec;
  2 ranks under mpiexec: SIGTERM to rank 1, SIGUSR1 to rank 0, SIGTERM to rank 1 of a pipeline
  (pp = 2: ranks wait on each other inside the step), SIGTERM and SIGUSR1 to mpiexec (which passes
  them on to every rank).
Each must end the whole job within 30 s with exit status 4, one line "gpt2 train: stopped by SIGxxx
after step N", a checkpoint of step N named by dir/latest, N metrics lines, the folder's lock gone
and no process left; mpiexec's own status too (the ranks' exit witnesses keep MPICH's proxy from
counting them as 0 after it passed a signal on; test_launcher_status.py repeats that case).
The runs stopped by SIGTERM resume with checkpoint.resume = "auto" for 3 more steps: all their
losses (before and after the stop) must equal an uninterrupted run's to 1e-5 (data shuffled, so the
data position counts too). A second signal a second after the first ends the run at once (killed by
that signal) without a new checkpoint. Prints the time from each signal to the end of the job.
"""
import math
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402
from rankprocs import Job, gone_within, wait_for_lines  # noqa: E402

LIMIT_S = 30


def log(*a):
    print(*a, flush=True)


def deck(args, name, ranks, steps, resume="false", pp=False, **more):
    w = args.workdir
    extra = {}
    if ranks == 2:
        extra = {"parallel__pp": 2, "parallel__microbatches": 2} if pp else {"parallel__dp": 2}
    path = os.path.join(w, name + ".toml")
    more.setdefault("train__batch_size", 8)
    gpt2test.write_deck(path, gpt2test.tiny_deck(
        os.path.join(w, "train.bin"), data__shuffle=True, train__steps=steps,
        checkpoint__dir=os.path.join(w, "ck_" + name), checkpoint__resume=resume, **extra, **more))
    return path


def losses(path):
    return [m["loss"] for m in gpt2test.read_jsonl(path) if "loss" in m]


def stop_case(args, checks, name, ranks, target, sig, pp=False, launcher=False):
    """Starts a long run (under mpiexec when ranks > 1 or `launcher`), signals `target` ("launcher",
    or a world rank), checks the stop. Returns (the step it stopped after, its metrics file) or None."""
    cfg = deck(args, name, ranks, 1000000, pp=pp)
    metrics = os.path.join(args.workdir, name + ".jsonl")
    job = Job(args, name, [args.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics],
              ranks if ranks > 1 or launcher else 0, {"GPT2_COMM_TIMEOUT": "60"})
    try:
        found = job.find_ranks(ranks)
        if not checks.check(found is not None and wait_for_lines(metrics, 5, job),
                            f"{name}: the run never got going: {job.output()[1][-1500:]}"):
            return None
        pid = job.proc.pid if target == "launcher" else found[target]
        t0 = time.time()
        os.kill(pid, sig)
        ended = gone_within(job, list(found.values()), LIMIT_S)
        took = time.time() - t0
        rc = job.proc.poll()
        out, err = job.output()
        text = out + err
        stops = [ln for ln in text.splitlines() if ln.startswith("gpt2 train: stopped by")]
        ok = checks.check(ended, f"{name}: the job was not over {LIMIT_S} s after {sig.name}")
        ok &= checks.check(len(stops) == 1 and f"stopped by {sig.name} after step " in stops[0],
                           f"{name}: expected one 'stopped by {sig.name}' line:\n{text[-1500:]}")
        ok &= checks.check(rc == 4, f"{name}: exit status {rc}, expected 4:\n{text[-1500:]}")
        if not ok:
            return None
        step = int(stops[0].split("after step ")[1].split(":")[0])
        ck = os.path.join(args.workdir, "ck_" + name)
        with open(os.path.join(ck, "latest")) as f:
            latest = f.read().strip()
        checks.check(latest == f"ckpt_{step:08d}.h5", f"{name}: latest names {latest}, expected step {step}")
        steps = [m["step"] for m in gpt2test.read_jsonl(metrics) if "loss" in m]
        checks.check(steps == list(range(1, step + 1)), f"{name}: metrics hold steps {steps[:3]}..{steps[-3:]}, "
                                                         f"expected 1..{step}")
        checks.check(not os.path.exists(os.path.join(ck, "lock")), f"{name}: {ck}/lock left behind")
        log(f"{name}: {sig.name} to {'mpiexec' if target == 'launcher' else 'rank %d' % target} "
            f"({ranks} rank{'s' if ranks > 1 else ''}{', pp=2' if pp else ''}): job over after {took:.2f} s, "
            f"exit status {rc}, saved step {step}")
        return step, metrics
    finally:
        left = job.leftovers()
        job.cleanup()
        checks.check(not left, f"{name}: processes left behind: {left}")


def resume_matches(args, checks, name, ranks, stopped):
    """Resumes the run `name` stopped after step n for 3 more steps (checkpoint.resume = "auto", the
    same metrics file, which then holds steps 1..n+3): its losses must equal an uninterrupted run's."""
    n, metrics = stopped
    w = args.workdir
    ref_metrics = os.path.join(w, name + "_ref.jsonl")
    ref = deck(args, name + "_ref", ranks, n + 3)
    shutil.rmtree(os.path.join(w, "ck_" + name + "_ref"), ignore_errors=True)
    r = gpt2test.run([args.gpt2, "train", ref, "-q", "--metrics-jsonl", ref_metrics], ranks, args.mpiexec)
    checks.check(r.rc == 0, f"{name}: reference run failed: {r.err[-800:]}")
    # The stopped run's deck with train.steps = n + 3 and resume "auto", on its own folder.
    res = deck(args, name, ranks, n + 3, resume="auto")
    r = gpt2test.run([args.gpt2, "train", res, "-q", "--metrics-jsonl", metrics], ranks, args.mpiexec)
    if not checks.check(r.rc == 0 and f"at step {n}" in r.out, f"{name}: resume failed ({r.rc}): {r.out[-500:]} {r.err[-800:]}"):
        return
    steps = [m["step"] for m in gpt2test.read_jsonl(metrics) if "loss" in m]
    checks.check(steps == list(range(1, n + 4)), f"{name}: the metrics file holds steps {steps}, expected 1..{n + 3}")
    a, b = losses(ref_metrics), losses(metrics)
    diff = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
    checks.check(len(a) == len(b) == n + 3 and diff <= 1e-5,
                 f"{name}: losses of the stopped + resumed run differ from the uninterrupted one by {diff}")
    log(f"{name}: resumed after step {n}: {n + 3} losses equal to the uninterrupted run's (largest difference {diff:g})")


# The second signal's distance from the first: the run counts signals under 1 s apart as one request
# (stop_signals.cpp: Slurm's two paths), and a loaded box can hand the first one over a few hundred
# milliseconds late (1.2 s failed once under ctest -j3 on a noisy 2-core box). The step lasts >= 4 s.
GAP_S = 2.0


def second_signal(args, checks):
    """A first step that takes seconds: SIGTERM during it, then SIGTERM again GAP_S later, ends the
    run at once, killed by SIGTERM, with no checkpoint written. The step's length is set from a
    short run's on this machine (microbatches accumulated: more time, the same memory)."""
    name = "second"
    model = dict(model__n_embd=128, model__n_head=4, model__n_layer=4, model__block_size=64, data__seq_len=64)
    probe = os.path.join(args.workdir, name + "_probe.jsonl")
    r = gpt2test.run([args.gpt2, "train", deck(args, name + "_probe", 1, 2, train__batch_size=128, **model), "-q",
                      "--metrics-jsonl", probe])
    if not checks.check(r.rc == 0, f"{name}: the probe run failed: {r.err[-800:]}"):
        return
    step_s = min(m["step_ms"] for m in gpt2test.read_jsonl(probe) if "loss" in m) / 1e3
    k = max(1, math.ceil(4.0 / step_s))  # a step of at least 4 s
    shard = os.path.join(args.workdir, name + ".bin")
    gpt2test.write_shard(shard, gpt2test.learnable_tokens(128 * k * 64 + 65, 64))  # one batch
    cfg = deck(args, name, 1, 1000000, train__batch_size=128 * k, parallel__microbatches=k, data__train=shard, **model)
    job = Job(args, name, [args.gpt2, "train", cfg], 0, {})
    try:
        job.find_ranks(1)
        ok = wait_for_lines(job.out_path, 2, job)  # the two header lines: step 1 is under way
        if not checks.check(ok, f"{name}: the run never started: {job.output()[1][-800:]}"):
            return
        time.sleep(0.1)
        t0 = time.time()
        os.kill(job.proc.pid, signal.SIGTERM)
        time.sleep(GAP_S)
        if not checks.check(job.proc.poll() is None, f"{name}: the run ended within {GAP_S} s of the first signal "
                                                    f"(a step is too short to test a second one)"):
            return
        os.kill(job.proc.pid, signal.SIGTERM)
        rc = job.wait(10)
        took = time.time() - t0 - GAP_S
        checks.check(rc == -signal.SIGTERM, f"{name}: exit status {rc}, expected death by SIGTERM")
        ck = os.path.join(args.workdir, "ck_" + name)
        checks.check(not os.path.exists(os.path.join(ck, "latest")), f"{name}: a checkpoint was written")
        log(f"{name}: a second SIGTERM {GAP_S} s after the first ended the run {took:.2f} s later (status {rc})")
    finally:
        job.cleanup()


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    args = ap.parse_args()
    if not os.path.exists(f"/proc/{os.getpid()}/environ"):
        print("skipped: needs Linux /proc to find rank processes")
        raise SystemExit(77)
    args.workdir = os.path.abspath(gpt2test.fresh_dir(args.workdir))
    args.gpt2 = os.path.abspath(args.gpt2)
    gpt2test.write_shard(os.path.join(args.workdir, "train.bin"), gpt2test.learnable_tokens(20000, 64))
    checks = gpt2test.Checks()
    t_all = time.time()
    one = stop_case(args, checks, "term_1", 1, 0, signal.SIGTERM)
    stop_case(args, checks, "int_1", 1, 0, signal.SIGINT)
    stop_case(args, checks, "usr1_1", 1, 0, signal.SIGUSR1)
    stop_case(args, checks, "term_mpiexec_1", 1, "launcher", signal.SIGTERM, launcher=True)
    two = stop_case(args, checks, "term_rank1_dp2", 2, 1, signal.SIGTERM)
    stop_case(args, checks, "usr1_rank0_dp2", 2, 0, signal.SIGUSR1)
    stop_case(args, checks, "term_rank1_pp2", 2, 1, signal.SIGTERM, pp=True)
    stop_case(args, checks, "term_mpiexec_dp2", 2, "launcher", signal.SIGTERM)
    stop_case(args, checks, "usr1_mpiexec_dp2", 2, "launcher", signal.SIGUSR1)
    if one:
        resume_matches(args, checks, "term_1", 1, one)
    if two:
        resume_matches(args, checks, "term_rank1_dp2", 2, two)
    second_signal(args, checks)
    log(f"signals: {time.time() - t_all:.1f} s in all")
    checks.finish("signals")


if __name__ == "__main__":
    main()
