"""Each family's coda step against transformers' on the GPU, in bf16: the loss and every
parameter's gradient (issue 35).

    python3 benchmarks/family_parity.py --shapes qwen3-1.7b-2x4096,gemma3-1b-2x4096 --layers 2 \
        --out parity.json

For each shape of ``benchmarks/train_step.py`` (its config with ``--layers`` layers, random
seeded bf16 weights), two copies of the same transformers model run one forward + backward on
the same tokens: one as it is, one patched by ``coda_spec.nn.apply_to_hf`` (the family's chains,
and its glue compiled on the GPU: ``coda_spec.nn.glue``). Reported per shape: both losses,
their relative difference, and the worst relative gradient difference (``|g_coda - g_hf| /
|g_hf|`` per parameter, Frobenius norms) with its parameter. Both sides round to bf16 at
different places, so these are bf16-sized (about 1e-2), not the fp64 CPU tests' 1e-10; a
misplaced weight or a wrong formula shows as O(1). The run exits 1 when any shape fails to run
or any figure exceeds ``--tol`` (default 0.05).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import train_step as T


def one(shape: str, layers: int, builds: str, seq: int) -> dict:
    import torch

    import coda_spec.nn

    cfg = T.config(shape, layers)
    hf = T.hf_bf16(cfg)
    coda = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda", generator=g)
    hf.train(), coda.train()
    t0 = time.time()
    losses = {}
    for name, model in (("hf", hf), ("coda", coda)):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses[name] = float(loss)
    worst, where = 0.0, ""
    for (n, p), (_, q) in zip(hf.named_parameters(), coda.named_parameters(), strict=True):
        if p.grad is None:
            continue
        rel = float(
            (q.grad.double() - p.grad.double()).norm() / p.grad.double().norm().clamp_min(1e-30)
        )
        if rel > worst:
            worst, where = rel, n
    return {
        "shape": shape,
        "layers": layers,
        "tokens": seq,
        "loss_hf": losses["hf"],
        "loss_coda": losses["coda"],
        "loss_rel": abs(losses["coda"] - losses["hf"]) / abs(losses["hf"]),
        "worst_grad_rel": worst,
        "worst_grad_param": where,
        "seconds": round(time.time() - t0, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(T.FAMILY_SHAPES))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--builds", default="build")
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    T.need_gpu("family_parity")
    rows, bad = [], []
    for shape in [s for s in args.shapes.split(",") if s]:
        try:
            row = one(shape, args.layers, args.builds, args.seq)
        except Exception as e:  # a row with the reason; the run fails at the end
            row = {"shape": shape, "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if "error" in row or max(row["loss_rel"], row["worst_grad_rel"]) > args.tol:
            bad.append(shape)
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    if bad:
        print(f"family_parity: failed or over --tol {args.tol}: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
