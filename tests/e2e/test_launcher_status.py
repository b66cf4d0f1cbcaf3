#!/usr/bin/python3
"""The launcher's exit status after a stop (ctest: launcher_status, labels e2e;mpi): mpiexec says 4.

MPICH's mpiexec (Hydra 4.0) passes SIGTERM, SIGINT and SIGUSR1 on to every rank; its proxy then
counts a rank it reaps after all the ranks' output pipes have closed as exit status 0, so without
the ranks' exit witnesses (runtime/stop_signals.hpp) mpiexec exited 0 in about half of such stops on
2 ranks (and always on 1). A single stop cannot see that race: this test repeats it.
`--trials` (20) times each, a 2-rank data-parallel run of the tiny model gets, once it has logged
`--steps` (20) steps,
  SIGTERM to mpiexec (kill, as a batch system or a wrapper sends it), and
  SIGINT to mpiexec's process group (a terminal's Ctrl-C: mpiexec passes it on, its proxy ignores it).
Every trial must end the whole job within 30 s with exit status 4, one line "gpt2 train: stopped by
SIGxxx after step N", dir/latest naming the checkpoint of step N, steps 1..N in the metrics file (the
last logged step is the one saved), the folder's lock gone and no process left. The first trial of
each signal then resumes (checkpoint.resume = "auto") for 3 more steps: all its losses must equal an
unbroken run's to 1e-5. Prints each signal's count of exit statuses (e.g. "20/20 exit 4") and the
time taken (15-50 s on 2 cores); 77 (skipped) without Linux /proc.
"""
import collections
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, HERE)
import gpt2test  # noqa: E402
from rankprocs import Job, gone_within, wait_for_lines  # noqa: E402
from test_signals import deck, resume_matches  # noqa: E402

LIMIT_S = 30


def log(*a):
    print(*a, flush=True)


def trial(args, checks, name, sig):
    """One stop through mpiexec: returns (exit status, (step, metrics file) when every check held)."""
    cfg = deck(args, name, 2, 1000000)
    metrics = os.path.join(args.workdir, name + ".jsonl")
    job = Job(args, name, [args.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics], 2, {"GPT2_COMM_TIMEOUT": "60"})
    try:
        found = job.find_ranks(2)
        if not checks.check(found is not None and wait_for_lines(metrics, args.steps, job),
                            f"{name}: the run never got going: {job.output()[1][-1500:]}"):
            return None, None
        if sig == signal.SIGINT:
            os.killpg(job.proc.pid, sig)  # Ctrl-C: the terminal's foreground group (mpiexec's session)
        else:
            os.kill(job.proc.pid, sig)
        ended = gone_within(job, list(found.values()), LIMIT_S)
        rc = job.proc.poll()
        out, err = job.output()
        text = out + err
        stops = [ln for ln in text.splitlines() if ln.startswith("gpt2 train: stopped by")]
        ok = checks.check(ended, f"{name}: the job was not over {LIMIT_S} s after {sig.name}")
        ok &= checks.check(len(stops) == 1 and f"stopped by {sig.name} after step " in stops[0],
                           f"{name}: expected one 'stopped by {sig.name}' line:\n{text[-1500:]}")
        ok &= checks.check(rc == 4, f"{name}: mpiexec's exit status {rc}, expected 4")
        if not (ended and len(stops) == 1):
            return rc, None
        step = int(stops[0].split("after step ")[1].split(":")[0])
        ck = os.path.join(args.workdir, "ck_" + name)
        try:
            with open(os.path.join(ck, "latest")) as f:
                latest = f.read().strip()
        except OSError:
            latest = None
        ok &= checks.check(latest == f"ckpt_{step:08d}.h5", f"{name}: latest names {latest}, expected step {step}")
        ok &= checks.check(os.path.exists(os.path.join(ck, f"ckpt_{step:08d}.h5")), f"{name}: no checkpoint of step {step}")
        steps = [m["step"] for m in gpt2test.read_jsonl(metrics) if "loss" in m]
        ok &= checks.check(steps == list(range(1, step + 1)),
                           f"{name}: metrics hold steps {steps[:3]}..{steps[-3:]}, expected 1..{step}")
        ok &= checks.check(not os.path.exists(os.path.join(ck, "lock")), f"{name}: {ck}/lock left behind")
        return rc, ((step, metrics) if ok else None)
    finally:
        left = job.leftovers()
        job.cleanup()
        checks.check(not left, f"{name}: processes left behind: {left}")


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--trials", type=int, default=20, help="stops per signal (default 20)")
    ap.add_argument("--steps", type=int, default=20, help="logged steps before the signal (default 20)")
    args = ap.parse_args()
    if not os.path.exists(f"/proc/{os.getpid()}/environ"):
        print("skipped: needs Linux /proc to find rank processes")
        raise SystemExit(77)
    args.workdir = os.path.abspath(gpt2test.fresh_dir(args.workdir))
    args.gpt2 = os.path.abspath(args.gpt2)
    gpt2test.write_shard(os.path.join(args.workdir, "train.bin"), gpt2test.learnable_tokens(20000, 64))
    checks = gpt2test.Checks()
    t_all = time.time()
    for sig, how in ((signal.SIGTERM, "SIGTERM to mpiexec"), (signal.SIGINT, "SIGINT to mpiexec's group (Ctrl-C)")):
        t0 = time.time()
        statuses = collections.Counter()
        first = None
        for t in range(args.trials):
            name = f"{sig.name.lower()}_{t:02d}"
            rc, stopped = trial(args, checks, name, sig)
            statuses[rc] += 1
            if t == 0:
                first = (name, stopped)
        counts = ", ".join(f"{n}/{args.trials} exit {rc}" for rc, n in sorted(statuses.items(), key=lambda x: -x[1]))
        log(f"{how}, 2 ranks, after {args.steps}+ steps: {counts} ({time.time() - t0:.1f} s)")
        name, stopped = first
        if stopped:
            resume_matches(args, checks, name, 2, stopped)
    log(f"launcher_status: {time.time() - t_all:.1f} s in all")
    checks.finish("launcher_status")


if __name__ == "__main__":
    main()
