#!/usr/bin/python3
"""Thread budget (ctest: thread_budget): Kokkos' host threads per rank follow parallel.host_threads,
and by default ranks x threads never exceed the cores (each rank takes its share) and the BLAS takes
as many as Kokkos. Read back from the banner and the trace's /meta host_threads. A split that leaves
cores idle or shares them says so in one line ("threads: ..."); the defaults never do. On a Serial or
CUDA build there is one host thread and no such line.
"""
import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402


def threads_of(args, w, name, ranks, **overrides):
    """(Kokkos threads a rank, BLAS threads, execution space, the banner's "threads:" line or None)."""
    deck = os.path.join(w, f"{name}.toml")
    trace = os.path.join(w, f"{name}.h5")
    gpt2test.write_deck(deck, gpt2test.tiny_deck(os.path.join(w, "train.bin"), train__steps=1,
                                                 trace__file=trace, **overrides))
    # OPENBLAS_NUM_THREADS unset: the defaults under test (the helper sets 1 for the suite's runs)
    r = gpt2test.run([args.gpt2, "train", deck], ranks, args.mpiexec, env={"OPENBLAS_NUM_THREADS": ""})
    if r.rc != 0:
        raise SystemExit(f"{name}: exit {r.rc}\n{r.out}\n{r.err}")
    with h5py.File(trace, "r") as f:
        n = int(f["meta"].attrs["host_threads"])
        blas = int(f["meta"].attrs["blas_threads"])
        space = f["meta"].attrs["execution_space"]
    space = space.decode() if isinstance(space, bytes) else str(space)
    if f"with {n} threads, {blas} BLAS threads/rank" not in r.out:
        raise SystemExit(f"{name}: the banner does not say {n} threads and {blas} BLAS threads:\n{r.out}")
    fit = [line for line in r.out.splitlines() if line.startswith("gpt2 train: threads:")]
    if len(fit) > 1:
        raise SystemExit(f"{name}: {len(fit)} thread lines (one expected, from the first rank):\n{r.out}")
    return n, blas, space, fit[0] if fit else None


def main():
    args = gpt2test.e2e_arg_parser(__doc__).parse_args()
    w = gpt2test.fresh_dir(args.workdir)
    for k in ("KOKKOS_NUM_THREADS", "OMP_NUM_THREADS"):  # the defaults under test, not the caller's
        os.environ.pop(k, None)
    gpt2test.write_shard(os.path.join(w, "train.bin"), gpt2test.learnable_tokens(2000, 64))
    cores = len(os.sched_getaffinity(0))
    n3, blas3, space, fit3 = threads_of(args, w, "three", 1, parallel__host_threads=cores + 1)
    threaded = space in ("OpenMP", "Threads")
    expect = cores + 1 if threaded else 1
    if n3 != expect:
        raise SystemExit(f"parallel.host_threads = {cores + 1} on {space}: {n3} threads, expected {expect}")
    if threaded and blas3 != n3:
        raise SystemExit(f"parallel.blas_threads = 0 beside {n3} Kokkos threads: {blas3} BLAS threads, expected {n3}")
    n_auto, _, _, fit_auto = threads_of(args, w, "auto", 2, parallel__dp=2)
    expect = max(1, cores // 2) if threaded else 1
    if n_auto != expect:
        raise SystemExit(f"2 ranks on {cores} cores, host_threads = 0: {n_auto} threads per rank, "
                         f"expected {expect}")
    _, _, _, fit_one = threads_of(args, w, "one", 1)
    _, _, _, fit_idle = threads_of(args, w, "idle", 1, parallel__host_threads=1, parallel__blas_threads=cores)
    # What each run should have said: more busy threads than cores; nothing (the defaults, where
    # the cores divide among the ranks); one Kokkos thread leaving the others idle (cores > 1).
    want = {"three": ("share", fit3), "auto": (None if cores % 2 == 0 else "any", fit_auto),
            "one": (None, fit_one), "idle": ("Kokkos leaves" if cores > 1 else None, fit_idle)}
    for name, (key, line) in want.items():
        if not threaded:
            key = None
        if key == "any":
            continue
        if (key is None) != (line is None) or (key and key not in line):
            raise SystemExit(f"{name}: expected {'no thread line' if key is None else repr(key)}, got {line!r}")
    print(f"thread budget ok ({space}: host_threads={cores + 1} -> {n3}, {fit3!r}; 2 ranks on {cores} cores -> "
          f"{n_auto} each; host 1 x BLAS {cores}: {fit_idle!r})")


if __name__ == "__main__":
    main()
