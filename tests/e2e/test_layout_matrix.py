#!/usr/bin/python3
"""The layout matrix (ctest label matrix): every pair of values of the grid's axes runs end to end.

The axes: dp, tp, pp, cp, ZeRO level, pipeline schedule (the six built in, and a schedule file),
virtual stages, sequence parallelism, precision, activation recomputation. The cases are a pairwise covering array,
generated here (greedy, deterministic) over the combinations the engine accepts on 1, 2, 4 or 8
ranks: every pair of values that some accepted combination holds appears in at least one case.
Each case trains 2 steps of a tiny 8-layer model with validation data (evaluated after step 2) and
stops with a checkpoint; the next case of the same precision (another layout) resumes it and
trains steps 3 and 4, then evaluates. Losses and validation losses must equal the one-rank run of
the same precision: to 1e-5 in fp32, 1e-3 in bf16 and fp16. Each run has a time limit well below
the communication watchdog's (GPT2_COMM_TIMEOUT, 600 s); a run over it is killed and named.
With --comm mpi-ordered every run uses NCCL's ordering on the host (ctest label gpu_semantics); a
layout whose pass lists would hang there must be refused before any work (exit 2, naming NCCL's
ordering), and is counted as such.

  test_layout_matrix.py --gpt2 BIN --mpiexec MPIEXEC --workdir DIR [--comm C] [--list] [--only N,M]
"""
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import gpt2test  # noqa: E402

N_LAYER, BATCH = 8, 16
AXES = {
    "dp": [1, 2, 4],
    "tp": [1, 2, 4],
    "pp": [1, 2, 4],
    "cp": [1, 2, 4],
    "zero": [0, 1, 2, 3],
    "schedule": ["naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "file"],
    "virtual_stages": [1, 2, 4],
    "sequence_parallel": [False, True],
    "precision": ["fp32", "bf16", "fp16"],
    "recompute": ["none", "selective", "full"],
}
NAMES = list(AXES)
RUN_LIMIT_S = 90  # per run; the watchdog's default is 600 s
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-3, "fp16": 1e-3}


def microbatches(c):
    """Two per pipeline stage where the batch allows, else one per stage (interleaved: a multiple of pp)."""
    per_rank = BATCH // c["dp"]
    return 2 * c["pp"] if per_rank % (2 * c["pp"]) == 0 else c["pp"]


def accepted(c):
    """The engine's layout rules for this model (8 layers, 4 heads, batch 16), as a deck sees them."""
    if ranks(c) not in (1, 2, 4, 8):
        return False
    if c["cp"] > 1 and c["recompute"] == "selective":
        return False  # ring attention keeps no probabilities to drop
    if c["virtual_stages"] > 1 and c["schedule"] != "interleaved":
        return False  # parallel.virtual_stages is the interleaved schedule's
    chunks = 2 if c["schedule"] == "zb-v" else c["virtual_stages"] if c["schedule"] == "interleaved" else 1
    if N_LAYER % (c["pp"] * chunks) != 0:
        return False
    m = microbatches(c)
    return (BATCH // c["dp"]) % m == 0 and m % c["pp"] == 0


def pairwise_cases():
    """Greedy covering array: repeatedly the accepted combination that covers most uncovered pairs
    (ties: fewer ranks, then the first in order), until every pair some accepted combination holds
    is covered."""
    combos = [dict(zip(NAMES, v)) for v in itertools.product(*AXES.values())]
    combos = [c for c in combos if accepted(c)]

    def pairs(c):
        return {((a, c[a]), (b, c[b])) for a, b in itertools.combinations(NAMES, 2)}
    uncovered = set().union(*(pairs(c) for c in combos))
    total = len(uncovered)
    cases = []
    while uncovered:
        best = max(combos, key=lambda c: (len(pairs(c) & uncovered), -c["dp"] * c["tp"] * c["pp"]))
        cases.append(best)
        uncovered -= pairs(best)
    return cases, total


def describe(c):
    s = f"dp{c['dp']} tp{c['tp']} pp{c['pp']} zero{c['zero']} {c['schedule']}"
    if c["virtual_stages"] > 1:
        s += f" v{c['virtual_stages']}"
    if c["sequence_parallel"]:
        s += " sp"
    if c["cp"] > 1:
        s += f" cp{c['cp']}"
    if c["recompute"] != "none":
        s += f" recompute-{c['recompute']}"
    return s + f" m{microbatches(c)} {c['precision']}"


def ranks(c):
    return c["dp"] * c["tp"] * c["pp"] * c["cp"]


class Matrix:
    def __init__(self, args):
        self.args = args
        self.w = gpt2test.fresh_dir(args.workdir)
        self.train_bin = os.path.join(self.w, "train.bin")
        self.val = os.path.join(self.w, "val.bin")
        gpt2test.write_shard(self.train_bin, gpt2test.learnable_tokens(8000, 64))
        gpt2test.write_shard(self.val, gpt2test.learnable_tokens(2000, 64, seed=99))
        self.checks = gpt2test.Checks()
        self.schedule_files = {}
        self.refused = []

    def run(self, name, cmd, n):
        """cmd on n ranks in its own process group, killed whole after RUN_LIMIT_S: (rc, out, err)."""
        full = [self.args.mpiexec, "-n", str(n)] + cmd if n > 1 else cmd
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", KOKKOS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True, cwd=self.w)
        try:
            out, err = p.communicate(timeout=RUN_LIMIT_S)
            return p.returncode, out, err
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return 124, out, err + f"\n{name}: TIMED OUT after {RUN_LIMIT_S} s (a hang): killed"

    def schedule_file(self, c):
        """A schedule file for the case's pp and microbatches: zb-h1's passes, as `gpt2 simulate
        --print-schedule` writes them (the engine adds the messages and proves the lists)."""
        key = (c["pp"], microbatches(c))
        if key not in self.schedule_files:
            deck = self.deck(dict(c, schedule="zb-h1", dp=1, tp=1, cp=1, zero=0, sequence_parallel=False), "", 2)
            path = os.path.join(self.w, f"print_{key[0]}_{key[1]}.toml")
            gpt2test.write_deck(path, deck)
            r = subprocess.run([self.args.gpt2, "simulate", path, "--print-schedule"], capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 0:
                raise SystemExit(f"gpt2 simulate --print-schedule failed: {r.stderr}")
            out = os.path.join(self.w, f"matrix_pp{key[0]}_m{key[1]}.sched")
            with open(out, "w") as f:
                f.write(r.stdout.replace("name = zb-h1", f"name = matrix-pp{key[0]}-m{key[1]}"))
            self.schedule_files[key] = out
        return self.schedule_files[key]

    def deck(self, c, ckpt_dir, steps):
        par = {"dp": c["dp"], "tp": c["tp"], "pp": c["pp"], "cp": c["cp"], "zero": c["zero"],
               "microbatches": microbatches(c), "virtual_stages": c["virtual_stages"],
               "sequence_parallel": c["sequence_parallel"]}
        if c["schedule"] == "file":
            par["schedule_file"] = self.schedule_file(c)
        else:
            par["schedule"] = c["schedule"]
        d = {
            "model": {"n_layer": N_LAYER, "n_head": 4, "n_embd": 32, "vocab_size": 64, "block_size": 16},
            "data": {"train": self.train_bin, "val": self.val, "seq_len": 16},
            "train": {"batch_size": BATCH, "steps": steps, "lr": 1e-3, "eval_every": 2, "eval_batches": 2,
                      "precision": c["precision"], "seed": 3, "recompute": c["recompute"]},
            "parallel": par,
        }
        if self.args.comm:
            par["comm"] = self.args.comm
        if ckpt_dir:
            d["checkpoint"] = {"dir": ckpt_dir, "every": 2, "resume": "auto"}
        return d

    def train(self, name, c, ckpt_dir, stop_at=0):
        """Trains case c (4 steps, or up to stop_at); returns ({step: loss}, {step: val loss}) or None."""
        deck = os.path.join(self.w, name + ".toml")
        gpt2test.write_deck(deck, self.deck(c, ckpt_dir, 4))
        metrics = os.path.join(self.w, name + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        cmd = [self.args.gpt2, "train", deck, "--metrics-jsonl", metrics, "-q"]
        if stop_at:
            cmd += ["--stop-at", str(stop_at)]
        t0 = time.time()
        rc, out, err = self.run(name, cmd, ranks(c))
        seconds = time.time() - t0
        if rc == 2 and "under NCCL's ordering" in err:
            self.refused.append(f"{name} ({describe(c)})")
            print(f"  {name}: {describe(c)}: refused, its lists would hang under NCCL's ordering", flush=True)
            return None
        if not self.checks.check(rc == 0, f"{name} ({describe(c)}, {ranks(c)} ranks): exit {rc}\n{err[-3000:]}"):
            return None
        rows = gpt2test.read_jsonl(metrics)
        loss = {m["step"]: m["loss"] for m in rows if "loss" in m}
        val = {m["step"]: m["val_loss"] for m in rows if "val_loss" in m}
        print(f"  {name}: {describe(c)} on {ranks(c)} ranks, {seconds:.1f} s", flush=True)
        return loss, val

    def compare(self, what, got, ref, precision):
        tol = TOLERANCE[precision]
        for kind, g, r in (("loss", got[0], ref[0]), ("val loss", got[1], ref[1])):
            for step, value in g.items():
                want = r.get(step)
                self.checks.check(want is not None and abs(value - want) <= tol * abs(want),
                                  f"{what}: step {step} {kind} {value!r}, one rank {want!r} (tolerance {tol:g})")


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--only", default="", help="comma-separated case numbers to run")
    ap.add_argument("--comm", default="", help="parallel.comm for every run (default: the deck's default)")
    args = ap.parse_args()
    args.gpt2 = os.path.abspath(args.gpt2)
    cases, pairs = pairwise_cases()
    by_world = {n: sum(ranks(c) == n for c in cases) for n in (1, 2, 4, 8)}
    print(f"matrix: {len(cases)} cases cover {pairs} pairs of values "
          f"({', '.join(f'{v} on {k} rank(s)' for k, v in by_world.items())})", flush=True)
    if args.list:
        for i, c in enumerate(cases):
            print(f"  case {i}: {describe(c)} ({ranks(c)} ranks)")
        return
    only = {int(x) for x in args.only.split(",") if x}
    mx = Matrix(args)
    t_all = time.time()
    one_rank = dict(dp=1, tp=1, pp=1, cp=1, zero=0, schedule="1f1b", virtual_stages=1, sequence_parallel=False,
                    recompute="none")
    refs = {}
    for prec in TOLERANCE:
        refs[prec] = mx.train(f"ref_{prec}", dict(one_rank, precision=prec), "")
        if refs[prec] is None:
            mx.checks.finish("layout_matrix")
    for i, c in enumerate(cases):
        if only and i not in only:
            continue
        name = f"case{i:02d}"
        # The next case of the same precision resumes this one's checkpoint on its own layout.
        same = [j for j in range(i + 1, i + len(cases)) if cases[j % len(cases)]["precision"] == c["precision"]]
        nxt = cases[same[0] % len(cases)] if same else c
        ck = os.path.join(mx.w, name + "_ck")
        first = mx.train(name, c, ck, stop_at=2)
        if first is None:
            continue
        mx.compare(f"{name} ({describe(c)})", first, refs[c["precision"]], c["precision"])
        resumed = mx.train(name + "_resumed", nxt, ck)
        if resumed is None:
            continue
        mx.checks.check(sorted(resumed[0]) == [3, 4], f"{name}: the resumed run reported steps {sorted(resumed[0])}")
        mx.compare(f"{name} resumed as ({describe(nxt)})", resumed, refs[c["precision"]], c["precision"])
        if not mx.checks.failures:
            shutil.rmtree(ck, ignore_errors=True)
    print(f"matrix: {time.time() - t_all:.0f} s in all; {len(mx.refused)} run(s) refused under NCCL's ordering",
          flush=True)
    mx.checks.finish("layout_matrix")


if __name__ == "__main__":
    main()
