"""Why the example's two curves part: one step's gradients, coda and transformers-bf16 against fp32.

    python3 benchmarks/example_grads.py --builds build --pretrain 100 --out grads.json

The example's model (``examples/train_llama.py``: its config, seed, corpus and batches) is
trained ``--pretrain`` steps with transformers in bf16 (at ``--lr`` 1e-3 after ``--warmup`` 50:
the schedule at which the example's curves parted) (so the weights are no longer at
random init), then on the next batch the loss and every parameter gradient are computed three
ways from those same bf16 weights: transformers computing in fp32 (the reference),
transformers in bf16, and ``coda_spec.nn.LlamaForCausalLM.from_hf``. Per tensor it reports each
bf16 run's relative error against the reference and its *scale*, ``<g, g_ref> / <g_ref, g_ref>``:
an unbiased gradient has scale 1 up to noise; a scale below 1 on many tensors is a gradient
that rounding shrinks, which slows training the way a smaller learning rate does.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import train_llama  # noqa: E402  (the example's config, corpus and batches: their one home)

from coda_spec.nn import LlamaForCausalLM as CodaLlama  # noqa: E402
from coda_spec.nn import layout  # noqa: E402


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def scale(a, b) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return (a @ b / (b @ b)).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", default="build")
    ap.add_argument("--pretrain", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    # the schedule at which the example's curves parted (examples/train_llama.py's docstring)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    text, _ = train_llama.corpus(64)
    data = list(train_llama.batches(text, args.pretrain + 1, args.batch, args.seq, 0))
    torch.manual_seed(0)
    with torch.device("cuda"):
        bf = LlamaForCausalLM(LlamaConfig(**train_llama.SMALL, attn_implementation="sdpa"))
    rotary = bf.model.rotary_emb
    keep = rotary.inv_freq.clone(), rotary.original_inv_freq.clone()
    bf = bf.to(torch.bfloat16)
    rotary.inv_freq, rotary.original_inv_freq = keep
    params = list(bf.parameters())
    masters = [p.detach().float().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(masters, lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95), fused=True)
    for step, ids in enumerate(data[:-1]):
        ids = ids.cuda()
        bf(input_ids=ids, labels=ids).loss.backward()
        for m, p in zip(masters, params, strict=True):
            m.grad = p.grad.float()
            p.grad = None
        for group in opt.param_groups:
            group["lr"] = train_llama.lr_at(step, 500, args.lr, args.warmup)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_copy_(params, masters)
    ids = data[-1].cuda()
    ref = copy.deepcopy(bf).float()
    ref_loss = ref(input_ids=ids, labels=ids).loss
    ref_loss.backward()
    ref_grads = {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
    bf_loss = bf(input_ids=ids, labels=ids).loss
    bf_loss.backward()
    coda = CodaLlama.from_hf(bf, builds=args.builds)
    coda_loss = coda(ids, labels=ids)
    coda_loss.backward()
    as_hf = layout.to_hf_state_dict({n: p.grad for n, p in coda.named_parameters()}, coda.shape)
    as_hf.pop("lm_head.weight", None)  # tied: the embedding's, listed once by transformers
    rows = {}
    for n, p in bf.named_parameters():
        r = ref_grads[n]
        rows[n] = {
            "hf_bf16_err": rel(p.grad, r),
            "coda_err": rel(as_hf[n], r),
            "hf_bf16_scale": scale(p.grad, r),
            "coda_scale": scale(as_hf[n], r),
        }
    out = {
        "pretrain_steps": args.pretrain,
        "loss": {"fp32": ref_loss.item(), "hf_bf16": bf_loss.item(), "coda": coda_loss.item()},
        "median": {
            k: statistics.median(v[k] for v in rows.values())
            for k in ("hf_bf16_err", "coda_err", "hf_bf16_scale", "coda_scale")
        },
        "grads": rows,
    }
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("pretrain_steps", "loss", "median")}, indent=1))
    for n, v in rows.items():
        print(
            f"{n:45s} err hf {v['hf_bf16_err']:.4f} coda {v['coda_err']:.4f}   "
            f"scale hf {v['hf_bf16_scale']:.4f} coda {v['coda_scale']:.4f}"
        )


if __name__ == "__main__":
    main()
