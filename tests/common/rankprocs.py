"""Rank processes of a launch, seen from outside (Linux /proc): start `mpiexec -n N gpt2 ...` (or
gpt2 alone) in a session of its own, find its ranks, signal them, wait for the whole job to be gone,
and clean up whatever is left. Shared by the fault, signal and straggler tests and the straggler
benchmark."""
import os
import random
import signal
import subprocess
import threading
import time

RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")



def proc_stat(pid):
    """(state, ppid, session) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[3])


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def proc_comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_rank(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return None
    for v in RANK_VARS:
        if v.encode() in env:
            return int(env[v.encode()])
    return None


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def alive(pid):
    """Exists and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


class Job:
    """One `mpiexec -n N gpt2 ...` (ranks = 0: gpt2 alone, its own rank 0) in a session of its own,
    stdout/stderr into files."""

    def __init__(self, args, name, cmd, ranks, env):
        self.name, self.workdir = name, args.workdir
        self.out_path = os.path.join(args.workdir, name + ".out")
        self.err_path = os.path.join(args.workdir, name + ".err")
        e = dict(os.environ, OPENBLAS_NUM_THREADS="1", **env)
        full = [args.mpiexec, "-n", str(ranks)] + cmd if ranks else cmd
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(full, stdout=out, stderr=err, env=e, cwd=args.workdir,
                                         start_new_session=True)
        self.t_start = time.time()
        self.ranks = {}  # world rank -> pid, remembered (they outlive the launcher's tree when orphaned)

    def find_ranks(self, n, timeout=60):
        """Waits until n rank processes (descendants of the launcher naming our workdir) exist.
        Without a launcher the process itself is rank 0."""
        if self.proc.args[0].endswith("gpt2"):
            self.ranks = {0: self.proc.pid}
            return self.ranks
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            parent = {}
            for pid in all_pids():
                st = proc_stat(pid)
                if st:
                    parent[pid] = st[1]
            candidates = {}
            for pid in parent:
                p, depth = parent.get(pid), 0
                while p and p != self.proc.pid and depth < 16:
                    p, depth = parent.get(p), depth + 1
                if p == self.proc.pid and self.workdir in proc_cmdline(pid) and "hydra_pmi_proxy" not in proc_cmdline(pid):
                    rank = proc_rank(pid)
                    if rank is not None:
                        candidates[pid] = rank
            # A rank's exit witness under mpiexec (its child, with its command line and environment)
            # is not a rank: named gpt2-witness, and its parent is one.
            found = {rank: pid for pid, rank in candidates.items()
                     if parent.get(pid) not in candidates and proc_comm(pid) != "gpt2-witness"}
            if len(found) == n:
                self.ranks = found
                return found
            time.sleep(0.05)
        return None

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self):
        with open(self.out_path, errors="replace") as f:
            out = f.read()
        with open(self.err_path, errors="replace") as f:
            err = f.read()
        return out, err

    def leftovers(self):
        """Live processes of this launch: its session, and the rank pids seen (if still ours)."""
        pids = set()
        for pid in all_pids():
            st = proc_stat(pid)
            if st and st[2] == self.proc.pid and st[0] not in ("Z", "X"):
                pids.add(pid)
        for pid in self.ranks.values():
            if alive(pid) and self.workdir in proc_cmdline(pid):
                pids.add(pid)
        return sorted(pids)

    def cleanup(self):
        for pid in self.leftovers():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"{self.name}: the launcher {self.proc.pid} did not die after SIGKILL", flush=True)


def slow_down(pid, done, stop_s=0.006, run_s=0.006):
    """Stops `pid` for about stop_s, lets it run for about run_s, and again, until `done` is set (then
    lets it run). Each pause is drawn from 0.5-1.5x its mean: a fixed cycle near a step's length can
    fall into step with the run, every stop landing while the rank waits for its peer and costing its
    compute nothing (10 ms of every 30 named nobody in 1 run of 3 here; its medians were 1.2-1.6x).
    In drawn pauses, a third of the time gave medians of 1.2-2.1x, 40% 1.6-2.3x (and 1 failure in
    12 runs with both cores loaded), half 2.0-3.4x."""
    try:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_s * random.uniform(0.5, 1.5))
            os.kill(pid, signal.SIGCONT)
            time.sleep(run_s * random.uniform(0.5, 1.5))
    except ProcessLookupError:
        pass
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def run_slowed(job, n, rank, timeout=600, stop_s=0.006, run_s=0.006):
    """Finds the job's n ranks, slows `rank` (slow_down) until the job ends or `timeout` passes,
    then cleans up. Returns the ranks found, or None when they were not (the job then runs as is)."""
    done, slower, ranks = threading.Event(), None, None
    try:
        ranks = job.find_ranks(n)
        if ranks:
            slower = threading.Thread(target=slow_down, args=(ranks[rank], done, stop_s, run_s))
            slower.start()
        job.wait(timeout)
    finally:
        done.set()
        if slower:
            slower.join()
        job.cleanup()
    return ranks


def wait_for_lines(path, n, job, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline and job.proc.poll() is None:
        try:
            with open(path) as f:
                if sum(1 for line in f if line.strip()) >= n:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def gone_within(job, pids, seconds):
    """True once the launcher has exited and every pid is gone (dead or zombie), within `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if job.proc.poll() is not None and not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False
