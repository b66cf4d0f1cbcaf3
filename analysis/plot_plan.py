#!/usr/bin/python3
"""The plan you can look at: every layout `gpt2 plan --json --all` predicted, as tokens/s against
the memory its fullest rank needs. Layouts that do not fit the device (more than the plan's usable
memory) are grey; the Pareto front -- the fastest layout for each memory budget -- is a line; the
chosen layout (the fastest that fits) is a star, and a second panel breaks its step into compute
(the busiest pipeline stage's passes), exposed communication (what the step loses to communication
the compute does not hide) and the rest (the pipeline bubble, the optimizer and the step's other
tails), with its layout written out.

Example:
    build/bin/gpt2 plan inputs/gpt2-1.5B.toml --hardware inputs/hardware/h100.toml --gpus 64 \\
        --json --all > plan.json
    analysis/plot_plan.py plan.json --out plan.png
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GIB = 1024.0 ** 3


def describe(x):
    s = f"dp {x['dp']} x tp {x['tp']}{' (sp)' if x.get('sequence_parallel') else ''} x pp {x['pp']}"
    if x.get("cp", 1) > 1:
        s += f" x cp {x['cp']}"
    s += f", ZeRO-{x['zero']}"
    if x["pp"] > 1:
        s += f", {x['schedule']}" + (f" v{x['virtual_stages']}" if x.get("virtual_stages", 1) > 1 else "")
    s += f", m {x['microbatches']}, {x['precision']}"
    if x.get("recompute", "none") != "none":
        s += f", recompute {x['recompute']}"
    return s


def pareto(points):
    """The layouts no other beats in both: more tokens/s with no more memory."""
    front, best = [], -1.0
    for x in sorted(points, key=lambda p: (p["peak_memory_bytes"], -p["tokens_per_s"])):
        if x["tokens_per_s"] > best:
            front.append(x)
            best = x["tokens_per_s"]
    return front


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("plan", help="the output of gpt2 plan ... --json --all ('-': standard input)")
    ap.add_argument("--out", default="plan.png", help="PNG to write (default plan.png)")
    args = ap.parse_args()
    try:
        d = json.load(sys.stdin if args.plan == "-" else open(args.plan))
    except (OSError, ValueError) as e:
        sys.exit(f"error: {args.plan}: not the JSON of gpt2 plan --json ({e})")
    layouts = d.get("layouts") or []
    if not layouts or "peak_memory_bytes" not in layouts[0]:
        sys.exit(f"error: {args.plan}: no layouts (run gpt2 plan with --json --all)")
    fits = [x for x in layouts if x.get("fits", True)]
    over = [x for x in layouts if not x.get("fits", True)]
    if len(layouts) < d.get("fitting", 0):
        print(f"note: {args.plan} lists {len(layouts)} of {d['fitting']} fitting layouts (without --all: the top only)")

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [2.2, 1]})
    if over:
        ax.scatter([x["peak_memory_bytes"] / GIB for x in over], [x["tokens_per_s"] for x in over], s=8, c="0.8",
                   label=f"does not fit ({len(over)})", zorder=1)
    colors = {0: "tab:blue", 1: "tab:orange", 2: "tab:green", 3: "tab:red"}
    for zero in sorted({x["zero"] for x in fits}):
        pts = [x for x in fits if x["zero"] == zero]
        ax.scatter([x["peak_memory_bytes"] / GIB for x in pts], [x["tokens_per_s"] for x in pts], s=10,
                   c=colors.get(zero, "tab:purple"), alpha=0.6, label=f"fits, ZeRO-{zero} ({len(pts)})", zorder=2)
    front = pareto(fits)
    if front:
        ax.step([x["peak_memory_bytes"] / GIB for x in front], [x["tokens_per_s"] for x in front], where="post",
                c="k", lw=1.2, label="Pareto front (fastest for its memory)", zorder=3)
    if "usable_memory_bytes" in d:
        ax.axvline(d["usable_memory_bytes"] / GIB, c="tab:red", ls="--", lw=1, label="usable memory per rank")
    chosen = max(fits, key=lambda x: x["tokens_per_s"]) if fits else None
    if chosen:
        ax.scatter([chosen["peak_memory_bytes"] / GIB], [chosen["tokens_per_s"]], marker="*", s=260, c="gold",
                   edgecolors="k", zorder=4, label="chosen: " + describe(chosen))
    ax.set_xlabel("memory of the fullest rank (GiB)")
    ax.set_ylabel("predicted tokens/s")
    ax.set_title(f"{d.get('config', '')}: {d.get('gpus', '?')} devices, {len(layouts)} layouts "
                 f"({d.get('hardware', '')})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")

    if chosen:
        step = chosen["step_ms"]
        comm = chosen["exposed_comm_ms"] if chosen.get("exposed_comm_known", True) else 0.0
        compute = min(chosen["compute_ms"], step - comm)
        rest = max(0.0, step - compute - comm)
        parts = [("compute", compute, "tab:blue"), ("exposed communication", comm, "tab:orange"),
                 (f"bubble ({100 * chosen['bubble']:.1f}% idle) and the rest", rest, "tab:gray")]
        bottom = 0.0
        for name, ms, color in parts:
            bx.bar([0], [ms], bottom=bottom, color=color, width=0.5, label=f"{name}: {ms:.1f} ms")
            bottom += ms
        bx.set_xticks([0])
        bx.set_xticklabels(["chosen layout"])
        bx.set_ylabel("ms per step")
        bx.set_title(describe(chosen).replace(", m", ",\nm", 1) +
                     f"\n{chosen['tokens_per_s']:,.0f} tokens/s, MFU {100 * chosen['mfu']:.1f}%", fontsize=8)
        bx.legend(fontsize=8, loc="upper right")
        bx.set_xlim(-0.6, 0.6)
        bx.set_ylim(0, step * 1.35)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {len(fits)} fitting and {len(over)} other layouts, {len(front)} on the Pareto front; "
          f"chosen {describe(chosen) if chosen else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
