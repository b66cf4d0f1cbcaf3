#!/usr/bin/python3
"""Seeded mutations: small faults put into the code one at a time, each of which some ctest must
catch. A check that cannot fail is a defect; this shows, fault by fault, which test fails.

For each mutation: the source text is replaced (it must occur exactly once), the build is brought
up to date, the named ctest(s) run, and the file is restored -- also when the script is interrupted
or a step fails. A mutation is CAUGHT when at least one of its tests fails; the script exits 1 if
any mutation survives. Run it by hand on a build of this tree (it takes a few minutes a mutation on
2 cores: a rebuild of the files it touches and the tests it names).

  tests/mutation/run_mutations.py [--build DIR] [--only NAME,...] [--list]
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Mutation:
    def __init__(self, name, what, path, old, new, tests):
        self.name, self.what, self.path, self.old, self.new, self.tests = name, what, path, old, new, tests


MUTATIONS = [
    Mutation("cp-loss-factor", "context parallelism's factor cp dropped from the loss gradient",
             "src/train/trainer.cpp", "io.dloss = float(scale * cfg_.parallel.dp * e.topo->cp() /",
             "io.dloss = float(scale * cfg_.parallel.dp /",
             "^(mpi_tests_np4|layout_matrix_refs|layout_matrix)$"),
    Mutation("dp-sum", "data-parallel gradients summed instead of averaged",
             "src/parallel/gradient_reducer.cpp",
             "p.request = dp_.iallreduce(src, b.range.size(), DType::f32, ReduceOp::avg);",
             "p.request = dp_.iallreduce(src, b.range.size(), DType::f32, ReduceOp::sum);", "^mpi_tests_np2$"),
    Mutation("zero3-regather", "ZeRO-3 skips the re-gather of a released unit (its stale workspace is read)",
             "src/parallel/param_store.cpp", "  g.buf = Buffer<float>();\n  g.low = Buffer<uint16_t>();\n  g.refs = 0;",
             "  g.low = Buffer<uint16_t>();\n  g.refs = 0;", "^mpi_tests_np2$"),
    Mutation("drop-microbatch", "1F1B's last backward dropped from the schedule",
             "src/pipeline/schedule.cpp",
             "for (int i = m - warmup; i < m; ++i) out.push_back({ActionKind::backward, i});",
             "for (int i = m - warmup; i < m - 1; ++i) out.push_back({ActionKind::backward, i});",
             "^(mpi_tests_np2|schedule_file)$"),
    Mutation("team-barrier", "a team barrier missing: column sums read the team's partial sums before all are written",
             "src/tensor/column_sum.hpp",
             "        team.team_barrier();\n        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](int k) {",
             "        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](int k) {",
             "^unit_kernels_teams4$"),
    Mutation("tp-reduction", "tensor parallelism's all-reduce takes the max instead of the sum",
             "src/parallel/tp_comm.hpp",
             "void all_reduce_sum(float* buf, size_t n) override { all_reduce(buf, n, ReduceOp::sum); }",
             "void all_reduce_sum(float* buf, size_t n) override { all_reduce(buf, n, ReduceOp::max); }",
             "^mpi_tests_np2$"),
    Mutation("checkpoint-rng", "checkpoints leave out the sampler's random state",
             "src/train/checkpointer.cpp", "  meta.rng = state_.sample_rng.state();\n", "", "^e2e_resume$"),
    Mutation("data-position", "an off-by-one in the data position: every batch starts one sequence late",
             "src/data/loader.cpp", "const size_t pos = size_t(j * B_ + row);",
             "const size_t pos = size_t(j * B_ + row + 1);", "^e2e_pytorch_1rank$"),
    Mutation("fence-in-backward", "a Kokkos::fence() (a whole-device wait) in a block's backward",
             "src/model/stage_block.cpp", "  const bool keep = pass != Pass::backward;\n",
             "  const bool keep = pass != Pass::backward;\n  Kokkos::fence();\n", "^(mpi_tests_np2|device_sync_rule)$"),
    Mutation("view-in-step", "a View allocated inside the step (in a block's backward)",
             "src/model/stage_block.cpp", "  const bool keep = pass != Pass::backward;\n",
             "  const bool keep = pass != Pass::backward;\n  Buffer<float> scratch(\"scratch\", 16);\n",
             "^mpi_tests_np2$"),
    Mutation("ungrouped-exchange", "the pipeline's runs of messages issued ungrouped (each its own operation)",
             "src/pipeline/p2p.hpp", "  void begin_group() { pipe_.group_start(); }\n  void end_group() { pipe_.group_end(); }",
             "  void begin_group() {}\n  void end_group() {}", "^gpu_semantics_pipeline_np2$"),
    Mutation("tp-host-wait", "tensor parallelism's all-gather waits on the host instead of a stream dependency",
             "src/parallel/tp_comm.hpp", "    Request r = tp_.iall_gather(send, recv, n, DType::f32);\n    tp_.order_after(r);",
             "    Request r = tp_.iall_gather(send, recv, n, DType::f32);\n    tp_.wait(r);", "^mpi_tests_np2$"),
]


def sh(cmd, timeout=None):
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the build folder of this tree (default build)")
    ap.add_argument("--only", default="", help="comma-separated mutation names")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only.split(",")]
    if args.list:
        for m in chosen:
            print(f"{m.name:20s} {m.what}\n{'':20s} {m.path}; ctest -R '{m.tests}'")
        return 0
    build = os.path.abspath(args.build)
    results = []
    for m in chosen:
        path = os.path.join(ROOT, m.path)
        with open(path) as f:
            original = f.read()
        if original.count(m.old) != 1:
            print(f"{m.name}: the text to mutate occurs {original.count(m.old)} times in {m.path}; skipped")
            results.append((m, "NOT APPLIED", ""))
            continue
        # Restored whatever happens (Ctrl-C included).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with open(path, "w") as f:
                f.write(original.replace(m.old, m.new))
            t0 = time.time()
            rc, out = sh(["cmake", "--build", build, "-j2"])
            if rc != 0:
                results.append((m, "CAUGHT (does not build)", out[-300:]))
            else:
                rc, out = sh(["ctest", "--test-dir", build, "-R", m.tests, "--output-on-failure"], timeout=1800)
                failed = re.findall(r"^\s*\d+ - (\S+)", out, re.M)
                names = ", ".join(failed) or "(see the output)"
                results.append((m, f"CAUGHT by {names}" if rc != 0 else "SURVIVED", out[-600:] if rc == 0 else ""))
            print(f"{m.name}: {results[-1][1]} ({time.time() - t0:.0f} s)", flush=True)
        finally:
            with open(path, "w") as f:
                f.write(original)
            signal.signal(signal.SIGINT, previous)
    sh(["cmake", "--build", build, "-j2"])  # back to the tree as it is
    print("\nmutation             result")
    for m, result, detail in results:
        print(f"{m.name:20s} {result}")
        if result == "SURVIVED":
            print(detail)
    return 0 if all(r.startswith("CAUGHT") for _, r, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
