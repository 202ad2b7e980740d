"""The coda Llama on the GPU against transformers: bf16 parity and compile.

    python3 benchmarks/llama_h200.py parity  --out parity.json     # one process per part
    python3 benchmarks/llama_h200.py compile --out compile.json

``parity``: the same random bf16 weights (seeded) in a transformers ``LlamaForCausalLM``
computing in fp32 (the reference), the same computing in bf16, and
``coda_spec.nn.LlamaForCausalLM.from_hf`` of the bf16 one. The loss and every parameter
gradient of the bf16 runs are compared with the fp32 run's (relative Frobenius error); the
issue's bar is coda's error <= 1.5x transformers-bf16's, per tensor. ``compile``:
``torch._dynamo.explain`` of the coda model (graph breaks), and a fullgraph compile's loss
against eager's. Step times: ``benchmarks/train_step.py``. Default config: Llama-3.2-1B (16
layers, 2048 hidden, 32/8 heads, 64 head dim, 8192 intermediate, 128256 vocab, tied), batch 2 x
4096; ``--layers``/``--seq`` shrink it. ``--pad N``: row 0 left-padded and the other rows
right-padded by N tokens, passed to every model as ``attention_mask`` (labels -100 there).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
import train_step  # benchmarks/: the shapes' one home

from coda_spec.nn import LlamaForCausalLM as CodaLlama
from coda_spec.nn import layout


def config(layers: int):
    return train_step.config("1b-2x4096", layers)


def batch(cfg, b: int, s: int):
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda", generator=g)
    labels = ids.clone()
    labels[0, :16] = -100  # a padded prefix: ignore_index rows
    return ids, labels


def padded(ids, labels, pad: int) -> tuple:
    """``(ids, labels, attention_mask)``: ``pad`` tokens of padding, on the left of row 0 and
    the right of the others; the mask None without padding."""
    if not pad:
        return ids, labels, None
    mask = torch.ones_like(ids)
    mask[0, :pad] = 0
    mask[1:, -pad:] = 0
    return ids.masked_fill(mask == 0, 0), labels.masked_fill(mask == 0, -100), mask


def hf_loss(model, ids, labels, mask=None):
    return model(input_ids=ids, labels=labels, attention_mask=mask).loss


def rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def parity(args) -> dict:
    cfg = config(args.layers)
    ids, labels, mask = padded(*batch(cfg, args.batch, args.seq), args.pad)
    bf = train_step.hf_bf16(cfg)
    ref = copy.deepcopy(bf).float()  # the same (bf16-valued) weights, computed in fp32
    ref_loss = hf_loss(ref, ids, labels, mask)
    ref_loss.backward()
    ref_grads = {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
    del ref
    torch.cuda.empty_cache()
    coda = CodaLlama.from_hf(bf, builds=args.builds)
    bf_loss = hf_loss(bf, ids, labels, mask)
    bf_loss.backward()
    coda_loss = coda(ids, labels, attention_mask=mask)
    coda_loss.backward()
    coda_grads = {n: p.grad for n, p in coda.named_parameters()}
    as_hf = layout.to_hf_state_dict(coda_grads, coda.shape)
    rows = {}
    if cfg.tie_word_embeddings:
        as_hf.pop("lm_head.weight")  # the embedding's, listed once by transformers
    for n, p in bf.named_parameters():
        e_hf, e_coda = rel(p.grad, ref_grads[n]), rel(as_hf[n], ref_grads[n])
        rows[n] = {"hf_bf16": e_hf, "coda": e_coda, "ratio": e_coda / e_hf if e_hf else None}
    ratios = [r["ratio"] for r in rows.values() if r["ratio"] is not None]
    loss = {
        "fp32": ref_loss.item(),
        "hf_bf16": bf_loss.item(),
        "coda": coda_loss.item(),
        "hf_bf16_err": abs(bf_loss.item() - ref_loss.item()),
        "coda_err": abs(coda_loss.item() - ref_loss.item()),
    }
    return {
        "loss": loss,
        "grad_ratio_max": max(ratios),
        "grad_ratio_median": statistics.median(ratios),
        "worst": sorted(rows.items(), key=lambda kv: -(kv[1]["ratio"] or 0))[:5],
        "grads": rows,
    }


def compile_check(args) -> dict:
    cfg = config(args.layers)
    ids, labels, mask = padded(*batch(cfg, args.batch, args.seq), args.pad)
    coda = CodaLlama.from_hf(train_step.hf_bf16(cfg), builds=args.builds)
    explained = torch._dynamo.explain(coda)(ids, labels, attention_mask=mask)
    torch._dynamo.reset()
    t0 = time.perf_counter()
    compiled = torch.compile(coda, fullgraph=True)
    loss = compiled(ids, labels, attention_mask=mask)
    loss.backward()
    torch.cuda.synchronize()
    return {
        "graph_breaks": explained.graph_break_count,
        "graphs": explained.graph_count,
        "break_reasons": [str(r) for r in explained.break_reasons],
        "compiled_loss": loss.item(),
        "eager_loss": coda(ids, labels, attention_mask=mask).item(),
        "first_compiled_step_s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["parity", "compile"])
    ap.add_argument("--builds", default="build")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--pad", type=int, default=0, help="padding tokens per row (attention_mask)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    train_step.need_gpu("llama_h200")  # exit 1 with the reason, not a traceback
    run = {"parity": parity, "compile": compile_check}[args.part]
    got = run(args)
    got["args"] = vars(args)
    got["gpu"] = torch.cuda.get_device_name()
    with open(args.out, "w") as f:
        json.dump(got, f, indent=1)
    print(json.dumps({k: v for k, v in got.items() if k != "grads"}, indent=1))


if __name__ == "__main__":
    main()
