#!/usr/bin/python3
"""The performance model against published large-scale training runs.

Every row of tests/bench/published/*.toml (one file per paper or report; the format is in that
folder's README.md) that the model can express -- a GPT block (4h MLP, one key/value head per
query head), 16-bit precision, a layout of dp, tp, pp, virtual stages, cp, ZeRO level, sequence
parallelism and recomputation -- is predicted with `gpt2 simulate --batch` (all rows in one
process) on the hardware file of its machine (inputs/hardware/a100.toml, h100.toml), and the
published metric is compared with the predicted one computed the way the source counts it:

  iteration_time_s      the predicted step
  tokens_per_s(_per_gpu) the batch's tokens over the predicted step
  tflops_per_gpu, mfu   the source's FLOP count of the batch ([metric] flops_formula: megatron_eq3 =
                        96 B s l h^2 (1 + s/6h + V/16lh), recomputed forward included; model_eq7 =
                        72 B s l h^2 (1 + s/6h + V/12lh); bloom_8n = 8 params tokens) over the
                        predicted step, the GPUs (and the peak, for MFU)

Nothing is fitted per row: a row gives the model its shape, batch and layout, the hardware file
gives the machine. Rows the model cannot express (Llama blocks, FP8, CPU offload, no published
shape or layout) are listed with the reason and left out of the statistics; rows that publish a
bound ("more than", "up to") are checked against it and also left out.

Prints the table, then the median and worst absolute error per source and overall; --markdown
writes the table for the README, --json every row. Exit status 0 when it ran (whatever the errors),
1 when gpt2 simulate --batch did not.
"""
import argparse
import datetime
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HARDWARE = {"A100": "inputs/hardware/a100.toml", "H100": "inputs/hardware/h100.toml"}
PEAK_BF16 = {"A100": 312e12, "H100": 989e12}  # dense BF16 of the parts the sources name
METRICS = ["iteration_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "tflops_per_gpu", "mfu"]


def gpu_kind(text):
    for kind in HARDWARE:
        if kind in (text or ""):
            return kind
    return None


def params_of(l, h, V, s):
    # Narayanan et al. eq. 2 (GPT, learned positions): 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
    return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


def batch_flops(formula, r):
    """FLOPs of one iteration as the source counts them."""
    B, s, l, h, V = r["global_batch"], r["seq_len"], r["layers"], r["hidden"], r["vocab"]
    if formula == "megatron_eq3":
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    if formula == "model_eq7":
        return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * h * l))
    if formula == "bloom_8n":
        return 8 * params_of(l, h, V, s) * B * s
    raise ValueError(f"unknown flops_formula {formula!r}")


def text_of(*parts):
    return " ".join(str(p) for p in parts if p is not None).lower()


class Row:
    def __init__(self, source, index, raw, common, hw_section, metric):
        self.source, self.index = source, index
        self.r = dict(common)
        self.r.update(raw)
        self.name = raw.get("name") or f"row {index + 1}"
        self.hw_section, self.metric = hw_section, metric
        self.reason = None  # why it is not predicted
        self.bound = raw.get("bound")
        self.kind = gpu_kind(raw.get("gpu")) or gpu_kind(hw_section.get("gpu"))
        self.pred = None
        self.published = self.predicted = self.error = None
        self.metric_name = None

    def id(self):
        return f"{self.source}#{self.index}"

    def check(self):
        r = self.r
        if r.get("not_modelled"):
            return r["not_modelled"]
        for key in ("layers", "hidden", "heads"):
            if not isinstance(r.get(key), int):
                return "shape not published"
        if r.get("ffn_hidden") not in (None, 4 * r["hidden"]) or r.get("kv_heads") not in (None, r["heads"]):
            return "Llama block (gated MLP or grouped-query attention): not in the model"
        marks = text_of(r.get("technique"), r.get("name"), r.get("precision")).replace("float8", "fp8")
        if "fp8" in marks or str(self.hw_section.get("precision", "")).lower().startswith("fp8"):
            return "FP8: not in the model"
        if r.get("cpu_offload"):
            return "CPU offload: not in the model"
        if self.kind is None:
            return "hardware not A100 or H100"
        for key in ("tp", "pp", "global_batch", "gpus", "seq_len", "vocab"):
            if not isinstance(r.get(key), int):
                return f"{key} not published"
        tp, pp, cp = r["tp"], r["pp"], r.get("cp", 1)
        dp = r.get("dp") or r["gpus"] // (tp * pp * cp)
        if dp * tp * pp * cp != r["gpus"]:
            return "tp x pp x cp x dp differs from the GPUs"
        r["dp"], r["cp"] = dp, cp
        mbs = r.get("micro_batch") or (1 if pp > 1 else r["global_batch"] // dp)
        if r["global_batch"] % (dp * mbs):
            return "global batch does not split into microbatches"
        r["micro_batch"] = mbs
        for m in METRICS:
            if isinstance(r.get(m), (int, float)):
                self.metric_name, self.published = m, float(r[m])
                break
        if self.metric_name is None:
            return "no metric published"
        if self.metric_name in ("tflops_per_gpu", "mfu") and not self.metric.get("flops_formula"):
            return "FLOP count of the source unknown"
        return None

    def batch_line(self, gpt2_root):
        r = self.r
        v = r.get("virtual_stages", 1) or 1
        recompute = str(r.get("recompute", "none")).split()[0].split("+")[0]
        if recompute not in ("none", "selective", "full"):
            recompute = "none"
        words = [
            f"id={self.id()}",
            f"hardware={os.path.join(gpt2_root, self.hw_section.get('file') or HARDWARE[self.kind])}",
            "precision=bf16",
            f"model.n_layer={r['layers']}", f"model.n_head={r['heads']}", f"model.n_embd={r['hidden']}",
            f"model.vocab_size={r['vocab']}", f"model.block_size={r['seq_len']}", f"data.seq_len={r['seq_len']}",
            f"train.batch_size={r['global_batch']}",
            f"parallel.dp={r['dp']}", f"parallel.tp={r['tp']}", f"parallel.pp={r['pp']}", f"parallel.cp={r['cp']}",
            f"parallel.microbatches={r['global_batch'] // (r['dp'] * r['micro_batch'])}",
            f"parallel.zero={r.get('zero', 0)}",
            f"parallel.schedule={'interleaved' if v > 1 else '1f1b'}", f"parallel.virtual_stages={v}",
            f"parallel.sequence_parallel={'true' if r.get('sequence_parallel') and r['tp'] > 1 else 'false'}",
            f"train.recompute={recompute}",
        ]
        # How the published system ran its data-parallel communication (the source's [common] or row
        # keys, each with its evidence in the file): the gradients reduced after the backward rather
        # than during it, and the size of its collectives.
        if r.get("grad_reduce") == "after_backward":
            words.append("perf.reduce_after_backward=true")
        if r.get("attention") == "fused":
            words.append("perf.fused_attention=true")
        if r.get("tp_comm_overlap"):
            words.append("perf.tp_comm_overlap=true")
        if r.get("overlap_param_gather"):
            words.append("perf.overlap_param_gather=true")
        if r.get("zero3_prefetch") is False:
            words.append("perf.zero3_prefetch=false")
        if r.get("grad_all_reduce"):
            words.append("perf.grad_all_reduce=true")
        if r.get("loss") == "fp32_unfused":
            words.append("perf.fp32_loss=true")
        if r.get("grad_reduce_dtype"):
            words.append(f"parallel.grad_reduce_dtype={r['grad_reduce_dtype']}")
        if r.get("stage_layers"):
            words.append("parallel.stage_layers=[" + ",".join(str(n) for n in r["stage_layers"]) + "]")
        if r.get("bucket_mb"):
            words.append(f"parallel.bucket_mb={r['bucket_mb']}")
        return " ".join(words)

    def compare(self, pred):
        self.pred = pred
        r, step = self.r, pred["step_ms"] / 1e3
        m = self.metric_name
        tokens = r["global_batch"] * r["seq_len"]
        if m == "iteration_time_s":
            self.predicted = step
        elif m == "tokens_per_s":
            self.predicted = tokens / step
        elif m == "tokens_per_s_per_gpu":
            self.predicted = tokens / step / r["gpus"]
        else:
            flops = batch_flops(self.metric["flops_formula"], r) / step / r["gpus"]
            self.predicted = flops / 1e12 if m == "tflops_per_gpu" else flops / PEAK_BF16[self.kind]
        self.error = self.predicted / self.published - 1


def load(published):
    rows = []
    for path in sorted(glob.glob(os.path.join(published, "*.toml"))):
        with open(path, "rb") as f:
            d = tomllib.load(f)
        source = os.path.splitext(os.path.basename(path))[0]
        common = {k: v for k, v in d.get("common", {}).items() if not isinstance(v, str) or k in ("recompute", "attention", "grad_reduce", "grad_reduce_dtype", "loss")}
        for i, raw in enumerate(d.get("row", [])):
            rows.append(Row(source, i, raw, common, d.get("hardware", {}), d.get("metric", {})))
    return rows


def fmt(v, metric):
    if v is None:
        return "-"
    if metric == "mfu":
        return f"{100 * v:.1f}%"
    if metric == "iteration_time_s":
        return f"{v:.2f} s"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"


def layout_of(r):
    s = f"tp{r['tp']} pp{r['pp']}"
    if r.get("virtual_stages", 1) and r.get("virtual_stages", 1) > 1:
        s += f"v{r['virtual_stages']}"
    if r.get("cp", 1) > 1:
        s += f" cp{r['cp']}"
    s += f" dp{r['dp']}"
    if r.get("zero"):
        s += f" z{r['zero']}"
    if r.get("sequence_parallel") and r["tp"] > 1:
        s += " sp"
    rc = str(r.get("recompute", "none")).split()[0]
    if rc != "none":
        s += f" rc:{rc}"
    return s + f" mb{r['micro_batch']}"


def stats(errors):
    a = [abs(e) for e in errors]
    return (statistics.median(a), max(a)) if a else (float("nan"), float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpt2", default=os.path.join(ROOT, "build/bin/gpt2"), help="the gpt2 executable")
    ap.add_argument("--published", default=os.path.join(ROOT, "tests/bench/published"), help="folder of *.toml tables")
    ap.add_argument("--json", help="write every row (inputs, prediction, error) here")
    ap.add_argument("--markdown", help="write the README's table here")
    ap.add_argument("--hardware", action="append", default=[], metavar="KIND=FILE",
                    help="another hardware file for A100 or H100 rows (default: inputs/hardware/a100.toml, h100.toml)")
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    args = ap.parse_args()
    for item in args.hardware:
        kind, _, path = item.partition("=")
        if kind not in HARDWARE or not path:
            ap.error(f"--hardware: expected A100=FILE or H100=FILE, got {item!r}")
        HARDWARE[kind] = os.path.abspath(path)

    rows = load(args.published)
    for row in rows:
        row.reason = row.check()
    todo = [row for row in rows if row.reason is None]
    deck = os.path.join(ROOT, "inputs/gpt2-124M.toml")
    lines = "\n".join(row.batch_line(ROOT) for row in todo) + "\n"
    proc = subprocess.run([args.gpt2, "simulate", deck, "--batch", "-"], input=lines, capture_output=True, text=True,
                          cwd=ROOT)
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():  # 1: some row refused, named below
        print(f"error: {args.gpt2} simulate --batch failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    by_id = {row.id(): row for row in todo}
    for line in proc.stdout.splitlines():
        out = json.loads(line)
        row = by_id[out["id"]]
        if "error" in out:
            row.reason = "the model refuses it: " + out["error"]
        else:
            row.compare(out)

    compared = [r for r in rows if r.error is not None]
    scored = [r for r in compared if not r.bound]
    if not args.quiet:
        print(f"{'source':34} {'row':44} {'layout':34} {'metric':20} {'published':>10} {'predicted':>10} {'error':>7}")
        for r in compared:
            mark = f" (bound: {r.bound})" if r.bound else ""
            print(f"{r.source:34} {r.name[:44]:44} {layout_of(r.r):34} {r.metric_name:20} "
                  f"{fmt(r.published, r.metric_name):>10} {fmt(r.predicted, r.metric_name):>10} {100 * r.error:+6.1f}%{mark}")
        skipped = [r for r in rows if r.error is None]
        if skipped:
            print(f"\nnot predicted ({len(skipped)} rows):")
            for r in skipped:
                print(f"  {r.source:34} {r.name[:50]:50} {r.reason}")
    print(f"\n{'source':34} {'rows':>5} {'median |error|':>15} {'worst |error|':>14}")
    sources = sorted({r.source for r in scored})
    for s in sources:
        med, worst = stats([r.error for r in scored if r.source == s])
        print(f"{s:34} {sum(1 for r in scored if r.source == s):5d} {100 * med:14.1f}% {100 * worst:13.1f}%")
    med, worst = stats([r.error for r in scored])
    print(f"{'all':34} {len(scored):5d} {100 * med:14.1f}% {100 * worst:13.1f}%")

    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"source": r.source, "row": r.name, "inputs": r.r, "metric": r.metric_name, "published": r.published,
                        "predicted": r.predicted, "error": r.error, "bound": r.bound, "skipped": r.reason,
                        "prediction": r.pred} for r in rows], f, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"Published runs against `gpt2 simulate` ({datetime.date.today()}, "
                    f"`tests/bench/validate_published.py`):\n\n")
            f.write("| source | run | layout | metric | published | predicted | error |\n| --- | --- | --- | --- | --- | --- | --- |\n")
            for r in compared:
                f.write(f"| {r.source} | {r.name} | {layout_of(r.r)} | {r.metric_name} | {fmt(r.published, r.metric_name)} | "
                        f"{fmt(r.predicted, r.metric_name)} | {100 * r.error:+.1f}%{' (bound)' if r.bound else ''} |\n")
            f.write("\n| source | rows | median error | worst error |\n| --- | --- | --- | --- |\n")
            for s in sources:
                med, worst = stats([r.error for r in scored if r.source == s])
                f.write(f"| {s} | {sum(1 for r in scored if r.source == s)} | {100 * med:.1f}% | {100 * worst:.1f}% |\n")
            med, worst = stats([r.error for r in scored])
            f.write(f"| all | {len(scored)} | {100 * med:.1f}% | {100 * worst:.1f}% |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
