"""Training past one GPU: the coda Llama, and transformers + torch.compile, under DDP and FSDP2.

    torchrun --nproc_per_node 2 benchmarks/train_dist.py --wrap fsdp2 --mode coda --out r.json
    torchrun --nproc_per_node 1 benchmarks/train_dist.py --wrap fsdp2 --mode coda --parity 5 \
        --dump one.pt                      # the 1-GPU reference of a parity run
    torchrun --nproc_per_node 2 benchmarks/train_dist.py --wrap fsdp2 --mode coda --parity 5 \
        --dump two.pt --compare one.pt     # the same steps on 2 GPUs, compared with it

The model is the Llama-3.2-1B config of benchmarks/train_step.py (random seeded weights, SDPA),
the global batch ``--batch x --seq`` (default 2 x 4096) split across the ranks, the same tokens
whatever the world size. Wraps:

* ``ddp``: ``DistributedDataParallel`` over bf16 weights (gradients reduced in bf16), AdamW on
  fp32 master copies, as train_step.py's ``adamw`` step.
* ``fsdp2``: ``fully_shard`` on every decoder layer, then the root (embedding, final norm, LM
  head), ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`` over fp32 sharded
  parameters, AdamW on the shards.

Modes: ``coda`` (``coda_spec.nn.LlamaForCausalLM``, eager), ``coda-compile`` (the wrapped model
under ``torch.compile``), ``hf-compile`` (transformers' ``LlamaForCausalLM`` under
``torch.compile``, ``create_causal_mask`` patched to None so attention stays causal flash, as in
issue 21's baseline). ``--micro 2`` accumulates two micro-batches per rank, the first without
gradient sync (DDP ``no_sync``, FSDP2 ``set_requires_gradient_sync(False)``).

Rank 0 writes one JSON row: ms per step (median of ``--steps`` after ``--warmup``), tokens/s per
GPU, peak allocated GiB, the first step's seconds, the losses, and under compile the graph
breaks dynamo counted (reason -> count). ``--parity N`` instead runs N AdamW steps on fixed data
and dumps the per-step global losses and the full final parameters; ``--compare`` reports the
largest relative difference of each parameter against an earlier dump. ``--device cpu`` runs
the transformers mode on gloo with ``--shape tiny`` (the script's own CPU test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TINY = {  # a CPU-sized Llama: the script's own test (tests/test_train_dist.py)
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "tie_word_embeddings": True,
}


def _config(args):
    from transformers import LlamaConfig

    if args.shape == "tiny":
        return LlamaConfig(**TINY, attn_implementation="sdpa")
    import train_step

    return train_step.config(args.shape, args.layers)


def _model(args, cfg, device):
    """(the module to wrap, its decoder layers, the loss function of (module, ids, labels))."""
    from transformers import LlamaForCausalLM
    from transformers.models.llama import modeling_llama

    if args.mode == "hf-compile":
        modeling_llama.create_causal_mask = lambda *a, **k: None
    torch.manual_seed(0)
    with torch.device(device):
        hf = LlamaForCausalLM(cfg)
    if device == "cpu":
        hf = hf.double()
    if args.mode.startswith("coda"):
        from coda_spec.nn import LlamaForCausalLM as CodaLlama

        hf = hf.to(torch.bfloat16)
        model = CodaLlama.from_hf(hf, builds=args.builds)
        return model, list(model.layers), lambda m, ids, labels: m(ids, labels)
    if device != "cpu":
        hf = hf.to(torch.bfloat16)
    return (
        hf,
        list(hf.model.layers),
        lambda m, ids, labels: m(input_ids=ids, labels=labels).loss,
    )


def _wrap(args, model, layers):
    if args.wrap == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if args.device == "cpu":
        policy = MixedPrecisionPolicy()  # fp64 on the CPU: the comparison is of the math
    else:
        model.float()  # fp32 shards; compute in bf16, reduce in fp32
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def _batch(args, cfg, rank: int, world: int, device):
    """This rank's rows of the global batch (the same global batch for every world size)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=g)
    if args.batch % (world * args.micro):
        raise SystemExit(f"--batch {args.batch} must split into {world} ranks x {args.micro}")
    per = args.batch // world
    mine = ids[rank * per : (rank + 1) * per].to(device)
    return mine, mine.clone()


def _step(args, wrapped, loss_fn, ids, labels, opt, masters, params):
    """One optimizer step over ``--micro`` micro-batches (the first ones without sync)."""
    micro = ids.chunk(args.micro)
    labs = labels.chunk(args.micro)
    total = 0.0
    for i, (x, y) in enumerate(zip(micro, labs, strict=True)):
        last = i == len(micro) - 1
        if args.wrap == "fsdp2":
            wrapped.set_requires_gradient_sync(last)
            ctx = _null()
        else:
            ctx = _null() if last else wrapped.no_sync()
        with ctx:
            loss = loss_fn(wrapped, x, y) / args.micro
            loss.backward()
        total += loss.detach()
    if masters is not None:  # DDP: fp32 masters take the reduced bf16 gradients
        for m, p in zip(masters, params, strict=True):
            m.grad = p.grad.float()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if masters is not None:
        with torch.no_grad():
            torch._foreach_copy_(params, masters)
        for p in params:
            p.grad = None
    return total


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _global_mean(x: torch.Tensor, world: int) -> float:
    y = x.detach().clone().double()
    dist.all_reduce(y)
    return (y / world).item()


def _full_params(model, dtype) -> dict:
    out = {}
    for n, p in model.named_parameters():
        t = p.detach()
        out[n] = (t.full_tensor() if hasattr(t, "full_tensor") else t).to(dtype).cpu()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wrap", choices=["ddp", "fsdp2"], required=True)
    ap.add_argument("--mode", choices=["coda", "coda-compile", "hf-compile", "hf"], default="coda")
    ap.add_argument("--shape", default="1b-2x4096")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--micro", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--builds", default="build")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--parity", type=int, default=0, help="run N steps on fixed data and dump")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--compare", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    cpu = args.device == "cpu"
    dist.init_process_group("gloo" if cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = "cpu" if cpu else f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    if not cpu:
        torch.cuda.set_device(device)
    try:
        row = run(args, rank, world, device)
        if rank == 0:
            text = json.dumps(row, indent=1)
            print(text)
            if args.out:
                Path(args.out).write_text(text)
    finally:
        dist.barrier()
        dist.destroy_process_group()
    # Done: leave without the interpreter's teardown. A gloo worker thread still joinable when
    # torch's static objects are destroyed aborts the process ("terminate called without an
    # active exception", SIGABRT, after the row was written), which failed a fresh-clone CI run
    # of tests/test_train_dist.py on 2 cores (2026-12-03); tests/test_nn_ddp.py leaves the same way.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(args, rank: int, world: int, device) -> dict:
    cfg = _config(args)
    model, layers, loss_fn = _model(args, cfg, device)
    wrapped = _wrap(args, model, layers)
    if args.mode.endswith("compile"):
        from torch._dynamo.utils import counters

        counters.clear()
        wrapped = torch.compile(wrapped)
    params = [p for p in model.parameters() if p.requires_grad]
    masters = None
    if args.wrap == "ddp" and not (args.device == "cpu"):
        masters = [p.detach().float().requires_grad_(True) for p in params]
        opt = torch.optim.AdamW(masters, lr=args.lr)
    else:
        opt = torch.optim.AdamW(params, lr=args.lr)
    ids, labels = _batch(args, cfg, rank, world, device)
    sync = (lambda: None) if args.device == "cpu" else torch.cuda.synchronize
    row = {
        "wrap": args.wrap,
        "mode": args.mode,
        "world": world,
        "shape": args.shape,
        "batch": args.batch,
        "seq": args.seq,
        "micro": args.micro,
    }
    if args.parity:
        losses = []
        for _ in range(args.parity):
            loss = _step(args, wrapped, loss_fn, ids, labels, opt, masters, params)
            losses.append(_global_mean(loss, world))
        full = _full_params(model, torch.float64 if args.device == "cpu" else torch.float32)
        row["losses"] = losses
        if rank == 0 and args.dump:
            torch.save({"losses": losses, "params": full}, args.dump)
        if rank == 0 and args.compare:
            ref = torch.load(args.compare)
            worst = max(
                ((full[n] - r).norm() / r.norm().clamp_min(1e-30)).item()
                for n, r in ref["params"].items()
            )
            row["compare"] = {
                "reference": args.compare,
                "worst_param_rel_diff": worst,
                "reference_losses": ref["losses"],
                "loss_diffs": [a - b for a, b in zip(losses, ref["losses"], strict=True)],
            }
        return row
    t0 = time.perf_counter()
    loss = _step(args, wrapped, loss_fn, ids, labels, opt, masters, params)
    sync()
    row["first_step_s"] = round(time.perf_counter() - t0, 1)
    if args.mode.endswith("compile"):
        from torch._dynamo.utils import counters

        row["graph_breaks"] = {str(k): v for k, v in counters["graph_break"].items()}
    for _ in range(args.warmup):
        _step(args, wrapped, loss_fn, ids, labels, opt, masters, params)
    sync()
    if not args.device == "cpu":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        sync()
        start = time.perf_counter()
        loss = _step(args, wrapped, loss_fn, ids, labels, opt, masters, params)
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    row.update(
        ms=round(ms, 2),
        ms_all=[round(t, 2) for t in times],
        tokens_per_s_per_gpu=round(args.batch * args.seq / world / ms * 1e3),
        peak_gib=None
        if args.device == "cpu"
        else round(torch.cuda.max_memory_allocated() / 2**30, 2),
        loss=_global_mean(loss, world),
    )
    return row


if __name__ == "__main__":
    main()
