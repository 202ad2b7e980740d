"""One training step of a Llama on the GPU: transformers (eager, compiled, Liger) against coda.

    python3 benchmarks/train_step.py --shape 1b-2x4096 --kind fwdbwd --out step.json
    python3 benchmarks/train_step.py --shape 1b-2x4096 --kind adamw --modes coda,hf-compile ...

Each mode runs in its own process (``--child``), so compile caches, allocator state and patches
(Liger's, the mask patch) never leak between modes. The weights are random (seeded), bf16, the
same for every mode; attention is SDPA (flash on the H200).

Modes:
* ``hf``: transformers ``LlamaForCausalLM``, eager.
* ``hf-compile``: the same under ``torch.compile``, as a user gets it (transformers'
  ``create_causal_mask`` materialises the causal mask under dynamo, so attention is masked).
* ``hf-compile-nomask``: ``torch.compile`` with ``create_causal_mask`` patched to return None,
  so compiled code keeps eager's ``is_causal`` attention (issue 21's measured baseline).
* ``liger``: ``apply_liger_kernel_to_llama()`` (fused linear cross-entropy, RMSNorm, SwiGLU,
  RoPE), eager.
* ``coda``: ``coda_spec.nn.LlamaForCausalLM`` (the bundled llama3 chains), eager.
* ``coda-compile``: the same under ``torch.compile(fullgraph=True)``.
* ``coda-graphs``: ``torch.compile(mode="reduce-overhead")``: the step replayed as CUDA graphs.
* ``coda-recompute``, ``coda-recompute-compile``: ``coda`` and ``coda-compile`` with
  ``recompute=True`` (the MLP's z1 recomputed in the backward: ``specs/*_recompute.yaml``, built
  by ``coda build specs/llama3_first.yaml specs/llama3_layer_recompute.yaml
  specs/llama3_last_mlp_recompute.yaml specs/llama3_lm_head.yaml``).

Step kinds: ``fwdbwd`` (forward, loss, backward) and ``adamw`` (the same, then a fused AdamW step
on fp32 master weights: bf16 weights compute, their gradients are cast to fp32, AdamW updates
the fp32 masters and the bf16 weights are copied from them; identical for every mode).

Per mode: the median ms per step over ``--steps`` steps after ``--warmup``, tokens/s, peak
allocated memory, the first step's time (compile included) and the bytes autograd saves per
layer (eager modes: every saved tensor's storage once, parameters left out), and, with
``--profile``, a torch.profiler breakdown of one step by kernel family: GEMM, attention, coda's
own host/finalize kernels, other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = {  # name -> (config overrides, batch, sequence)
    "1b-2x4096": ({}, 2, 4096),
    "1b-1x8192": ({}, 1, 8192),
    "8b-layer4-2x4096": (
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 4,
            "head_dim": 128,
        },
        2,
        4096,
    ),
}
ONE_B = {
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
MODES = (
    "hf",
    "hf-compile",
    "hf-compile-nomask",
    "liger",
    "coda",
    "coda-compile",
    "coda-graphs",
    "coda-recompute",
    "coda-recompute-compile",
)
GEMM_NAMES = ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas", "GemmSm90", "kernel_cutlass")
ATTN_NAMES = ("flash", "fmha", "attention")


def config(shape: str, layers: int | None):
    from transformers import LlamaConfig

    over, _, _ = SHAPES[shape]
    cfg = {**ONE_B, **over}
    if layers:
        cfg["num_hidden_layers"] = layers
    return LlamaConfig(**cfg, attn_implementation="sdpa")


def hf_bf16(cfg):
    """transformers' Llama at ``cfg`` with seeded random bf16 weights on the GPU. RoPE's
    frequencies stay fp32: ``model.to(torch.bfloat16)`` also casts the rotary embedding's
    ``inv_freq`` buffer, rounding each frequency to 8 bits (an angle error of ``pos * freq *
    2^-9`` rad, ~2 rad at position 1000), which ``from_pretrained(torch_dtype=torch.bfloat16)``
    does not do and coda (which computes them from the config) does not do."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    rotary = model.model.rotary_emb
    keep = rotary.inv_freq.clone(), rotary.original_inv_freq.clone()
    model = model.to(torch.bfloat16)
    rotary.inv_freq, rotary.original_inv_freq = keep
    return model


def make(mode: str, cfg, builds: str):
    """(the model whose parameters train, the step's loss function)."""
    import torch
    from transformers.models.llama import modeling_llama

    if mode == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
    if mode == "hf-compile-nomask":
        modeling_llama.create_causal_mask = lambda *a, **k: None
    hf = hf_bf16(cfg)
    if mode.startswith("coda"):
        from coda_spec.nn import LlamaForCausalLM as CodaLlama

        model = CodaLlama.from_hf(hf, builds=builds, recompute="recompute" in mode)
        del hf
        fn = model
    else:
        model = hf

        def fn(ids, labels):
            return model(input_ids=ids, labels=labels).loss

    if mode in ("hf-compile", "hf-compile-nomask"):
        fn = torch.compile(fn)
    elif mode in ("coda-compile", "coda-recompute-compile"):
        fn = torch.compile(fn, fullgraph=True)
    elif mode == "coda-graphs":
        fn = torch.compile(fn, fullgraph=True, mode="reduce-overhead")
    return model, fn


def saved_bytes(fn, ids, labels, params) -> int:
    import torch

    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        # detached: a saved output packed as itself would hold its own grad_fn, a cycle through
        # the autograd graph that Python's gc cannot see, and that forward's saved tensors would
        # stay allocated for the rest of the run (seen on the H200, 2026-12-02: +6.3 GiB coda)
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(ids, labels)
    del loss
    return sum(seen.values())


def phases(fn, ids, labels, params) -> dict:
    """Where the memory goes, in GiB: what stays allocated between steps (weights, optimizer
    state), the peak during the forward and loss, and the peak during the backward."""
    import torch

    gib = 2**30
    torch.cuda.synchronize()
    resident = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = fn(ids, labels)
    torch.cuda.synchronize()
    fwd = torch.cuda.max_memory_allocated()
    after_fwd = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    bwd = torch.cuda.max_memory_allocated()
    for p in params:
        p.grad = None
    del loss
    return {
        "resident": round(resident / gib, 2),
        "after_forward": round(after_fwd / gib, 2),
        "forward_peak": round(fwd / gib, 2),
        "backward_peak": round(bwd / gib, 2),
    }


def family(name: str, coda_symbols: set) -> str:
    low = name.lower()
    if any(s in name for s in coda_symbols):
        return "coda host/finalize"
    if any(k in low for k in ATTN_NAMES):
        return "attention"
    if any(k.lower() in low for k in GEMM_NAMES):
        return "GEMM"
    return "other"


def child(args) -> dict:
    import torch

    cfg = config(args.shape, args.layers)
    _, b, s = SHAPES[args.shape]
    model, fn = make(args.mode, cfg, args.builds)
    params = list(model.parameters())
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda", generator=g)
    labels = ids.clone()
    saved = None
    if args.mode in ("hf", "liger", "coda", "coda-recompute"):
        saved = saved_bytes(fn, ids, labels, params)
    opt = masters = None
    if args.kind == "adamw":
        masters = [p.detach().float().requires_grad_(True) for p in params]
        opt = torch.optim.AdamW(masters, lr=1e-5, fused=True)

    def one_step():
        loss = fn(ids, labels)
        loss.backward()
        if opt is not None:
            for m, p in zip(masters, params, strict=True):
                m.grad = p.grad.float()
            opt.step()
            with torch.no_grad():
                torch._foreach_copy_(params, masters)
        for p in params:
            p.grad = None
        return loss.detach()

    t0 = time.perf_counter()
    loss = one_step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(args.warmup):
        one_step()
    torch.cuda.synchronize()
    memory = phases(fn, ids, labels, params)
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = one_step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    ms = statistics.median(times)
    row = {
        "mode": args.mode,
        "shape": args.shape,
        "kind": args.kind,
        "ms": round(ms, 2),
        "ms_all": [round(t, 2) for t in times],
        "tokens_per_s": round(b * s / ms * 1e3),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "first_step_s": round(first, 1),
        "saved_mib_per_layer": None
        if saved is None
        else round(saved / cfg.num_hidden_layers / 2**20, 1),
        "loss": loss.item(),
        "memory_gib": memory,
    }
    if args.profile:
        row["breakdown_ms"] = profile(one_step, model, args)
    return row


def profile(one_step, model, args) -> dict:
    import torch

    symbols: set = set()
    for op in getattr(model, "chains", {}).values():
        for st in op.chain.manifest.all_steps:
            if st.kind != "kernel" and getattr(st, "launch", None) is not None:
                symbols.add(st.launch.cubin.name)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        one_step()
        torch.cuda.synchronize()
    out: dict = {}
    for ev in prof.key_averages():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        fam = family(ev.key, symbols)
        out[fam] = out.get(fam, 0.0) + ev.device_time_total / 1e3
    return {k: round(v, 2) for k, v in sorted(out.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--shape", default="1b-2x4096", choices=sorted(SHAPES))
    ap.add_argument("--kind", default="fwdbwd", choices=["fwdbwd", "adamw"])
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--builds", default="build")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per mode")
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.mode = args.child
        print(json.dumps(child(args)))
        return
    rows = []
    for mode in args.modes.split(","):
        cmd = [sys.executable, __file__, "--child", mode, *sys.argv[1:]]
        print(f"[train_step] {mode} {args.shape} {args.kind} ...", flush=True)
        rows.append(run_child(mode, cmd, args.timeout))
        row = rows[-1]
        if "error" in row:
            print(f"[train_step]   failed: {row['error']}", flush=True)
        else:
            print(f"[train_step]   {row['ms']} ms, {row['peak_gib']} GiB", flush=True)
        with open(args.out, "w") as f:  # after every mode: a later timeout loses nothing
            json.dump({"rows": rows, "argv": sys.argv[1:]}, f, indent=1)


def run_child(mode: str, cmd: list, timeout: int) -> dict:
    """One mode's row, from its own process: its last stdout line, or the error."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"timed out after {timeout} s"}
    last = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    if not last:
        return {"mode": mode, "error": done.stderr.strip().splitlines()[-5:]}
    return json.loads(last[0])


if __name__ == "__main__":
    main()
