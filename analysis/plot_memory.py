#!/usr/bin/python3
"""Memory per rank, run by run: one group of stacked bars per trace (one bar per rank: parameters,
gradients, optimizer state, peak saved activations, workspace, as /meta records them), labelled
with the layout and the memory levers it used (context parallelism, activation recomputation, ZeRO,
tensor and sequence parallelism). For comparing the modes of one model, e.g. the traces of
tests/bench/bench_recompute.py (its work folder holds one per run).

Example:
    analysis/plot_memory.py /tmp/rcbench/none/trace.h5 /tmp/rcbench/selective/trace.h5 \\
        /tmp/rcbench/full/trace.h5 --out memory.png
"""
import argparse
import os
import sys

import h5py
import numpy as np

PARTS = (("param_bytes", "parameters"), ("grad_bytes", "gradients"), ("optimizer_bytes", "optimizer"),
         ("peak_activation_bytes", "activations"), ("peak_workspace_bytes", "workspace"))


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read(path):
    """(label, {part: per-rank bytes}) of one trace; exit 2 naming the file when it is not one."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        sys.exit(f"error: {path}: not an HDF5 file ({e})")
    with f:
        if "meta" not in f or "peak_activation_bytes" not in f["meta"].attrs:
            sys.exit(f"error: {path}: not a gpt2-kokkos trace (no /meta peak_activation_bytes)")
        a = f["meta"].attrs
        world = int(a["world_size"])
        parts = {k: np.broadcast_to(np.asarray(a[k], dtype=float), (world,)) if k in a else np.zeros(world)
                 for k, _ in PARTS}
        grid = " x ".join(f"{axis} {int(a[axis])}" for axis in ("dp", "pp", "cp", "tp") if axis in a and int(a[axis]) > 1)
        levers = []
        if "recompute" in a and text(a["recompute"]) != "none":
            every = int(a["recompute_every"]) if "recompute_every" in a else 1
            levers.append(f"recompute {text(a['recompute'])}" + (f"/{every}" if every > 1 else ""))
        if int(a["zero"]) > 0:
            levers.append(f"ZeRO-{int(a['zero'])}")
        shape = f"{int(a['n_layer'])}x{int(a['n_embd'])}, T {int(a['seq_len'])}"
        label = ", ".join([grid or "1 rank"] + levers) + f"\n({shape})"
        return label, parts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", help="HDF5 traces (trace.file) of the runs to compare")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--parts", default="all", choices=("all", "activations"),
                    help="stack every part (default) or show the peak activations alone")
    args = ap.parse_args()
    runs = [read(p) for p in args.traces]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    parts = PARTS if args.parts == "all" else PARTS[3:4]
    width = max(6.0, 1.2 * sum(len(r[1]["param_bytes"]) for r in runs) + 2)
    fig, ax = plt.subplots(figsize=(width, 4.5))
    x, ticks, labels = 0.0, [], []
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for label, data in runs:
        n = len(data["param_bytes"])
        xs = x + np.arange(n)
        bottom = np.zeros(n)
        for i, (key, name) in enumerate(parts):
            v = data[key] / 2**20
            ax.bar(xs, v, bottom=bottom, color=colours[i % len(colours)], label=name if x == 0 else None, width=0.8)
            bottom += v
        for xi, total in zip(xs, bottom):
            ax.text(xi, total, f"{total:.0f}", ha="center", va="bottom", fontsize=7)
        ticks.append(x + (n - 1) / 2)
        labels.append(label)
        x += n + 1
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("MiB per rank (bars: ranks)")
    ax.set_title("Memory per rank" + (" (peak saved activations)" if args.parts == "activations" else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
