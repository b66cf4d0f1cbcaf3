#!/usr/bin/python3
"""Thread budget (ctest: thread_budget): Kokkos' host threads per rank follow parallel.host_threads,
and by default ranks x threads never exceed the cores (each rank takes its share). Read back from the
banner and the trace's /meta host_threads. On a Serial or CUDA build there is one host thread.
"""
import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def threads_of(args, w, name, ranks, **overrides):
    deck = os.path.join(w, f"{name}.toml")
    trace = os.path.join(w, f"{name}.h5")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), train__steps=1,
                                                 trace__file=trace, **overrides))
    r = gpt2test.run([args.gpt2, "train", deck], ranks, args.mpiexec)
    if r.rc != 0:
        raise SystemExit(f"{name}: exit {r.rc}\n{r.out}\n{r.err}")
    with h5py.File(trace, "r") as f:
        n = int(f["meta"].attrs["host_threads"])
        space = f["meta"].attrs["execution_space"]
    space = space.decode() if isinstance(space, bytes) else str(space)
    if f"with {n} threads" not in r.out:
        raise SystemExit(f"{name}: the banner does not say {n} threads:\n{r.out}")
    return n, space


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    for k in ("KOKKOS_NUM_THREADS", "OMP_NUM_THREADS"):  # the defaults under test, not the caller's
        os.environ.pop(k, None)
    gpt2test.write_shard(os.path.join(w, "train.bin"), gpt2test.learnable_tokens(2000, 64))
    cores = len(os.sched_getaffinity(0))
    n3, space = threads_of(args, w, "three", 1, parallel__host_threads=3)
    threaded = space in ("OpenMP", "Threads")
    expect = 3 if threaded else 1
    if n3 != expect:
        raise SystemExit(f"parallel.host_threads = 3 on {space}: {n3} threads, expected {expect}")
    n_auto, _ = threads_of(args, w, "auto", 2, parallel__dp=2)
    expect = max(1, cores // 2) if threaded else 1
    if n_auto != expect:
        raise SystemExit(f"2 ranks on {cores} cores, host_threads = 0: {n_auto} threads per rank, "
                         f"expected {expect}")
    print(f"thread budget ok ({space}: host_threads=3 -> {n3}; 2 ranks on {cores} cores -> {n_auto} each)")


if __name__ == "__main__":
    main()
