#!/usr/bin/env python3
"""PyTorch autocast(bf16) reference for the tiny model (tests/fixtures/tiny_bf16_autocast.bin).

The weights, tokens and targets of tiny_reference.bin (make_fixtures.py), as float32 parameters,
through make_fixtures.py's GPT-2 under torch.autocast("cpu", dtype=torch.bfloat16): the matmuls
(linear layers, attention products, LM head) take bf16 inputs and return bf16 outputs, the
residual stream stays float32, the loss is taken on bf16 logits. Writes, in the named tensor
format of make_fixtures.py: `loss` (float64 [1]) and `grad.<name>` (float32) for every parameter.

    /usr/bin/python3 tests/reference/make_autocast_fixture.py [--out DIR]

Bit-reproducible (one thread). Only torch, numpy and the standard library are used.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402


def main():
    fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=fixtures, help="output directory (default: %(default)s)")
    args = ap.parse_args()
    torch.set_num_threads(1)

    ref = mf.read_fixture(os.path.join(fixtures, "tiny_reference.bin"))
    c = [int(x) for x in ref["config"]]
    cfg = mf.Config(n_layer=c[0], n_head=c[1], n_embd=c[2], vocab_size=c[3], block_size=c[4])
    B, T = c[5], c[6]
    names = list(mf.param_shapes(cfg).keys())
    params = {k: torch.tensor(ref[k], dtype=torch.float32, requires_grad=True) for k in names}
    tokens = torch.tensor(ref["tokens"], dtype=torch.int64).reshape(B, T)
    targets = torch.tensor(ref["targets"], dtype=torch.int64).reshape(B, T)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = mf.forward(params, cfg, tokens, targets)
    loss.float().backward()

    w = mf.FixtureWriter()
    w.add("loss", [loss.item()], mf.DT_F64)
    for k in names:
        w.add(f"grad.{k}", params[k].grad, mf.DT_F32)
    path = os.path.join(args.out, "tiny_bf16_autocast.bin")
    w.write(path)
    print(f"{path}: loss {loss.item():.8f} (float64 reference {ref['loss'][0]:.8f}), {len(w.records)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
