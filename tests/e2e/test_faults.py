#!/usr/bin/python3
"""Faults (ctest: faults): dead ranks, hung ranks and a crash in the middle of a checkpoint write.

a. A rank SIGKILLed while training (dp=2, and the last stage of pp=2): the launcher and every other
   rank are gone within 30 s, the exit status is non-zero and the job says why.
b. A rank stopped with SIGSTOP (alive but hung) under GPT2_COMM_TIMEOUT=5 (dp=2, and the first
   stage of pp=2): a waiting rank prints our watchdog message ("waited N s for ...; a peer rank
   probably died or hangs"), the job ends within 20 s with exit status 3 and leaves no process.
c. World rank 0 SIGKILLed while it writes a checkpoint (a 3.2M-parameter model, 38 MB per
   checkpoint, checkpoint.every = 1): dir/latest names a complete checkpoint, `gpt2 info
   --checkpoint DIR` verifies it, and checkpoint.resume = true continues from it; the temporary
   files of dead writers do not disturb the resume and are removed by it (a live writer's are kept).

Rank processes are found as the descendants of this test's own mpiexec whose command line holds
this test's work folder (never by name); each launch runs in its own session, and whatever of that
session is still alive at the end is continued and SIGKILLed.
"""
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402
from rankprocs import Job, alive, gone_within, wait_for_lines  # noqa: E402

TMP_RE = re.compile(r"^ckpt_(\d+)\.(?:bin|h5)\.tmp\.(\d+)$")


def log(*a):
    print(*a, flush=True)


def fault_case(args, checks, name, deck_overrides, victim, sig, env, limit, message_re):
    """Launches a 2-rank training run, sends `sig` to world rank `victim` once steps are logged and
    checks that the whole job ends within `limit` seconds, non-zero, with a message matching
    message_re. Returns (seconds to the end, exit status, message lines) for the report."""
    w = args.workdir
    deck = os.path.join(w, name + ".toml")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), train__steps=1000000,
                                                 train__batch_size=16, **deck_overrides))
    metrics = os.path.join(w, name + ".jsonl")
    job = Job(args, name, [args.gpt2, "train", deck, "--metrics-jsonl", metrics, "-q"], 2, env)
    ended = False
    try:
        ranks = job.find_ranks(2)
        if not checks.check(ranks is not None, f"{name}: did not find 2 rank processes: {job.output()[1][-1500:]}"):
            return None
        if not checks.check(wait_for_lines(metrics, 3, job), f"{name}: training never got under way: "
                            f"{job.output()[1][-1500:]}"):
            return None
        steps_before = len(gpt2test.read_jsonl(metrics))
        others = [p for r, p in ranks.items() if r != victim]
        t0 = time.time()
        os.kill(ranks[victim], sig)
        ended = gone_within(job, others, limit)
        took = time.time() - t0
        if not ended:  # keep waiting a while for the report, then fail
            ended_late = gone_within(job, others, 30)
            took = time.time() - t0
            checks.check(False, f"{name}: the job was not over {limit} s after the signal "
                                f"({'ended after %.1f s' % took if ended_late else 'still running'})")
        rc = job.proc.poll()
        out, err = job.output()
        checks.check(rc is not None and rc != 0, f"{name}: exit status {rc}, expected non-zero")
        text = out + err
        m = re.search(message_re, text)
        checks.check(m is not None, f"{name}: no message matching {message_re!r}:\n{text[-2000:]}")
        lines = [ln.strip() for ln in text.splitlines() if re.search(message_re, ln)]
        where = "stderr" if re.search(message_re, err) else "stdout"
        log(f"{name}: signal {sig.name} to rank {victim} (pid {ranks[victim]}) after {steps_before} steps; "
            f"job over after {took:.1f} s, exit status {rc}; message on {where}: {lines[:2]}")
        if sig == signal.SIGSTOP and ended:
            # The stopped rank must not outlive the job (a stopped orphan holding memory).
            stop_pid = ranks[victim]
            t1 = time.time()
            while alive(stop_pid) and time.time() - t1 < 10:
                time.sleep(0.05)
            checks.check(not alive(stop_pid), f"{name}: the stopped rank {stop_pid} outlived the job by 10 s")
            log(f"{name}: the stopped rank was gone {time.time() - t0:.1f} s after the SIGSTOP")
        return took, rc, lines
    finally:
        left = job.leftovers()
        job.cleanup()
        if ended:
            checks.check(not left, f"{name}: processes left behind after the job ended: {left}")


def list_tmp(folder):
    out = []
    for n in os.listdir(folder):
        m = TMP_RE.match(n)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), n))
    return out


def latest_step(folder):
    try:
        with open(os.path.join(folder, "latest")) as f:
            name = f.read().strip()
    except OSError:
        return None, None
    m = re.match(r"^ckpt_(\d+)\.(?:bin|h5)$", name)
    return (int(m.group(1)) if m else None), name


def checkpoint_crash(args, checks):
    """Case c. Returns a dict of observations for the report."""
    w = args.workdir
    ck = os.path.join(w, "ck_crash")
    deck_args = dict(model__n_layer=4, model__n_embd=256, model__n_head=4, train__batch_size=2,
                     train__steps=30, parallel__dp=2, checkpoint__dir=ck, checkpoint__every=1)
    deck = os.path.join(w, "crash.toml")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), **deck_args))
    job = Job(args, "crash", [args.gpt2, "train", deck, "-q"], 2, {"GPT2_COMM_TIMEOUT": "600"})
    obs = {}
    try:
        ranks = job.find_ranks(2)
        if not checks.check(ranks is not None, f"crash: did not find 2 rank processes: {job.output()[1][-1500:]}"):
            return obs
        writer = ranks[0]
        deadline = time.time() + 90
        victim_tmp = None
        while time.time() < deadline and job.proc.poll() is None:
            done, _ = latest_step(ck) if os.path.isdir(ck) else (None, None)
            if done is not None and done >= 2:
                later = [t for t in list_tmp(ck) if t[0] > done]
                if later:
                    try:
                        size = os.path.getsize(os.path.join(ck, later[0][2]))
                    except OSError:
                        size = 0
                    if size > 0:
                        os.kill(writer, signal.SIGKILL)
                        victim_tmp = later[0]
                        obs.update(done_before=done, tmp=later[0][2], tmp_size_at_kill=size)
                        break
            time.sleep(0.002)
        if not checks.check(victim_tmp is not None, "crash: never saw a checkpoint being written"):
            return obs
        checks.check(victim_tmp[1] == writer, f"crash: {victim_tmp[2]} is not written by rank 0 (pid {writer})")
        t0 = time.time()
        ended = gone_within(job, list(ranks.values()), 30)
        obs["job_over_s"] = time.time() - t0
        checks.check(ended, "crash: the job did not end within 30 s of rank 0's death")
        obs["rc"] = job.proc.poll()
        checks.check(obs["rc"] not in (None, 0), f"crash: exit status {obs['rc']}, expected non-zero")
    finally:
        job.cleanup()
    if checks.failures:
        return obs

    full_size = os.path.getsize(os.path.join(ck, "ckpt_00000001.h5"))
    step, name = latest_step(ck)
    obs.update(latest=name, full_size=full_size)
    leftover = [t[2] for t in list_tmp(ck)]
    obs["leftover_tmp"] = leftover
    if os.path.exists(os.path.join(ck, obs["tmp"])):
        obs["tmp_size_after"] = os.path.getsize(os.path.join(ck, obs["tmp"]))
    log(f"crash: rank 0 (pid {writer}) SIGKILLed while {obs['tmp']} had {obs['tmp_size_at_kill']} of "
        f"{full_size} bytes (latest was step {obs['done_before']}); job over after {obs['job_over_s']:.1f} s, "
        f"exit status {obs['rc']}; latest -> {name}; temporary files left: {leftover}")
    if not checks.check(step is not None and step >= obs["done_before"], f"crash: latest names {name!r}"):
        return obs
    path = os.path.join(ck, name)
    checks.check(os.path.getsize(path) == full_size,
                 f"crash: {name} has {os.path.getsize(path)} bytes, a complete checkpoint {full_size}")
    r = gpt2test.run([args.gpt2, "info", "--checkpoint", ck], timeout=120)
    checks.check(r.rc == 0 and f"after {step} steps (checksums verified)" in r.out,
                 f"crash: gpt2 info --checkpoint failed (rc {r.rc}): {r.out[-800:]} {r.err[-800:]}")

    # Temporary files: the crashed writer's (dead), a planted dead one, a live writer's (this test),
    # and a file that only looks similar. The resume must ignore them and remove the dead writers'.
    dead_pid = writer  # reaped above: dead
    planted_dead = os.path.join(ck, f"ckpt_{step + 7:08d}.h5.tmp.{dead_pid}")
    planted_latest = os.path.join(ck, f"latest.tmp.{dead_pid}")
    live = os.path.join(ck, f"ckpt_{step + 1:08d}.h5.tmp.{os.getpid()}")
    other = os.path.join(ck, "notes.tmp.1")
    for p in (planted_dead, planted_latest, live, other):
        with open(p, "wb") as f:
            f.write(b"GPT2KCKP partial")
    metrics = os.path.join(w, "resumed.jsonl")
    res_deck = os.path.join(w, "resume.toml")
    gpt2test.write_deck(res_deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), checkpoint__resume=True,
                                                     **deck_args))
    t0 = time.time()
    r = gpt2test.run([args.gpt2, "train", res_deck, "--metrics-jsonl", metrics, "-q", "--stop-at", str(step + 2)],
                     2, args.mpiexec, timeout=180)
    obs["resume_s"] = time.time() - t0
    if checks.check(r.rc == 0, f"crash: resume failed (rc {r.rc}): {r.out[-800:]} {r.err[-1500:]}"):
        steps = [m["step"] for m in gpt2test.read_jsonl(metrics) if "loss" in m]
        checks.check(steps == [step + 1, step + 2], f"crash: resumed run did steps {steps}, expected "
                                                    f"{[step + 1, step + 2]}")
        removed = re.findall(r"checkpoint: removed \S+/(\S+) \(left by a writer that died\)", r.out)
        checks.check(sorted(removed) == sorted([obs["tmp"], os.path.basename(planted_dead),
                                                os.path.basename(planted_latest)]),
                     f"crash: the resume reported removing {removed}")
        new_step, new_name = latest_step(ck)
        checks.check(new_step == step + 2, f"crash: after the resume latest names {new_name}")
        r2 = gpt2test.run([args.gpt2, "info", "--checkpoint", ck], timeout=120)
        checks.check(r2.rc == 0, f"crash: the resumed run's checkpoint does not verify: {r2.err[-800:]}")
    remaining = sorted(n for n in os.listdir(ck) if ".tmp." in n)
    obs["tmp_after_resume"] = remaining
    expect = sorted([os.path.basename(live), os.path.basename(other)])
    checks.check(remaining == expect, f"crash: temporary files after the resume: {remaining}, expected "
                                      f"only the live writer's and the unrelated one: {expect}")
    log(f"crash: resume from {name} took {obs['resume_s']:.1f} s; temporary files after it: {remaining}")
    return obs


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--keep", action="store_true", help="keep the (large) checkpoint folders")
    args = ap.parse_args()
    if not os.path.isdir("/proc/self") or not os.path.exists(f"/proc/{os.getpid()}/environ"):
        print("skipped: needs Linux /proc to find rank processes")
        raise SystemExit(77)
    if shutil.which(args.mpiexec) is None:
        print(f"skipped: no MPI launcher {args.mpiexec}")
        raise SystemExit(77)
    args.workdir = os.path.abspath(args.workdir)
    args.gpt2 = os.path.abspath(args.gpt2)  # the launches run in the work folder
    w = gpt2test.fresh_dir(args.workdir)
    if shutil.disk_usage(w).free < 2 << 30:
        print(f"skipped: less than 2 GiB free under {w} for the checkpoint crash case")
        raise SystemExit(77)
    gpt2test.write_shard(os.path.join(w, "train.bin"), gpt2test.learnable_tokens(20000, 64))
    checks = gpt2test.Checks()
    t_all = time.time()

    dead = r"BAD TERMINATION|[Kk]illed|signal 9|died|terminated"
    # The watchdog names the step (and, in the pipeline, the pass and the peer) a stuck rank waits in.
    watchdog = r"waited \d+ s for [^\n]*\([^\n]*step \d+[^\n]*\): a peer rank died, hangs"
    long_wait = {"GPT2_COMM_TIMEOUT": "600"}  # the launcher, not our watchdog, must end these
    cases = [
        ("kill_dp", {"parallel__dp": 2}, 0, signal.SIGKILL, long_wait, 30, dead),
        ("kill_pp_last", {"parallel__pp": 2, "parallel__microbatches": 2}, 1, signal.SIGKILL, long_wait, 30, dead),
        ("hang_dp", {"parallel__dp": 2}, 1, signal.SIGSTOP, {"GPT2_COMM_TIMEOUT": "5"}, 20, watchdog),
        ("hang_pp_first", {"parallel__pp": 2, "parallel__microbatches": 2}, 0, signal.SIGSTOP,
         {"GPT2_COMM_TIMEOUT": "5"}, 20, watchdog),
    ]
    for name, deck, victim, sig, env, limit, msg in cases:
        t0 = time.time()
        fault_case(args, checks, name, deck, victim, sig, env, limit, msg)
        log(f"{name}: case took {time.time() - t0:.1f} s")
    t0 = time.time()
    checkpoint_crash(args, checks)
    log(f"crash: case took {time.time() - t0:.1f} s")
    if not checks.failures and not args.keep:
        shutil.rmtree(os.path.join(w, "ck_crash"), ignore_errors=True)
    log(f"faults: {time.time() - t_all:.1f} s in all")
    checks.finish("faults")


if __name__ == "__main__":
    main()
