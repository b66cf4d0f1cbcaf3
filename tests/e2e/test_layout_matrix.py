#!/usr/bin/python3
"""The layout matrix (ctest label matrix): every pair of values of the grid's axes that both act runs
end to end and equals one rank, number for number.

The axes: dp, tp, pp, cp, ZeRO level, pipeline schedule (the six built in, and a schedule file),
virtual stages, sequence parallelism, precision, activation recomputation, attention (materialized or
fused; the one-rank reference is materialized, so fused cases hold it to it), document masks
(data.document_mask at token 0 of the data: attention within documents, positions restarting; their
own one-rank references), and the communication
backend (mpi, or mpi-ordered: a device's view of NCCL's ordering on the host, its runs on up to 4
ranks with teams of 2 threads -- the ctest label gpu_semantics), and the optimizer (AdamW, or Muon: its matrices made whole on owners under ZeRO and tp; asked about
for a seeded sample of 3000 of AdamW's accepted combinations). A pair counts only where
both of its values take effect (see ACTS: ZeRO with dp x cp > 1, a schedule or virtual stages with
pp > 1, sequence parallelism with tp > 1, selective recomputation where there are probabilities to
drop); the engine decides which combinations run (`gpt2 info DECK --accepts`, one process for all
candidates). The cases are a greedy covering array over the accepted combinations on 1, 2, 4 or 8
ranks: every pair of acting values that some accepted combination holds appears in a case where both
act.

The cases of one precision, backend, document masking and optimizer form a chain: each resumes the checkpoint the case before it
wrote on its own layout (the first, and a case after one that failed, the one-rank reference's) and
trains 2 more steps of a tiny 8-layer model (validation every 2 steps), writing its own. Every step's
loss and gradient norm and every validation loss must equal the one-rank run's (losses: 1e-5 in
fp32, 1e-3 in bf16 / fp16; gradient norms 1e-4 and 5e-2), and the rows must be exactly the steps run
-- a missing or extra row fails, naming it. Each run's trace must show, on every rank, at most one
whole-device wait and no other host wait or allocation in any step (/meta device_waits_per_step,
allocations_per_step, stream_waits_per_step, host_copies_per_step, host_waits_per_step). The
one-rank references (every step's numbers and a checkpoint every 2 steps) are run once (--write-refs) and shared by the two halves (--comm mpi, --comm mpi-ordered).

  test_layout_matrix.py --gpt2 BIN --mpiexec MPIEXEC --workdir DIR --refs DIR [--write-refs]
                        [--comm C] [--list] [--only N,M]
"""
import itertools
import json
import os
import random
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
    "schedule": ["naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "interleaved-zb", "dualpipev", "file"],
    "virtual_stages": [1, 2, 4],
    "sequence_parallel": [False, True],
    "precision": ["fp32", "bf16", "fp16"],
    "recompute": ["none", "selective", "full"],
    "attention": ["materialized", "fused"],
    "documents": [False, True],
    "comm": ["mpi", "mpi-ordered"],
    "optimizer": ["adamw", "muon"],
}
NAMES = list(AXES)
# Where a value takes effect (the defaults always do): a pair counts only in a case where both act.
ACTS = {
    "zero": lambda v, c: v == 0 or c["dp"] * c["cp"] > 1,
    "schedule": lambda v, c: c["pp"] > 1,
    "virtual_stages": lambda v, c: v == 1 or c["pp"] > 1,
    "sequence_parallel": lambda v, c: not v or c["tp"] > 1,
    # ring and fused attention keep no probabilities
    "recompute": lambda v, c: v != "selective" or (c["cp"] == 1 and c["attention"] == "materialized"),
    "attention": lambda v, c: v == "materialized" or c["cp"] == 1,  # (the ring is always fused)
}
RUN_LIMIT_S = 120  # per run; the watchdog's default is 600 s
MUON_SAMPLE = 3000  # accepted combinations whose other-optimizer variants the engine is asked about
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-3, "fp16": 1e-3}        # losses, relative
NORM_TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 5e-2}   # gradient norms, relative
ONE_RANK = dict(dp=1, tp=1, pp=1, cp=1, zero=0, schedule="1f1b", virtual_stages=1, sequence_parallel=False,
                recompute="none", attention="materialized", documents=False, comm="mpi", optimizer="adamw")
EOT = 0  # data.eot_token under document masks: a token of the matrix's data
STEPS_PER_CASE = 2


def microbatches(c):
    """Two per pipeline stage where the batch allows, else one per stage."""
    per_rank = BATCH // c["dp"]
    return 2 * c["pp"] if per_rank % (2 * c["pp"]) == 0 else c["pp"]


def ranks(c):
    return c["dp"] * c["tp"] * c["pp"] * c["cp"]


def team_threads(c):
    """Threads a rank (and a team) for case c: mpi-ordered runs the team kernels as a GPU does, with
    teams of 2, on up to 4 ranks; on 8 ranks of a 2-core host, 16 threads waking each other at every
    kernel launch take 10x the time to say nothing the smaller layouts do not."""
    return 2 if c["comm"] == "mpi-ordered" and ranks(c) <= 4 else 1


def acts(name, c):
    return ACTS.get(name, lambda v, c: True)(c[name], c)


def canonical(c):
    """c with every value that does not act set to the one-rank run's (attention to fused, which the
    ring makes every attention): the same acting pairs, so one question to the engine stands for the
    up to 27 combinations that differ only where nothing acts."""
    d = dict(c)
    changed = True
    while changed:
        changed = False
        for n in NAMES:
            v = "fused" if n == "attention" else ONE_RANK.get(n, d[n])
            if not acts(n, d) and d[n] != v:
                d[n], changed = v, True
    return d


def pairs(c):
    """The pairs of values of c that both act."""
    on = [n for n in NAMES if acts(n, c)]
    return {((a, c[a]), (b, c[b])) for a, b in itertools.combinations(on, 2)}


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
    if c["attention"] != "materialized" and c["cp"] == 1:
        s += f" {c['attention']}"
    if c["documents"]:
        s += " documents"
    if c["optimizer"] != "adamw":
        s += f" {c['optimizer']}"
    return s + f" m{microbatches(c)} {c['precision']} {c['comm']}"


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
        self.total_steps = 0  # every run's train.steps (one learning-rate schedule): set by the chains

    # ---- the engine's view ----------------------------------------------------------------------
    def schedule_file(self, c):
        """A schedule file for the case's pp and microbatches: zb-h1's passes, as `gpt2 simulate
        --print-schedule` writes them (the engine adds the messages and proves the lists)."""
        key = (c["pp"], microbatches(c))
        if key not in self.schedule_files:
            deck = self.deck(dict(c, schedule="zb-h1", dp=1, tp=1, cp=1, zero=0, sequence_parallel=False), "")
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

    def parallel(self, c):
        par = {"dp": c["dp"], "tp": c["tp"], "pp": c["pp"], "cp": c["cp"], "zero": c["zero"],
               "microbatches": microbatches(c), "virtual_stages": c["virtual_stages"],
               "sequence_parallel": c["sequence_parallel"]}
        if c["schedule"] == "file":
            par["schedule_file"] = self.schedule_file(c)
        else:
            par["schedule"] = c["schedule"]
        return par

    def accepted(self, combos):
        """The combinations the engine accepts for this deck: one `gpt2 info --accepts` for all."""
        base = os.path.join(self.w, "accepts.toml")
        gpt2test.write_deck(base, self.deck(ONE_RANK | {"precision": "fp32"}, ""))
        lines = os.path.join(self.w, "accepts.txt")
        with open(lines, "w") as f:
            for c in combos:
                sets = {f"parallel.{k}": v for k, v in self.parallel(c).items()}
                sets |= {"train.precision": c["precision"], "train.recompute": c["recompute"],
                         "model.attention": c["attention"], "parallel.comm": c["comm"],
                         "data.document_mask": c["documents"], "data.eot_token": EOT,
                         "train.optimizer": c["optimizer"]}
                if "parallel.schedule_file" in sets:
                    sets["parallel.schedule"] = "1f1b"  # (the file's own name replaces it)
                f.write(" ".join(f"{k}={gpt2test.toml_value(v)}" for k, v in sets.items()) + "\n")
        r = subprocess.run([self.args.gpt2, "info", base, "--accepts", lines], capture_output=True, text=True,
                           timeout=840)
        if r.returncode != 0:
            raise SystemExit(f"gpt2 info --accepts failed ({r.returncode}): {r.stderr[-2000:]}")
        answers = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        if len(answers) != len(combos):
            raise SystemExit(f"gpt2 info --accepts answered {len(answers)} of {len(combos)} lines")
        return [c for c, a in zip(combos, answers) if a["accepted"]]

    def cases(self):
        """Greedy covering array: repeatedly the accepted combination that covers most uncovered
        acting pairs (ties: fewer ranks, then the first in order), until every acting pair some
        accepted combination holds is covered."""
        axes = dict(AXES, optimizer=["adamw"])
        combos = [dict(zip(NAMES, v)) for v in itertools.product(*axes.values())]
        # (Document masks with materialized attention: refused by the engine, not worth asking.)
        combos = [c for c in combos if ranks(c) in (1, 2, 4, 8) and not (c["documents"] and c["attention"] == "materialized")]
        combos = list({tuple(d.values()): d for d in map(canonical, reversed(combos))}.values())[::-1]
        t0 = time.time()
        combos = self.accepted(combos)
        # The other optimizers on a seeded sample of those (asking the engine about every one doubles
        # a minute's question, ten under a sanitizer); the sample holds every value of every axis.
        sample = random.Random(58).sample(combos, min(len(combos), MUON_SAMPLE))
        combos += self.accepted([dict(c, optimizer=o) for o in AXES["optimizer"][1:] for c in sample])
        print(f"matrix: the engine accepts {len(combos)} combinations ({time.time() - t0:.1f} s)", flush=True)
        # Each combination's acting pairs as a bit mask (one bit a pair): the greedy search is fast.
        index = {}
        masks = []
        for c in combos:
            m = 0
            for pr in pairs(c):
                m |= 1 << index.setdefault(pr, len(index))
            masks.append(m)
        uncovered = (1 << len(index)) - 1
        total = len(index)
        cases = []
        while uncovered:
            best = max(range(len(combos)), key=lambda j: ((masks[j] & uncovered).bit_count(), -ranks(combos[j])))
            cases.append(combos[best])
            uncovered &= ~masks[best]
        return cases, total

    # ---- runs -----------------------------------------------------------------------------------
    def run(self, name, cmd, n, threads):
        """cmd on n ranks in its own process group, killed whole after RUN_LIMIT_S: (rc, out, err)."""
        full = [self.args.mpiexec, "-n", str(n)] + cmd if n > 1 else cmd
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", KOKKOS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                   OMP_PROC_BIND="false", OMP_WAIT_POLICY="passive")
        if threads > 1:
            env["GPT2_TEAM_SIZE"] = str(threads)  # a GPU's teams have many threads
        p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True, cwd=self.w)
        try:
            out, err = p.communicate(timeout=RUN_LIMIT_S)
            return p.returncode, out, err
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return 124, out, err + f"\n{name}: TIMED OUT after {RUN_LIMIT_S} s (a hang): killed"

    def deck(self, c, ckpt_dir, trace=""):
        d = {
            "model": {"n_layer": N_LAYER, "n_head": 4, "n_embd": 32, "vocab_size": 64, "block_size": 16,
                      "attention": c["attention"]},
            "data": {"train": self.train_bin, "val": self.val, "seq_len": 16, "document_mask": c["documents"],
                     "eot_token": EOT},
            "train": {"batch_size": BATCH, "steps": max(self.total_steps, 2), "lr": 1e-3, "eval_every": 2,
                      "eval_batches": 2, "precision": c["precision"], "seed": 3, "recompute": c["recompute"],
                      "loss_chunk_rows": 5,  # (the head's logits in blocks, a short last one)
                      "optimizer": c["optimizer"]},
            "parallel": self.parallel(c) | {"comm": c["comm"]},
        }
        if ckpt_dir:
            d["checkpoint"] = {"dir": ckpt_dir, "every": 2, "keep": 0, "resume": "auto"}
        if trace:
            d["trace"] = {"file": trace}
        return d

    def train(self, name, c, ckpt_dir, stop_at):
        """Trains case c up to step stop_at, resuming what ckpt_dir holds: {"loss": {step: x},
        "grad_norm": ..., "val_loss": ...}, or None when the run failed."""
        deck = os.path.join(self.w, name + ".toml")
        trace = os.path.join(self.w, name + ".h5")
        gpt2test.write_deck(deck, self.deck(c, ckpt_dir, trace))
        metrics = os.path.join(self.w, name + ".jsonl")
        for f in (metrics, trace):
            if os.path.exists(f):
                os.remove(f)
        cmd = [self.args.gpt2, "train", deck, "--metrics-jsonl", metrics, "-q", "--stop-at", str(stop_at)]
        t0 = time.time()
        rc, out, err = self.run(name, cmd, ranks(c), team_threads(c))
        seconds = time.time() - t0
        if not self.checks.check(rc == 0, f"{name} ({describe(c)}, {ranks(c)} ranks): exit {rc}\n{err[-3000:]}"):
            return None
        self.check_device(name, c, trace)
        rows = gpt2test.read_jsonl(metrics)
        got = {k: {m["step"]: m[k] for m in rows if k in m} for k in ("loss", "grad_norm", "val_loss")}
        print(f"  {name}: {describe(c)} on {ranks(c)} ranks, {seconds:.1f} s", flush=True)
        return got

    def check_device(self, name, c, trace):
        """What a GPU would do, from the trace: on every rank, in every step (the first included), at
        most one whole-device wait, no other host wait (a stream's fence, a copy between device and
        pageable host memory, a host wait for communication) and no allocation or free -- refused
        where the Kokkos reports no fences (every wait would read 0)."""
        import h5py
        with h5py.File(trace, "r") as f:
            meta = f["meta"].attrs
            fences = list(meta["fences_reported"])
            per_step = {k: list(meta[f"{k}_per_step"]) for k in
                        ("device_waits", "allocations", "stream_waits", "host_copies", "host_waits", "bytes_moved")}
        what = f"{name} ({describe(c)})"
        if not self.checks.check(all(fences), f"{what}: this Kokkos reports no fences: the device checks cannot "
                                               "run (build it with job_scripts/build_kokkos.sh)"):
            return
        for r, w in enumerate(per_step["device_waits"]):
            self.checks.check(0 <= w <= 1, f"{what}: rank {r} made {w:g} whole-device waits in a step")
        for r, n in enumerate(per_step["bytes_moved"]):  # (the kernels' own accounting reached /meta)
            self.checks.check(n > 0, f"{what}: rank {r} counted no bytes moved in a step")
        for kind in ("allocations", "stream_waits", "host_copies", "host_waits"):
            for r, n in enumerate(per_step[kind]):
                self.checks.check(n == 0, f"{what}: rank {r} made {n:g} {kind.replace('_', ' ')} in a step "
                                          "(the first included)")

    def compare(self, what, got, ref, precision, steps, val_steps):
        """Every row of got against the one-rank run: exactly `steps` (and `val_steps`), each value
        within its tolerance."""
        want_rows = {"loss": steps, "grad_norm": steps, "val_loss": val_steps}
        for kind, rows in want_rows.items():
            have = sorted(got[kind])
            self.checks.check(have == rows, f"{what}: {kind} rows for steps {have}, expected {rows}")
            tol = NORM_TOLERANCE[precision] if kind == "grad_norm" else TOLERANCE[precision]
            for step in rows:
                value, want = got[kind].get(step), ref[kind].get(str(step), ref[kind].get(step))
                if value is None or want is None:
                    continue
                self.checks.check(abs(value - want) <= tol * abs(want),
                                  f"{what}: step {step} {kind} {value!r}, one rank {want!r} (tolerance {tol:g})")


def ref_key(c):
    """The one-rank reference a case is held to: its precision, with or without document masks (the
    masked reference's attention fused: materialized attention cannot mask), and its optimizer."""
    return c["precision"] + ("_documents" if c["documents"] else "") + ("" if c["optimizer"] == "adamw" else
                                                                         "_" + c["optimizer"])


def references(mx, folder):
    """The one-rank runs of every precision and optimizer, without and with document masks, over mx.total_steps
    (their numbers, and a checkpoint every 2 steps in folder/KEY), written to folder/refs.json."""
    gpt2test.fresh_dir(folder)
    refs = {"steps": mx.total_steps}
    for prec, documents, optimizer in itertools.product(TOLERANCE, (False, True), AXES["optimizer"]):
        c = dict(ONE_RANK, precision=prec, documents=documents, attention="fused" if documents else "materialized",
                 optimizer=optimizer)
        key = ref_key(c)
        got = mx.train(f"ref_{key}", c, os.path.join(folder, key), mx.total_steps)
        if got is None:
            mx.checks.finish("layout_matrix")
        refs[key] = {k: {str(s): v for s, v in rows.items()} for k, rows in got.items()}
    return refs


def prepared(mx, folder):
    """(cases, pairs covered, references): from folder/refs.json when a run with --write-refs left
    them there (ctest's fixture: the two halves share them), else made now."""
    path = os.path.join(folder, "refs.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        mx.total_steps = saved["refs"]["steps"]
        return saved["cases"], saved["pairs"], saved["refs"]
    cases, total = mx.cases()
    mx.total_steps = STEPS_PER_CASE * max(len(ch) for ch in chains(cases).values())
    refs = references(mx, folder)
    with open(path, "w") as f:
        json.dump({"cases": cases, "pairs": total, "refs": refs}, f)
    return cases, total, refs


def chains(cases):
    """The cases of each (reference, backend), in order: each resumes the one before it."""
    out = {}
    for i, c in enumerate(cases):
        out.setdefault((ref_key(c), c["comm"]), []).append(i)
    return out


def run_chain(mx, cases, chain, refs, only):
    """Each case resumes its predecessor's checkpoint (the reference's after a failure, or for the
    first) and trains STEPS_PER_CASE steps on its own layout, compared with the one-rank numbers."""
    previous = None  # (name, folder) of the case whose checkpoint the next one resumes
    for k, i in enumerate(chain):
        c = cases[i]
        start, stop = STEPS_PER_CASE * k, STEPS_PER_CASE * (k + 1)
        if only and i not in only:
            previous = None
            continue
        name = f"case{i:02d}"
        ck = gpt2test.fresh_dir(os.path.join(mx.w, name + "_ck"))
        origin = ""
        if start > 0:
            src_name, src = previous or ("the one-rank run", os.path.join(mx.args.refs, ref_key(c)))
            shutil.copy(os.path.join(src, f"ckpt_{start:08d}.h5"), ck)
            origin = f", resumed at step {start} from {src_name}"
        got = mx.train(name, c, ck, stop)
        previous = (name, ck) if got is not None else None
        if got is not None:
            mx.compare(f"{name} ({describe(c)}{origin})", got, refs[ref_key(c)], c["precision"],
                       list(range(start + 1, stop + 1)), [stop])


def main():
    ap = gpt2test.e2e_arg_parser(__doc__)
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--only", default="", help="comma-separated case numbers to run")
    ap.add_argument("--comm", default="", help="run only the cases of this backend (mpi, mpi-ordered)")
    ap.add_argument("--refs", required=True, help="the cases' and one-rank references' folder (made when missing)")
    ap.add_argument("--write-refs", action="store_true", help="only make the cases and references in --refs")
    args = ap.parse_args()
    args.gpt2 = os.path.abspath(args.gpt2)
    args.refs = os.path.abspath(args.refs)
    mx = Matrix(args)
    if args.write_refs:
        shutil.rmtree(args.refs, ignore_errors=True)
    cases, total, refs = prepared(mx, args.refs)
    if args.write_refs:
        mx.checks.finish("layout_matrix references")
        return
    by_chain = chains(cases)
    by_world = {n: sum(ranks(c) == n for c in cases) for n in (1, 2, 4, 8)}
    print(f"matrix: {len(cases)} cases cover {total} pairs of acting values "
          f"({', '.join(f'{v} on {k} rank(s)' for k, v in by_world.items())}), in {len(by_chain)} chains",
          flush=True)
    if args.list:
        for i, c in enumerate(cases):
            print(f"  case {i}: {describe(c)} ({ranks(c)} ranks)")
        return
    only = {int(x) for x in args.only.split(",") if x}
    t_all = time.time()
    for (key, comm), chain in sorted(by_chain.items()):
        if args.comm and comm != args.comm:
            continue
        run_chain(mx, cases, chain, refs, only)
    print(f"matrix: {time.time() - t_all:.0f} s in all", flush=True)
    mx.checks.finish("layout_matrix")


if __name__ == "__main__":
    main()
