#!/usr/bin/python3
"""What an HDF5 checkpoint (checkpoint.format = "h5") holds: how far the run got, the optimizer, the layout of the
run that wrote it, every tensor at its global shape, and per tensor the RMS of the weights and of
AdamW's update scale sqrt(v) -- which layers moved and how far.

  checkpoint_report.py runs/x/ckpt_00000100.h5            a table
  checkpoint_report.py CKPT --json                         the same as one JSON object
  checkpoint_report.py CKPT --png rms.png                  the weights' RMS per block, per tensor kind

A folder is read through its `latest`. Exit 2 with one message when the file is not such a checkpoint.
"""
import argparse
import json
import os
import sys
import tomllib

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def resolve(path):
    if os.path.isdir(path):
        with open(os.path.join(path, "latest")) as f:
            return os.path.join(path, f.read().strip())
    return path


def report(path):
    with h5py.File(path, "r") as f:
        if text(f.attrs.get("format", "")) != "gpt2-kokkos checkpoint":
            raise ValueError("an HDF5 file, but not a gpt2-kokkos checkpoint (no format attribute)")
        deck = tomllib.loads(text(f.attrs["config"])) if "config" in f.attrs else {}
        par = deck.get("parallel", {})
        out = {
            "path": path,
            "step": int(f.attrs["step"]),
            "updates": int(f.attrs["updates"]),
            "optimizer": text(f.attrs.get("optimizer", "")),
            "model": {k: int(f.attrs[k]) for k in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size")},
            "written_by": {k: int(par.get(k, 1 if k != "zero" else 0)) for k in ("dp", "pp", "tp", "zero")},
            "sections": sorted(f.keys()),
            "tensors": [],
        }
        for name, ds in f["params"].items():
            w = ds[()].astype(np.float64)
            row = {"name": name, "shape": list(ds.shape), "rms": float(np.sqrt(np.mean(w * w)))}
            if "opt.v" in f and name in f["opt.v"]:
                row["update_scale"] = float(np.sqrt(np.mean(f["opt.v"][name][()].astype(np.float64))))
            out["tensors"].append(row)
    return out


def plot(rep, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kinds = {}
    for t in rep["tensors"]:
        parts = t["name"].split(".")
        if parts[0] == "h" and len(parts) == 3:
            kinds.setdefault(parts[2], []).append((int(parts[1]), t["rms"]))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for kind, pts in sorted(kinds.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=kind)
    ax.set_xlabel("block")
    ax.set_ylabel("RMS of the weights")
    ax.set_title(f"{os.path.basename(rep['path'])}: step {rep['step']}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="an HDF5 checkpoint, or a checkpoint folder (its latest)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--png", help="write the weights' RMS per block to this PNG")
    args = ap.parse_args()
    try:
        rep = report(resolve(args.checkpoint))
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {args.checkpoint}: {e}", file=sys.stderr)
        return 2
    if args.png:
        plot(rep, args.png)
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    w = rep["written_by"]
    print(f"{rep['path']}: step {rep['step']} ({rep['updates']} updates), {rep['optimizer'] or 'weights only'}, "
          f"written by a run on dp {w['dp']} x pp {w['pp']} x tp {w['tp']}, ZeRO {w['zero']}")
    print(f"{'tensor':<16} {'shape':<14} {'rms':>10} {'sqrt(v)':>10}")
    for t in rep["tensors"]:
        scale = f"{t['update_scale']:10.3g}" if "update_scale" in t else f"{'-':>10}"
        print(f"{t['name']:<16} {str(tuple(t['shape'])):<14} {t['rms']:10.4g} {scale}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
