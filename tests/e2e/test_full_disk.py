#!/usr/bin/python3
"""Writes that fail while a run goes on (ctest: full_disk; label faults): exit status 1 -- a failure,
not bad input --, one error line naming the file and the reason, no signal, no partial file, and the
checkpoints written before intact.

a. A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail with EFBIG, as on a full disk) below
   a checkpoint's size: the first checkpoint fails; nothing is left in the folder but its lock-free
   state (no temporary file). The same with checkpoint.async = true (the background write fails,
   the run stops after the next step).
b. The same below the trace's size: the trace fails at the end of the run (no `.tmp` left).
c. Where this test may mount a small tmpfs (root): a checkpoint folder that fills up after two
   checkpoints -- "No space left on device" naming the third, the first two intact (they resume),
   written now and written in the background (checkpoint.async); and a trace file on a tmpfs too
   small for it.
"""
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def unmount(mnt):
    """Unmounts, waiting for an aborted job's last processes to let go (then lazily)."""
    for _ in range(50):
        if subprocess.run(["umount", mnt], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    subprocess.run(["umount", "-l", mnt], check=True)


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    args = ap.parse_args()
    w, train = gpt2test.fresh_workdir_with_shard(args.workdir)
    checks = gpt2test.Checks()

    def deck(name, **more):
        cfg = os.path.join(w, name + ".toml")
        gpt2test.write_deck(cfg, gpt2test.tiny_deck(train, train__steps=4, **more))
        return cfg

    def run(cfg, limit=0, ranks=1):
        """gpt2 train; limit > 0: no file may grow past `limit` bytes (one rank, no launcher)."""
        cmd = [args.gpt2, "train", cfg, "-q"]
        if limit:
            def limited():
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            # (UCX over sockets: its shared-memory transports size files past the limit.)
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", UCX_TLS="self,tcp")
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, preexec_fn=limited)
            return gpt2test.Result(p.returncode, p.stdout, p.stderr, 0)
        return gpt2test.run(cmd, ranks, args.mpiexec, timeout=120)

    def failed_write(name, r, path, reason):
        errors = [ln for ln in r.err.splitlines() if ln.startswith("error")]
        return checks.check(r.rc == 1 and errors and path in errors[0] and reason in errors[0],
                            f"{name}: expected exit 1 and one error naming {path} ({reason}); rc {r.rc}: {r.err[-800:]}")

    def leftovers(folder):
        return [n for n in os.listdir(folder) if ".tmp" in n] if os.path.isdir(folder) else []

    def listing(folder):
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    # Sizes on an unlimited disk: one checkpoint, one trace.
    ref_ck = os.path.join(w, "ref_ck")
    ref_trace = os.path.join(w, "ref_trace.h5")
    r = run(deck("reference", checkpoint__dir=ref_ck, checkpoint__every=1, trace__file=ref_trace))
    checks.check(r.rc == 0, f"reference: rc {r.rc}: {r.err[-600:]}")
    ckpts = sorted(glob.glob(os.path.join(ref_ck, "ckpt_*.h5")))
    if not checks.check(len(ckpts) == 4 and os.path.exists(ref_trace), f"reference: checkpoints {ckpts}"):
        return checks.finish("full_disk")
    ck_bytes, trace_bytes = os.path.getsize(ckpts[0]), os.path.getsize(ref_trace)

    # a. a checkpoint past the file-size limit
    ck = os.path.join(w, "ck_limit")
    r = run(deck("ck_limit", checkpoint__dir=ck, checkpoint__every=1), limit=ck_bytes // 2)
    failed_write("a (checkpoint, file-size limit)", r, os.path.join(ck, "ckpt_00000001.h5"), "File too large")
    checks.check(not glob.glob(os.path.join(ck, "ckpt_*")) and not leftovers(ck), f"a: left {listing(ck)}")
    ck = os.path.join(w, "ck_limit_async")
    r = run(deck("ck_limit_async", checkpoint__dir=ck, checkpoint__every=1, checkpoint__async=True), limit=ck_bytes // 2)
    failed_write("a (async checkpoint, file-size limit)", r, os.path.join(ck, "ckpt_00000001.h5"), "File too large")
    checks.check(not glob.glob(os.path.join(ck, "ckpt_*")) and not leftovers(ck), f"a async: left {listing(ck)}")

    # b. the trace past the limit (the checkpoint-free run's other files are far smaller)
    trace = os.path.join(w, "limited_trace.h5")
    r = run(deck("trace_limit", trace__file=trace), limit=trace_bytes // 2)
    failed_write("b (trace, file-size limit)", r, trace, "")
    checks.check(not os.path.exists(trace) and not leftovers(w), f"b: left {leftovers(w)} / {os.path.exists(trace)}")

    # c. a real full file system, where a tmpfs can be mounted here
    mnt = tempfile.mkdtemp(prefix="gpt2-full-")
    size = (2 * ck_bytes + ck_bytes // 2 + 4095) // 4096 * 4096
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt],
                             capture_output=True).returncode == 0
    if not mounted:
        print("c: skipped (this process may not mount a tmpfs)")
        os.rmdir(mnt)
        return checks.finish("full_disk")
    try:
        for mode in ("sync", "async"):
            ck = os.path.join(mnt, "ck_" + mode)
            r = run(deck("full_ck_" + mode, checkpoint__dir=ck, checkpoint__every=1, parallel__dp=2,
                         checkpoint__async=mode == "async"), ranks=2)
            failed_write(f"c (checkpoint folder fills up, {mode})", r, os.path.join(ck, "ckpt_00000003.h5"),
                         "No space left on device")
            kept = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ck, "ckpt_*")))
            checks.check(kept == ["ckpt_00000001.h5", "ckpt_00000002.h5"] and not leftovers(ck),
                         f"c {mode}: the folder holds {listing(ck)}")
            resumed = os.path.join(w, "resumed_ck_" + mode)
            os.makedirs(resumed)
            for n in kept:
                with open(os.path.join(ck, n), "rb") as src, open(os.path.join(resumed, n), "wb") as dst:
                    dst.write(src.read())
            shutil.rmtree(ck)
            r = run(deck("resume_kept_" + mode, checkpoint__dir=resumed, checkpoint__resume=True))
            checks.check(r.rc == 0 and "resuming from " + os.path.join(resumed, "ckpt_00000002.h5") in r.out,
                         f"c {mode}: the kept checkpoints do not resume: rc {r.rc}: {r.out[-400:]} {r.err[-600:]}")
        unmount(mnt)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={(trace_bytes // 2 + 4095) // 4096 * 4096}", "tmpfs", mnt],
                       check=True)
        trace = os.path.join(mnt, "trace.h5")
        r = run(deck("full_trace", trace__file=trace, parallel__dp=2), ranks=2)
        failed_write("c (trace on a full file system)", r, trace, "")
        checks.check(os.listdir(mnt) == [], f"c: the trace's file system holds {os.listdir(mnt)}")
    finally:
        unmount(mnt)
        os.rmdir(mnt)
    return checks.finish("full_disk")


if __name__ == "__main__":
    sys.exit(main())
