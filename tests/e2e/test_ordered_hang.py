#!/usr/bin/python3
"""mpi-ordered hangs where two GPUs would (ctest: ordered_hang, label gpu_semantics).

Two ranks that exchange -- each posts a receive and then a send, ungrouped -- on one communicator,
and the same pair split over two communicators (each direction on its own): under a device's view
of NCCL's ordering each rank's receive heads its queue and the send the other waits for is queued
behind it. Each must end with the watchdog's exit 3 within the timeout, every rank naming its wait
(the receive at the head of its queue and the send behind it); issued as one group they complete
(Communicator.OrderedExchangeCompletesWhenGrouped, in the MPI suites).

  test_ordered_hang.py --mpi-tests BIN --mpiexec MPIEXEC
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

TIMEOUT_S = 3  # the watchdog's (GPT2_COMM_TIMEOUT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi-tests", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    args = ap.parse_args()
    checks = gpt2test.Checks()
    for test in ("HangsUngroupedReceiveThenSend", "HangsPairSplitOverTwoCommunicators"):
        cmd = [args.mpiexec, "-n", "2", args.mpi_tests, "--gtest_also_run_disabled_tests",
               f"--gtest_filter=Communicator.DISABLED_{test}"]
        env = dict(os.environ, GPT2_COMM_TIMEOUT=str(TIMEOUT_S), OPENBLAS_NUM_THREADS="1", KOKKOS_NUM_THREADS="1")
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired as x:
            rc, err = 124, (x.stderr or b"").decode() if isinstance(x.stderr, bytes) else (x.stderr or "")
        seconds = time.time() - t0
        checks.check(rc == 3, f"{test}: exit {rc}, expected 3 (the watchdog)\n{err[-2000:]}")
        for rank in (0, 1):
            said = [l for l in err.splitlines() if l.startswith(f"error: rank {rank} waited")]
            checks.check(len(said) == 1 and "the receive with peer" in said[0] and
                         "queued behind the head: the send with peer" in said[0],
                         f"{test}: rank {rank} does not name its wait (the receive at the head, the send behind it):\n"
                         f"{said}")
        print(f"{test}: exit {rc} after {seconds:.1f} s", flush=True)
    checks.finish("ordered_hang")


if __name__ == "__main__":
    main()
