"""Shared helpers for the analysis scripts: load a gpt2-kokkos HDF5 trace and derive the numbers that
several scripts need (step times, tokens/s, MFU, communication share, pipeline bubble).

Trace layout (src/trace/hdf5_trace.hpp), one file per run. The file describes itself; nothing about
it is copied here:
  /meta     attributes: config (TOML text), world_size, dp, pp, cp, tp, microbatches, schedule, device,
            execution_space, tokens_per_step, num_params, n_layer, n_embd, seq_len, stage_layers, ...;
            the event kinds: event_kinds (comma-separated names in code order), compute_kinds,
            communication_kinds, dp_collective_kinds (comma-separated names), kind_display and
            kind_colours (one entry per event_kinds entry: how a timeline draws the kind, "row",
            "lane", "step", "unit" or "detail", and its "#RRGGBB" colour); per rank (arrays of length
            world_size): dp_rank, pp_rank, cp_rank, tp_rank, param_bytes, ...
  /events   compound {rank, kind, step, microbatch, stage, start, end, bytes, chunk, unit}; attribute
            kind_names maps kind codes to names; times in seconds on a common clock; bytes moved by
            communication events; chunk is the rank's pipeline chunk (0 without chunks)
  /metrics  compound {step, loss, lr, grad_norm, step_time, tokens_per_s, val_loss, skipped}, one row
            per optimizer step (rank 0's view); val_loss < 0 where no evaluation ran; skipped 1 where
            the update was skipped (non-finite loss or gradient norm)

Conventions used here:
  * Step indices in /events are 0-based; in /metrics they are 1-based (metrics step k = event step k-1).
  * A `step` event wraps one whole optimizer step on one rank. Events are attributed to a step by time
    containment in that rank's step window where the step index alone is ambiguous: the evaluation
    that runs after k completed steps carries step index k, the 0-based index of the next step.
  * A rank's place in the grid is read from /meta dp_rank, pp_rank, cp_rank, tp_rank; a pipeline is
    the ranks that share (dp_rank, cp_rank, tp_rank).
  * The file stores each rank's events in completion order (an enclosing event such as `step` is
    written after the events inside it); Trace.events is re-sorted by (rank, start).
"""
import glob
import os

import h5py
import numpy as np

class TraceFormatError(Exception):
    """The file lacks something every gpt2-kokkos trace of this version has."""


def decode(value):
    """HDF5 attribute -> plain Python (bytes -> str, numpy scalars -> int/float, arrays -> lists)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return decode(value[()])
        return [decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


class Trace:
    """One run: .meta (dict), .events (structured array sorted by rank, start), .metrics, helpers."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        with h5py.File(path, "r") as f:
            self.meta = {k: decode(v) for k, v in f["meta"].attrs.items()} if "meta" in f else {}
            events = f["events"][...] if "events" in f else np.zeros(0, dtype=_EVENT_DTYPE)
            attrs = f["events"].attrs if "events" in f else {}
            names = decode(attrs["kind_names"]) if "kind_names" in attrs else None
            self.dropped = int(decode(attrs["dropped"])) if "dropped" in attrs else 0
            self.metrics = f["metrics"][...] if "metrics" in f else np.zeros(0, dtype=_METRIC_DTYPE)
        self._read_kinds(names)
        missing = [k for k in ("dp_rank", "pp_rank", "tp_rank") if k not in self.meta]
        if missing:
            raise TraceFormatError(f"no /meta attribute {', '.join(missing)} (written by an older gpt2-kokkos?)")
        dp_rank, pp_rank, tp_rank = (as_list(self.meta[k]) for k in ("dp_rank", "pp_rank", "tp_rank"))
        cp_rank = as_list(self.meta.get("cp_rank", [0] * len(dp_rank)))
        # (dp_rank, pp_rank, tp_rank, cp_rank) of each rank.
        self.coords = {r: (int(d), int(p), int(t), int(c))
                       for r, (d, p, t, c) in enumerate(zip(dp_rank, pp_rank, tp_rank, cp_rank))}
        # Enclosing events first when two start together: sort by rank, start, then longest first.
        order = np.lexsort((-events["end"], events["start"], events["rank"]))
        self.events = events[order]
        self.metrics = self.metrics[np.argsort(self.metrics["step"], kind="stable")]
        self._windows = None
        self._has_chunks = None

    def _read_kinds(self, names):
        """The event kinds as the file describes them: names (by code), classes, display, colours."""
        need = ("event_kinds", "compute_kinds", "communication_kinds", "dp_collective_kinds", "kind_display",
                "kind_colours")
        missing = [k for k in need if k not in self.meta]
        lacks = ([f"/meta attribute{'s' if len(missing) > 1 else ''} {', '.join(missing)}"] if missing else []) \
            + (["/events attribute kind_names"] if names is None else [])
        if lacks:
            raise TraceFormatError(f"no {' and '.join(lacks)} (a trace written by an older gpt2-kokkos, "
                                   "before traces described their event kinds?)")
        split = lambda key: [k for k in str(self.meta[key]).split(",") if k]  # noqa: E731
        self.kind_names = ",".join(names).split(",") if isinstance(names, list) else str(names).split(",")
        kinds, display, colours = split("event_kinds"), split("kind_display"), split("kind_colours")
        if kinds != self.kind_names:
            raise TraceFormatError("/meta event_kinds and /events kind_names differ")
        if len(display) != len(kinds) or len(colours) != len(kinds):
            raise TraceFormatError(f"/meta kind_display ({len(display)} entries) and kind_colours "
                                   f"({len(colours)}) do not match event_kinds ({len(kinds)})")
        self._display = dict(zip(kinds, display))
        self._colour = dict(zip(kinds, colours))
        self.compute_kinds = tuple(split("compute_kinds"))
        self.communication_kinds = tuple(split("communication_kinds"))
        self.dp_collective_kinds = tuple(split("dp_collective_kinds"))

    # --- event kinds (all from the file) ----------------------------------------------------
    @property
    def comm_kinds(self):
        """The trace's communication_kinds (older name)."""
        return self.communication_kinds

    def kind_display(self, kind):
        """How a timeline draws the kind: "row" (in the rank's row), "lane" (a thin lane under the
        row: work issued inside a compute), "step" (a whole optimizer step), "unit" (a model unit
        inside a pass, trace.units), "detail" (left off the Gantt chart); "" for an unknown kind."""
        return self._display.get(kind, "")

    def kind_colour(self, kind):
        """The kind's colour, "#RRGGBB", the same in every plot (black for an unknown kind)."""
        return self._colour.get(kind, "#000000")

    def kinds_with_display(self, display):
        """The kinds drawn as `display` says (see kind_display), in code order."""
        return tuple(k for k in self.kind_names if self._display.get(k) == display)

    def kind_class(self, kind):
        """"compute", "communication" or "other"."""
        if kind in self.compute_kinds:
            return "compute"
        return "communication" if kind in self.communication_kinds else "other"

    @property
    def has_chunks(self):
        """Whether any event ran on a pipeline chunk other than 0 (interleaved, zb-v, ...)."""
        if self._has_chunks is None:
            self._has_chunks = "chunk" in (self.events.dtype.names or ()) and bool(np.any(self.events["chunk"] > 0))
        return self._has_chunks

    def pass_label(self, kind, microbatch, chunk=0):
        """Short name of a compute event, e.g. 'F3' for microbatch 3's forward: the initial of the
        kind name's last word (F for forward, B for backward, W for the weight pass) and the
        microbatch, then '.c' on the rank's pipeline chunk c > 0 ('F3.1': chunk 1; 'F3': chunk 0).
        "" for other kinds and events of no microbatch."""
        if kind not in self.compute_kinds or microbatch < 0:
            return ""
        text = f"{kind.rsplit('_', 1)[-1][:1].upper()}{microbatch}"
        return f"{text}.{chunk}" if chunk > 0 else text

    # --- meta -------------------------------------------------------------------------------
    def _int(self, key, default):
        value = self.meta.get(key, default)
        return int(value[0] if isinstance(value, list) else value)

    @property
    def dp(self):
        return self._int("dp", 1)

    @property
    def pp(self):
        return self._int("pp", 1)

    @property
    def cp(self):
        return self._int("cp", 1)

    @property
    def tp(self):
        return self._int("tp", 1)

    @property
    def zero(self):
        return self._int("zero", 0)

    @property
    def microbatches(self):
        return self._int("microbatches", 1)

    @property
    def virtual_stages(self):
        """Chunks of blocks a pipeline rank holds (1 without interleaving or a V)."""
        return max(1, self._int("virtual_stages", 1))

    @property
    def world_size(self):
        return self._int("world_size", self.dp * self.pp)

    @property
    def schedule(self):
        return str(self.meta.get("schedule", "?"))

    @property
    def tokens_per_step(self):
        return self._int("tokens_per_step", 0)

    @property
    def label(self):
        """Short run description from /meta, e.g. 'pp2 (dp1 x pp2, m4, 1f1b)'."""
        grid = (f"dp{self.dp} x pp{self.pp}" + (f" x cp{self.cp}" if self.cp > 1 else "")
                + (f" x tp{self.tp}" if self.tp > 1 else ""))
        if self.zero:
            grid += f", zero {self.zero}"
        parts = [grid, f"m{self.microbatches}"]
        if self.pp > 1:
            parts.append(self.schedule)
        return f"{self.name} ({', '.join(parts)})"

    def rank_name(self, rank):
        d, p, t, c = self.coords.get(rank, (-1, -1, -1, -1))
        return (f"rank {rank} (dp {d}, stage {p}" + (f", cp {c}" if self.cp > 1 else "")
                + (f", tp {t})" if self.tp > 1 else ")"))

    def pipelines(self):
        """The ranks of each pipeline (sharing dp_rank, cp_rank and tp_rank), each list by stage."""
        groups = {}
        for r, (d, p, t, c) in sorted(self.coords.items(), key=lambda x: (x[1][0], x[1][3], x[1][2], x[1][1])):
            groups.setdefault((d, c, t), []).append(r)
        return list(groups.values())

    # --- events -----------------------------------------------------------------------------
    def code(self, kind):
        """Kind code for a name (-1 when the trace does not know the kind)."""
        return self.kind_names.index(kind) if kind in self.kind_names else -1

    def kind_name(self, code):
        return self.kind_names[code] if 0 <= code < len(self.kind_names) else f"kind{code}"

    def mask(self, kinds=None, rank=None, step=None):
        """Boolean mask over self.events selecting kinds (names), a rank and a step index."""
        m = np.ones(len(self.events), dtype=bool)
        if kinds is not None:
            m &= np.isin(self.events["kind"], [self.code(k) for k in kinds])
        if rank is not None:
            m &= self.events["rank"] == rank
        if step is not None:
            m &= self.events["step"] == step
        return m

    def step_windows(self):
        """{rank: structured array (step, start, end) of that rank's `step` events, by start}."""
        if self._windows is None:
            self._windows = {}
            steps = self.events[self.mask(["step"])]
            for r in self.ranks():
                w = steps[steps["rank"] == r]
                self._windows[r] = w[np.argsort(w["start"], kind="stable")]
        return self._windows

    def containing_step(self):
        """Per event: the index of the rank's `step` event whose window contains it, else -1."""
        out = np.full(len(self.events), -1, dtype=np.int64)
        for r, w in self.step_windows().items():
            if len(w) == 0:
                continue
            idx = np.flatnonzero(self.events["rank"] == r)
            ev = self.events[idx]
            j = np.searchsorted(w["start"], ev["start"], side="right") - 1
            ok = (j >= 0) & (ev["end"] <= w["end"][np.maximum(j, 0)] + 1e-9)
            out[idx[ok]] = w["step"][j[ok]]
        return out

    def ranks(self):
        present = set(np.unique(self.events["rank"]).tolist())
        return sorted(present | set(range(self.world_size)))

    def train_steps(self, skip=1):
        """Sorted 0-based indices of the traced optimizer steps, leaving out the first `skip`."""
        steps = np.unique(self.events["step"][self.mask(["step"])]).tolist()
        return steps[skip:] if len(steps) > skip else steps

    # --- metrics ----------------------------------------------------------------------------
    def metric_rows(self, skip=1):
        """/metrics rows without the first `skip` steps (all rows if that would leave none)."""
        rows = self.metrics
        if len(rows) > skip:
            rows = rows[skip:]
        return rows

    def mean_step_time(self, skip=1):
        """Mean optimizer-step time in seconds (rank 0's /metrics step_time, warm-up left out).
        Falls back to the slowest rank's `step` events when /metrics is empty."""
        rows = self.metric_rows(skip)
        if len(rows):
            return float(np.mean(rows["step_time"]))
        times = []
        for s in self.train_steps(skip):
            ev = self.events[self.mask(["step"], step=s)]
            times.append(float(np.max(ev["end"]) - np.min(ev["start"])))
        return float(np.mean(times)) if times else float("nan")

    def tokens_per_s(self, skip=1):
        """Tokens per second over the measured steps: tokens_per_step / mean step time."""
        t = self.mean_step_time(skip)
        return self.tokens_per_step / t if t > 0 else float("nan")


_EVENT_DTYPE = np.dtype([("rank", "<i4"), ("kind", "<i4"), ("step", "<i4"), ("microbatch", "<i4"),
                         ("stage", "<i4"), ("start", "<f8"), ("end", "<f8"), ("bytes", "<i8"),
                         ("chunk", "<i4"), ("unit", "<i4"), ("pair", "<i4")])
_METRIC_DTYPE = np.dtype([("step", "<i4"), ("loss", "<f8"), ("lr", "<f8"), ("grad_norm", "<f8"),
                          ("step_time", "<f8"), ("tokens_per_s", "<f8"), ("val_loss", "<f8"),
                          ("skipped", "i1")])


def as_list(value):
    return value if isinstance(value, list) else [value]


def load(paths):
    """Load several traces; exits with a clear message when one cannot be read."""
    traces = []
    for p in paths:
        try:
            traces.append(Trace(p))
        except (OSError, KeyError, TraceFormatError) as e:
            raise SystemExit(f"{p}: cannot read as a gpt2-kokkos HDF5 trace ({e})")
    return traces


# --- derived numbers --------------------------------------------------------------------------
def flops_per_token(meta):
    """Training FLOPs per token: 6*N (forward + backward matmuls over all N parameters, the tied LM
    head included) + 12*L*C*T (attention scores and weighted sum), as in the PaLM/nanoGPT estimate."""
    n = int(meta.get("num_params", 0))
    layers, channels, t = (int(meta.get(k, 0)) for k in ("n_layer", "n_embd", "seq_len"))
    return 6.0 * n + 12.0 * layers * channels * t


def mfu(trace, peak_tflops, skip=1):
    """Model FLOPs utilisation: achieved model FLOP/s over world_size * peak_tflops."""
    achieved = trace.tokens_per_s(skip) * flops_per_token(trace.meta)
    return achieved / (trace.world_size * peak_tflops * 1e12)


def comm_fraction(trace, skip=1):
    """Share of step time spent in communication (the trace's communication_kinds), per rank averaged.

    For each rank: sum of the durations of those events that lie inside the rank's `step` windows
    (first `skip` steps left out) divided by the sum of those windows. Returns (mean, {rank: share}).
    """
    steps = set(trace.train_steps(skip))
    owner = trace.containing_step()
    comm = trace.mask(trace.comm_kinds) & np.isin(owner, list(steps))
    per_rank = {}
    for r, w in trace.step_windows().items():
        w = w[np.isin(w["step"], list(steps))]
        total = float(np.sum(w["end"] - w["start"]))
        if total <= 0:
            continue
        ev = trace.events[comm & (trace.events["rank"] == r)]
        per_rank[r] = float(np.sum(ev["end"] - ev["start"])) / total
    mean = float(np.mean(list(per_rank.values()))) if per_rank else float("nan")
    return mean, per_rank


def comm_by_kind(trace, skip=1):
    """Per communication kind of the trace: (share of step time, bytes moved per step), each averaged
    over the ranks as comm_fraction does. The shares add up to comm_fraction's mean."""
    steps = set(trace.train_steps(skip))
    owner = trace.containing_step()
    in_steps = np.isin(owner, list(steps))
    windows = {}
    for r, w in trace.step_windows().items():
        w = w[np.isin(w["step"], list(steps))]
        total = float(np.sum(w["end"] - w["start"]))
        if total > 0:
            windows[r] = (total, len(w))
    out = {}
    for kind in trace.comm_kinds:
        shares, moved = [], []
        for r, (total, nsteps) in windows.items():
            ev = trace.events[trace.mask([kind], rank=r) & in_steps]
            shares.append(float(np.sum(ev["end"] - ev["start"])) / total)
            moved.append(float(np.sum(ev["bytes"])) / nsteps)
        out[kind] = (float(np.mean(shares)) if shares else float("nan"),
                     float(np.mean(moved)) if moved else float("nan"))
    return out


def dp_volume(trace, skip=1):
    """Per rank: data-parallel communication volume per step in units of its stage's parameter bytes
    (Psi): 2 for data parallelism and ZeRO-1, 1 + m for ZeRO-2, about 3m for ZeRO-3 (m microbatches).
    The collectives are the trace's dp_collective_kinds, whose bytes are their data volume as the
    ZeRO paper counts it (all-reduce twice the buffer, reduce-scatter and all-gather once).
    Returns {rank: volume}; nan where the trace lacks stage_param_bytes."""
    steps = set(trace.train_steps(skip))
    owner = trace.containing_step()
    psi = as_list(trace.meta.get("stage_param_bytes", []))
    out = {}
    for r in trace.ranks():
        ev = trace.events[trace.mask(trace.dp_collective_kinds, rank=r)
                          & np.isin(owner, list(steps))]
        nsteps = max(1, len(steps))
        out[r] = float(np.sum(ev["bytes"])) / nsteps / psi[r] if r < len(psi) and psi[r] else float("nan")
    return out


def theoretical_dp_volume(zero, microbatches, dp, gather=1.0):
    """The textbook data-parallel volume per step in units of Psi (see dp_volume); 0 without dp.
    gather: one parameter all-gather's bytes in units of Psi (below 1 where ZeRO gathers the weight
    matrices as 16-bit values; see gather_fraction)."""
    if dp <= 1:
        return 0.0
    m, g = microbatches, gather
    return {0: 2.0, 1: 1.0 + g, 2: m + g, 3: m + 2.0 * m * g}.get(int(zero), float("nan"))


def gather_fraction(trace):
    """One ZeRO parameter all-gather's bytes in units of the stage's parameter bytes, as the trace
    records them (param_gather_bytes); 1.0 for traces without the attribute or without sharding."""
    g = [float(x) for x in as_list(trace.meta.get("param_gather_bytes", []))]
    psi = [float(x) for x in as_list(trace.meta.get("stage_param_bytes", []))]
    return sum(g) / sum(psi) if g and psi and sum(g) > 0 and sum(psi) > 0 else 1.0


def memory_per_rank(trace):
    """{rank: {"params", "grads", "optimizer", "activations", "workspace"}} in bytes from /meta."""
    keys = {"params": "param_bytes", "grads": "grad_bytes", "optimizer": "optimizer_bytes",
            "activations": "peak_activation_bytes", "workspace": "peak_workspace_bytes"}
    cols = {k: as_list(trace.meta.get(v, [])) for k, v in keys.items()}
    return {r: {k: float(c[r]) if r < len(c) else float("nan") for k, c in cols.items()}
            for r in range(trace.world_size)}


def theoretical_bubble(trace):
    """Idle share of the run's schedule with ideal stages: /meta bubble_theory, which the trainer
    takes from its schedule simulator (forward 1, backward 2, or B and W 1 each), e.g.
    (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/p for naive model parallelism, 1F1B's divided by v for
    interleaved; 0 without a pipeline."""
    if trace.pp <= 1:
        return 0.0
    if "bubble_theory" in trace.meta:
        return float(trace.meta["bubble_theory"])
    p, m = trace.pp, trace.microbatches  # traces that predate bubble_theory
    return (p - 1) / p if trace.schedule == "naive" else (p - 1) / (m + p - 1)


def measured_bubble(trace, step):
    """Measured bubble fraction of one step, averaged over the pipelines.

    For each pipeline (the ranks sharing dp_rank and tp_rank) the compute window is [t0, t1] with
    t0 = the first forward start and t1 = the last compute end (a backward, or a weight pass) of the
    step on any of its stages;
      bubble = 1 - sum over stages s of (compute time of s in the step) / (pp * (t1 - t0)),
    compute being the trace's compute_kinds. Everything else inside the window (send/recv waits,
    data loading, idle gaps) counts as bubble.
    Returns (mean over pipelines, [bubble, ...]); nan when no pipeline ran both a forward and a
    backward in it.
    """
    fwd, bwd = trace.code("forward"), trace.code("backward")
    ev = trace.events[trace.mask(trace.compute_kinds, step=step)]
    values = []
    for ranks in trace.pipelines():
        mine = ev[np.isin(ev["rank"], ranks)]
        f, b = mine[mine["kind"] == fwd], mine[mine["kind"] == bwd]
        if len(f) == 0 or len(b) == 0:
            continue
        t0, t1 = float(f["start"].min()), float(mine["end"].max())
        if t1 <= t0:
            continue
        busy = float(np.sum(mine["end"] - mine["start"]))
        values.append(1.0 - busy / (trace.pp * (t1 - t0)))
    return (float(np.mean(values)) if values else float("nan")), values


def mean_bubble(trace, skip=1):
    """measured_bubble averaged over the traced steps (first `skip` left out)."""
    values = [measured_bubble(trace, s)[0] for s in trace.train_steps(skip)]
    values = [v for v in values if np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def shard_tokens(pattern):
    """Token counts of the llm.c-format shards matching a path or glob (header int32 [2])."""
    counts = []
    for path in sorted(glob.glob(pattern)) or [pattern]:
        header = np.fromfile(path, dtype="<i4", count=256)
        if len(header) < 3 or header[0] != 20240520:
            raise SystemExit(f"{path}: not a token shard (expected magic 20240520 in a 1024-byte header)")
        counts.append(int(header[2]))
    return counts


def batches_per_epoch(trace, shard_counts):
    """Optimizer steps per epoch as the loader counts them (src/data/loader.hpp): sequences of T+1
    tokens at stride T inside each shard, (count - 1) // T per shard, grouped into global batches."""
    t = int(trace.meta.get("seq_len", 0))
    if t <= 0 or trace.tokens_per_step <= 0:
        return 0
    sequences = sum((c - 1) // t for c in shard_counts if c > t)
    return sequences // (trace.tokens_per_step // t)


def pyplot():
    """matplotlib.pyplot with a file-only backend unless MPLBACKEND chooses another."""
    import matplotlib
    if "MPLBACKEND" not in os.environ:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, out_dir, filename):
    """Save a figure as PNG under out_dir (created) and print where it went."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, filename)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"wrote {path}")
    return path
