#!/usr/bin/python3
"""A checkpoint folder over several runs (ctest: checkpoint_dir, checkpoint_dir_dp2; label faults).

With an 8-step run that never stops as the reference (data shuffled, cosine schedule):
a. checkpoint.resume = "auto" on an empty folder starts fresh (saying so); checkpoint.every = 2,
   checkpoint.keep = 2, --stop-at 6: the folder keeps ckpt 4 and 6 only (the removal is reported).
b. The newest checkpoint corrupted (a byte flipped in its last section): resume = "auto" warns naming
   that file and resumes from step 4; steps 5..8 equal the reference.
c. The newest checkpoint truncated: resume = true falls back the same way (from 6, after (b) left
   6 and 8).
d. A live run holding the folder's lock (this test, by flock and its own host and pid in dir/lock):
   a second run stops at once (exit 2, one error line naming the folder, the host and the pid); the
   lock is untouched.
e. A lock left by a dead process (same host, a pid that is gone): the next run takes it over,
   saying so, and removes dir/lock when it ends.
Every resumed run's losses equal the reference's to 1e-5; no run leaves dir/lock behind.
"""
import fcntl
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--ranks", type=int, default=1)
    args = ap.parse_args()
    w, train = gpt2test.fresh_workdir_with_shard(args.workdir)
    ck = os.path.join(w, "ck")
    lock = os.path.join(ck, "lock")
    checks = gpt2test.Checks()

    def run(name, resume, stop_at=0, ckpt_dir=ck, **more):
        cfg = os.path.join(w, name + ".toml")
        layout = {"parallel__dp": args.ranks} if args.ranks > 1 else {}
        gpt2test.write_deck(cfg, gpt2test.tiny_deck(
            train, data__shuffle=True, train__steps=8, train__schedule="cosine", train__warmup_steps=2,
            checkpoint__dir=ckpt_dir, checkpoint__every=2, checkpoint__keep=2, checkpoint__resume=resume,
            **layout, **more))
        metrics = os.path.join(w, name + ".jsonl")
        cmd = [args.gpt2, "train", cfg, "-q", "--metrics-jsonl", metrics] + (["--stop-at", str(stop_at)] if stop_at else [])
        r = gpt2test.run(cmd, args.ranks, args.mpiexec, timeout=60)
        got = {m["step"]: m["loss"] for m in gpt2test.read_jsonl(metrics) if "loss" in m} if os.path.exists(metrics) else {}
        checks.check(not os.path.exists(lock) or name == "busy", f"{name}: {lock} left behind")
        return r, got

    def same_losses(name, got, steps):
        diff = max((abs(got.get(s, float("inf")) - ref[s]) for s in steps), default=0)
        return checks.check(sorted(got) == list(steps) and diff <= 1e-5,
                            f"{name}: losses of steps {sorted(got)} differ from the reference by {diff}")

    def listing():
        return sorted(n for n in os.listdir(ck) if n.startswith("ckpt_"))

    _, ref = run("reference", False, ckpt_dir=os.path.join(w, "ck_ref"))
    checks.check(sorted(ref) == list(range(1, 9)), f"reference: steps {sorted(ref)}")

    # a. auto on an empty folder; keep = 2
    r, got = run("fresh", "auto", stop_at=6)
    if checks.check(r.rc == 0 and "no checkpoint in" in r.out and "starting fresh" in r.out,
                    f"fresh: rc {r.rc}: {r.out[-600:]} {r.err[-800:]}"):
        same_losses("fresh", got, range(1, 7))
        checks.check(listing() == ["ckpt_00000004.h5", "ckpt_00000006.h5"], f"fresh: kept {listing()}")
        checks.check("ckpt_00000002.h5 (checkpoint.keep = 2)" in r.out, f"fresh: no removal reported: {r.out[-600:]}")

    # b. corrupt newest -> auto resumes from the one before, naming the corrupt file
    gpt2test.flip_checkpoint_byte(os.path.join(ck, "ckpt_00000006.h5"))
    r, got = run("corrupt", "auto")
    warned = [ln for ln in r.err.splitlines() if ln.startswith("warning") and "ckpt_00000006.h5" in ln]
    if checks.check(r.rc == 0 and warned and "resuming from " + os.path.join(ck, "ckpt_00000004.h5") in r.out,
                    f"corrupt: rc {r.rc}: {r.out[-600:]} {r.err[-800:]}"):
        same_losses("corrupt", got, range(5, 9))
        print(f"ok   corrupt newest: {warned[0][:160]}", flush=True)

    # c. truncated newest (8; 6 was rewritten by (b)) -> true resumes from 6
    newest = os.path.join(ck, "ckpt_00000008.h5")
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) // 2)
    r, got = run("truncated", True)
    warned = [ln for ln in r.err.splitlines() if ln.startswith("warning") and "ckpt_00000008.h5" in ln]
    if checks.check(r.rc == 0 and warned and "at step 6" in r.out, f"truncated: rc {r.rc}: {r.out[-600:]} {r.err[-800:]}"):
        same_losses("truncated", got, range(7, 9))
        print(f"ok   truncated newest: {warned[0][:160]}", flush=True)

    # d. a busy folder: this process holds the lock
    host = socket.gethostname()
    before = sorted(os.listdir(ck))
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"{host} {os.getpid()}\n")
        held.flush()
        r, _ = run("busy", "auto")
        errors = [ln for ln in (r.out + r.err).splitlines() if ln.startswith("error")]
        expect = f"checkpoint.dir: {ck} is in use by another run (host {host}, pid {os.getpid()})"
        checks.check(r.rc == 2 and len(errors) == 1 and expect in errors[0] and r.seconds < 10,
                     f"busy: rc {r.rc}, {r.seconds:.1f} s, errors {errors}")
        with open(lock) as f:
            checks.check(f.read() == f"{host} {os.getpid()}\n", "busy: the refused run touched the lock")
        if errors:
            print(f"ok   busy folder: {errors[0][:160]}", flush=True)
    os.remove(lock)
    checks.check(sorted(os.listdir(ck)) == before, "busy: the refused run changed the folder")

    # e. a lock left by a dead process on this host is taken over
    dead = subprocess.Popen(["true"])
    dead.wait()
    with open(lock, "w") as f:
        f.write(f"{host} {dead.pid}\n")
    r, got = run("stale", "auto")
    checks.check(r.rc == 0 and f"took over {lock} from pid {dead.pid} on {host}" in r.out,
                 f"stale: rc {r.rc}: {r.out[-600:]} {r.err[-800:]}")
    checks.check(not os.path.exists(lock), "stale: the run left its lock behind")
    checks.finish(f"checkpoint_dir ({args.ranks} rank{'s' if args.ranks > 1 else ''})")


if __name__ == "__main__":
    main()
