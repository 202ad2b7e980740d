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

Tune tables (coda modes only): ``--tuned PATH`` (a tune file or directory; ``none``: no table,
every kernel runs its fallback config; default: the search path ``coda_spec.load`` uses,
``$CODA_TUNED``, ``./tuned/*.json``, then the shipped table) is what every coda mode loads its
chains with. A mode suffix picks another table for that mode alone, so two tables run in one
invocation: ``coda@old`` loads ``--tuned-old PATH``, ``coda@none`` no table. The row's
``mode`` keeps the suffix, ``tuned`` names the table and ``variants`` lists the config every
kernel ran (``Chain.selected_variants`` at the step's M): a stale table (one keyed by other
builds' hashes) shows as fallbacks there.

Shapes: ``--shape NAME`` or ``--shapes a,b,c`` (every mode at every shape, shape by shape, in one
JSON). Progress lines go to stderr; the JSON (``--out``) is rewritten after every mode, so a
device call killed part-way keeps what ran. ``--timeout`` bounds one mode (its process is
killed), ``--budget-s`` the whole invocation (no mode starts after it, and each mode's timeout
is cut to what is left; a mode not run is a row with ``error: "budget"``). At the end a markdown
table of every row goes to stdout.

Per mode: the median ms per step over ``--steps`` steps after ``--warmup``, tokens/s, MFU, peak
allocated memory, the first step's time (compile included), the bytes autograd saves per layer
(eager modes: every saved tensor's storage once, parameters left out), and, while the timed
steps run, the SM clock (median MHz) and the board power (mean W) sampled by ``coda bench``'s
sampler (``coda_spec.bench.timing.open_sampler``: NVML, else ``nvidia-smi -lms 50``, else none:
reported as null, never guessed); J/step is mean W x median s per step, as ``coda bench``'s
energy per call. With ``--profile``, a torch.profiler breakdown of one step by kernel family
(:func:`family`): GEMM, attention, coda's own host/finalize kernels, copy/cast/fill, other; ms
per step each, and ``total`` (the sum of kernel time; the step's ms less it is the GPU's idle
time); and under ``copies`` the copy/cast/fill kernels by launch site (:func:`copy_sites`).
A compiled mode's row counts the FX graphs in inductor's cache before its first step
(``inductor_cache_entries``): more than 0, the table marks that first step "(warm)", as it may
have loaded earlier compiles instead of compiling.

MFU is model FLOPs per step (:func:`model_flops`, the same count for every mode, whatever a mode
recomputes) / step time / ``PEAK_TFLOPS`` (the H200's dense bf16 peak, 989.4 TFLOP/s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import warnings

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
# The other families' 1B-class configs (issue 35; random weights): name -> (transformers
# model_type, config, batch, sequence). Every mode serves them: coda through
# coda_spec.nn.from_hf (dispatching on model_type), Liger through its apply_liger_kernel_to_<type>.
FAMILY_SHAPES = {
    "qwen2-1.5b-2x4096": (
        "qwen2",
        {
            "vocab_size": 151936,
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "use_sliding_window": False,
        },
        2,
        4096,
    ),
    "qwen3-1.7b-2x4096": (
        "qwen3",
        {
            "vocab_size": 151936,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        2,
        4096,
    ),
    "gemma3-1b-2x4096": (
        "gemma3_text",
        {
            "vocab_size": 262144,
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "num_hidden_layers": 26,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "sliding_window": 512,
            "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        2,
        4096,
    ),
    "olmo2-1b-2x4096": (
        "olmo2",
        {
            "vocab_size": 100352,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
        },
        2,
        4096,
    ),
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
TABLES = ("old", "none")  # mode suffixes: coda@old reads --tuned-old, coda@none no table
GEMM_NAMES = ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas", "GemmSm90", "kernel_cutlass")
ATTN_NAMES = ("flash", "fmha", "attention", "sdpa")
# copies, casts and fills: torch's copy/fill kernels, the driver's memcpy/memset, and inductor
# kernels that fuse nothing else (``triton_poi_fused__to_copy_0``; one that also adds or
# normalises is "other")
COPY_NAMES = ("memcpy", "memset", "copy_kernel", "fillfunctor", "catarraybatchedcopy")
_COPY_OPS = r"(?:_to_copy|copy|fill|zeros|full|clone|_unsafe_view|view|cat)"
COPY_TRITON = re.compile(rf"triton_\w+?_fused_{_COPY_OPS}(?:_{_COPY_OPS})*_\d+")
FAMILIES = ("GEMM", "attention", "coda host/finalize", "copy/cast/fill", "other")
PEAK_TFLOPS = 989.4  # H200 SXM dense bf16 tensor-core peak (NVIDIA's datasheet, no sparsity)


def model_flops(cfg, batch: int, seq: int) -> float:
    """Model FLOPs of one forward + backward step: ``6 * P * T + 6 * L * B * S^2 * NH * HD``.

    * ``P``: the parameters that multiply activations: per layer Q, K, V, O
      (``D * (NH + 2 NKV) * HD + NH * HD * D``), gate, up and down (``3 * D * F``), times
      ``L`` layers, plus the LM head ``V * D`` (tied or not: the head is a GEMM either way; the
      embedding lookup is not). ``T = B * S`` tokens. Each parameter costs 2 FLOPs per token
      forward and 4 backward (dgrad + wgrad): ``6 * P * T``.
    * Attention: ``QK^T`` and ``PV`` are ``2 * 2 * B * S^2 * NH * HD`` forward, halved by the
      causal mask; the backward is twice the forward: ``3 * 2 * B * S^2 * NH * HD`` per layer. A
      sliding-window layer (``config.layer_types``: Gemma-3's local layers) counts the keys its
      window lets each query see instead of the causal half.

    Llama-3.2-1B at 2 x 4096: 6 * 1.2358e9 * 8192 = 60.74 TFLOP of projections (transformers'
    GEMM kernels, issue 32's "60.7 TFLOP") + 6.60 TFLOP of attention = 67.34 TFLOP, the anchors'
    67.3. It is the work the model needs, the same for every mode: coda's fourth vocabulary GEMM
    (the LM head's logits recomputed in the backward, 4.3 TFLOP) and recompute modes' extra GEMM
    are not counted, so MFU compares modes by their step time alone. The optimizer (``adamw``)
    adds no matmul FLOPs."""
    d, f, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or d // nh
    per_layer = d * (nh + 2 * nkv) * hd + nh * hd * d + 3 * d * f
    params = layers * per_layer + cfg.vocab_size * d
    tokens = batch * seq
    # keys a causal query sees, summed over the sequence: S^2 / 2 (the anchors' count), or, on a
    # sliding-window layer (Gemma-3's layer_types), at most the window's
    window = getattr(cfg, "sliding_window", None)
    kinds = getattr(cfg, "layer_types", None) or ["full_attention"] * layers
    full = seq * seq / 2
    slid = (
        full if not window or window >= seq else window * (window + 1) / 2 + (seq - window) * window
    )
    keys = sum(slid if k == "sliding_attention" else full for k in kinds[:layers])
    attention = 12 * batch * keys * nh * hd
    return float(6 * params * tokens + attention)


def split_mode(mode: str) -> tuple[str, str | None]:
    """``"coda@old"`` -> ("coda", "old"); ValueError for an unknown mode or table, or a table
    on a mode that loads no chains."""
    base, _, table = mode.partition("@")
    if base not in MODES:
        raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
    if not table:
        return base, None
    if not base.startswith("coda"):
        raise ValueError(f"mode {mode!r}: a tune table (@{table}) only applies to the coda modes")
    if table not in TABLES:
        raise ValueError(
            f"mode {mode!r}: unknown table @{table}; @old loads --tuned-old, @none no table"
        )
    return base, table


def tuned_arg(table: str | None, tuned: str | None, tuned_old: str | None):
    """What ``coda_spec.load``'s ``tuned=`` gets for a mode's table: None (the search path),
    False (``none``: no table) or a path."""
    path = {None: tuned, "old": tuned_old, "none": "none"}[table]
    if table == "old" and not path:
        raise ValueError("a mode with @old needs --tuned-old PATH (the other tune table)")
    if path is None:
        return None
    return False if path == "none" else path


def batch_seq(shape: str) -> tuple[int, int]:
    """A shape's (batch, sequence)."""
    got = SHAPES.get(shape) or FAMILY_SHAPES[shape][1:]
    return got[-2], got[-1]


def config(shape: str, layers: int | None):
    """The transformers config of ``shape``: the Llama's (``SHAPES``) or another family's
    (``FAMILY_SHAPES``, by its ``model_type``); ``layers`` overrides the layer count."""
    from transformers import AutoConfig, LlamaConfig

    if shape in FAMILY_SHAPES:
        kind, cfg, _, _ = FAMILY_SHAPES[shape]
        cfg = {**cfg, **({"num_hidden_layers": layers} if layers else {})}
        return AutoConfig.for_model(kind, **cfg, attn_implementation="sdpa")
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
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg)
    # every rotary embedding's frequency buffers (Gemma-3 has one pair per layer type)
    keep = {
        (mod, name): buf.clone()
        for mod in model.modules()
        for name, buf in mod.named_buffers(recurse=False)
        if name.endswith("inv_freq")
    }
    model = model.to(torch.bfloat16)
    for (mod, name), buf in keep.items():
        setattr(mod, name, buf)
    return model


def make(mode: str, cfg, builds: str, tuned=None):
    """(the model whose parameters train, the step's loss function); ``tuned``: the coda
    modes' tune table (:func:`tuned_arg`)."""
    import importlib

    import torch

    kind = cfg.model_type
    if mode == "liger":
        import liger_kernel.transformers as liger

        getattr(liger, f"apply_liger_kernel_to_{kind}")()
    if mode == "hf-compile-nomask":  # full-attention layers only: a sliding window keeps its mask
        folder = {"gemma3_text": "gemma3"}.get(kind, kind)
        modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
        modeling.create_causal_mask = lambda *a, **k: None
    hf = hf_bf16(cfg)
    if mode.startswith("coda"):
        from coda_spec.nn import from_hf

        extra = {"recompute": True} if "recompute" in mode else {}
        model = from_hf(hf, builds=builds, tuned=tuned, **extra)
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
        graphed = torch.compile(fn, fullgraph=True, mode="reduce-overhead")

        def fn(ids, labels):  # each call a new step: CUDA-graph trees may reuse its memory
            torch.compiler.cudagraph_mark_step_begin()
            return graphed(ids, labels)

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
    """The kernel family (``FAMILIES``) of a CUDA kernel's name; ``coda_symbols``: the kernel
    names of the coda chains' host and finalize steps."""
    low = name.lower()
    if any(s in name for s in coda_symbols):
        return "coda host/finalize"
    if any(k in low for k in ATTN_NAMES):
        return "attention"
    if any(k.lower() in low for k in GEMM_NAMES):
        return "GEMM"
    if any(k in low for k in COPY_NAMES) or COPY_TRITON.fullmatch(name):
        return "copy/cast/fill"
    return "other"


def coda_symbols(model) -> set:
    """The kernel names of a coda model's host and finalize steps (empty for other models)."""
    symbols: set = set()
    for op in getattr(model, "chains", {}).values():
        for st in op.chain.manifest.all_steps:
            if st.kind != "kernel" and getattr(st, "launch", None) is not None:
                symbols.add(st.launch.cubin.name)
    return symbols


def summary(times_ms: list, flops: float, tokens: int, mhz=None, watts=None) -> dict:
    """A mode's figures from its step times: median ms, tokens/s, MFU against PEAK_TFLOPS,
    and with telemetry the median SM clock, mean power and J/step (mean W x median s)."""
    ms = statistics.median(times_ms)
    return {
        "ms": round(ms, 2),
        "ms_all": [round(t, 2) for t in times_ms],
        "tokens_per_s": round(tokens / ms * 1e3),
        "tflop_per_step": round(flops / 1e12, 2),
        "mfu": round(flops / (ms / 1e3) / (PEAK_TFLOPS * 1e12), 4),
        "sm_mhz": None if mhz is None else round(mhz),
        "watts": None if watts is None else round(watts, 1),
        "j_per_step": None if watts is None else round(watts * ms / 1e3, 2),
    }


def open_telemetry():
    """``coda bench``'s sampler for the current device (NVML, nvidia-smi, else a null one that
    reports nothing); says on stderr when there is none."""
    from coda_spec.bench.driver import device_ids
    from coda_spec.bench.timing import open_sampler

    sampler = open_sampler(*device_ids())
    if not sampler.source:
        print(
            "[train_step] no telemetry (no pynvml, no nvidia-smi answering): SM clock and "
            "power are reported as null",
            file=sys.stderr,
            flush=True,
        )
    return sampler


def timed_steps(one_step, steps: int, sampler, sync=None) -> tuple[list, object, object, object]:
    """``steps`` synchronized steps' ms, the median SM clock and mean power sampled while they
    ran (None where the board gives no reading), and the last step's result. ``sync``: waits
    for the device (default ``torch.cuda.synchronize``; tests pass their own)."""
    from coda_spec.bench.timing import telemetry

    if sync is None:
        import torch

        sync = torch.cuda.synchronize

    if steps < 1:
        raise ValueError(f"--steps {steps}: time at least one step")
    times, last = [], None
    sampler.start()
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        last = one_step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    mhz, watts = telemetry(sampler.stop(), 0.0)
    return times, mhz, watts, last


def chain_variants(model, tokens: int) -> dict:
    """``{chain: {kernel step: config}}`` each coda chain runs at M = ``tokens`` ({} for the
    other models)."""
    out = {}
    for op in getattr(model, "chains", {}).values():
        chain = op.chain
        sizes = {**chain.manifest.static, chain.manifest.dynamic: tokens}
        out[chain.name] = chain.selected_variants(sizes)
    return out


def setup(args):
    """The child's model, its step function and its inputs:
    ``(cfg, model, one_step, (ids, labels), params, tuned)``."""
    import torch

    base, table = split_mode(args.mode)
    tuned = tuned_arg(table, args.tuned, args.tuned_old) if base.startswith("coda") else None
    cfg = config(args.shape, args.layers)
    b, s = batch_seq(args.shape)
    model, fn = make(base, cfg, args.builds, tuned)
    params = list(model.parameters())
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (b, s), device="cuda", generator=g)
    labels = ids.clone()
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

    return cfg, model, fn, one_step, (ids, labels), params, tuned


def need_gpu(tool: str) -> None:
    """Leave (exit 1, one line) when no CUDA GPU is here: a measurement that cannot run."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(f"{tool}: no CUDA GPU here (torch.cuda.is_available() is False)")


def inductor_cache_entries() -> int | None:
    """The FX graphs in inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``, else torch's
    default folder) before a compiled mode's first step: 0 means that step compiled cold, more
    that it may have loaded earlier compiles (device_run.sh compile-warm); None when torch names
    no such folder."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        return None
    root = os.path.join(cache_dir(), "fxgraph")
    return sum(len(files) for _, _, files in os.walk(root)) if os.path.isdir(root) else 0


def child(args) -> dict:
    import torch

    need_gpu("train_step")
    compiled = "compile" in args.mode or "graphs" in args.mode
    cache = inductor_cache_entries() if compiled else None
    with warnings.catch_warnings(record=True) as said:  # a stale tune table says so at load
        warnings.simplefilter("always")
        cfg, model, fn, one_step, (ids, labels), params, tuned = setup(args)
    b, s = batch_seq(args.shape)
    saved = None
    if split_mode(args.mode)[0] in ("hf", "liger", "coda", "coda-recompute"):
        saved = saved_bytes(fn, ids, labels, params)
    t0 = time.perf_counter()
    one_step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(args.warmup):
        one_step()
    torch.cuda.synchronize()
    memory = phases(fn, ids, labels, params)
    torch.cuda.reset_peak_memory_stats()
    sampler = open_telemetry()
    try:
        times, mhz, watts, loss = timed_steps(one_step, args.steps, sampler)
    finally:
        sampler.close()
    row = {
        "mode": args.mode,
        "shape": args.shape,
        "kind": args.kind,
        **summary(times, model_flops(cfg, b, s), b * s, mhz, watts),
        "telemetry": sampler.source,
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "first_step_s": round(first, 1),
        "inductor_cache_entries": cache,
        "saved_mib_per_layer": None
        if saved is None
        else round(saved / cfg.num_hidden_layers / 2**20, 1),
        "loss": loss.item(),
        "memory_gib": memory,
    }
    if args.mode.startswith("coda"):
        row["tuned"] = "search path" if tuned is None else ("none" if tuned is False else tuned)
        row["variants"] = chain_variants(model, b * s)
        row["load_warnings"] = sorted({str(w.message) for w in said})
    if args.profile:
        row["breakdown_ms"], row["copies"] = profile(one_step, model, args)
    return row


def profile(one_step, model, args) -> tuple[dict, list]:
    """Kernel ms of one step by family (:func:`family`) with their ``total``, and the
    copy/cast/fill kernels of another step by what launched them (:func:`copy_sites`): two
    steps, since a profile of CPU ops also shows the runtime's ranges as GPU time."""
    import torch

    symbols = coda_symbols(model)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        one_step()
        torch.cuda.synchronize()
    out: dict = {}
    for ev in prof.key_averages():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        fam = family(ev.key, symbols)
        out[fam] = out.get(fam, 0.0) + ev.device_time_total / 1e3
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
        one_step()
        torch.cuda.synchronize()
    return breakdown(out), copy_sites(prof.events(), symbols)


def copy_sites(events, symbols: set, top: int = 30) -> list:
    """The step's copy/cast/fill kernels grouped by their launch site: the CPU op chain that
    launched them (innermost last), its input shapes and the nearest Python frame of coda,
    transformers or torch.nn.functional; ``[{site, kernel, calls, ms}]``, most ms first."""
    sites: dict = {}
    for ev in events:
        for k in getattr(ev, "kernels", None) or ():
            if family(k.name, symbols) != "copy/cast/fill":
                continue
            chain, frames, up = [], [], ev
            while up is not None:
                if len(chain) < 4:
                    chain.append(up.name)
                frames += up.stack or ()
                up = up.cpu_parent
            frame = next((f for f in frames if "coda_spec" in f or "transformers" in f), "")
            key = (" < ".join(chain), str(ev.input_shapes)[:120], frame, k.name[:70])
            calls, us = sites.get(key, (0, 0.0))
            sites[key] = (calls + 1, us + k.duration)
    rows = [
        {"site": a, "shapes": b, "frame": c, "kernel": d, "calls": n, "ms": round(us / 1e3, 3)}
        for (a, b, c, d), (n, us) in sites.items()
    ]
    return sorted(rows, key=lambda r: -r["ms"])[:top]


def breakdown(ms_by_family: dict) -> dict:
    """Every family (``FAMILIES``, 0.0 where none ran) in table order, rounded, then ``total``."""
    out = {f: round(ms_by_family.get(f, 0.0), 2) for f in FAMILIES}
    out["total"] = round(sum(ms_by_family.values()), 2)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated; MODE@old, @none")
    ap.add_argument("--shape", default="1b-2x4096", choices=sorted({**SHAPES, **FAMILY_SHAPES}))
    ap.add_argument("--shapes", default=None, help="comma-separated shapes (overrides --shape)")
    ap.add_argument("--kind", default="fwdbwd", choices=["fwdbwd", "adamw"])
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--builds", default="build")
    ap.add_argument("--tuned", default=None, help="the coda modes' tune file/dir, or none")
    ap.add_argument("--tuned-old", default=None, help="the table of modes with the @old suffix")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per mode")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for the whole run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    return ap


def plan_runs(args) -> list[tuple[str, str]]:
    """(shape, mode) in run order, every argument checked first (ValueError: what is wrong)."""
    shapes = [x.strip() for x in (args.shapes or args.shape).split(",") if x.strip()]
    bad = [x for x in shapes if x not in SHAPES and x not in FAMILY_SHAPES]
    if bad or not shapes:
        known = ", ".join(sorted({**SHAPES, **FAMILY_SHAPES}))
        raise ValueError(f"unknown shape(s) {', '.join(bad)}; shapes: {known}")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes:
        raise ValueError("--modes is empty")
    for m in modes:
        base, table = split_mode(m)
        if base.startswith("coda"):
            path = tuned_arg(table, args.tuned, args.tuned_old)
            if path and not os.path.exists(path):
                raise ValueError(f"mode {m}: no tune file or directory {path}")
    return [(shape, mode) for shape in shapes for mode in modes]


def child_argv(argv: list, mode: str, shape: str, script: str = __file__) -> list:
    """A child's command line (``script``'s): the parent's arguments, then its mode and shape
    (argparse keeps the last of a repeated option)."""
    return [sys.executable, os.path.abspath(script), *argv, "--child", mode, "--shape", shape]


def say(msg: str) -> None:
    print(f"[train_step] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    if args.child:
        args.mode = args.child
        print(json.dumps(child(args)))
        return 0
    try:
        runs = plan_runs(args)
    except ValueError as e:
        ap.error(str(e))
    # `timeout` (a device script's) sends SIGTERM: leave through SystemExit, so subprocess.run
    # kills the running mode's process instead of leaving it on the GPU
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    end = None if args.budget_s is None else time.monotonic() + args.budget_s
    rows: list = []
    for i, (shape, mode) in enumerate(runs, 1):
        left = None if end is None else end - time.monotonic()
        if left is not None and left < 5:
            rows.append({"mode": mode, "shape": shape, "kind": args.kind, "error": "budget"})
            say(f"[{i}/{len(runs)}] {mode} {shape}: not run (--budget-s spent)")
        else:
            limit = args.timeout if left is None else max(1, min(args.timeout, int(left)))
            say(f"[{i}/{len(runs)}] {mode} {shape} {args.kind} (timeout {limit} s) ...")
            t0 = time.monotonic()
            row = run_child(mode, child_argv(sys.argv[1:], mode, shape), limit)
            row.setdefault("shape", shape)
            row.setdefault("kind", args.kind)
            rows.append(row)
            took = time.monotonic() - t0
            if "error" in row:
                say(f"  failed after {took:.0f} s: {row['error']}")
            else:
                say(f"  {row['ms']} ms, {row['peak_gib']} GiB, {took:.0f} s")
        write(args.out, rows, sys.argv[1:])  # after every mode: a later kill loses nothing
    print(table(rows))
    return status(failures(rows), say)


def failures(rows: list) -> list[str]:
    """``MODE SHAPE: why`` of every row that holds no measurement (a failed, timed-out or
    budget-cut mode); empty when every requested measurement was made."""
    out = []
    for r in rows:
        if "error" in r:
            err = r["error"] if isinstance(r["error"], str) else " / ".join(r["error"])
            where = " ".join(x for x in (r["mode"], r.get("shape")) if x)
            out.append(f"{where}: {err}")
    return out


def status(failed: list[str], tell) -> int:
    """The exit status of a run (benchmarks' rule: 1 when any requested measurement failed,
    after the results are written), each failure told through ``tell``."""
    for f in failed:
        tell(f"failed: {f}")
    if failed:
        tell(f"{len(failed)} measurement(s) failed: exit 1")
    return 1 if failed else 0


def write(path: str, rows: list, argv: list) -> None:
    doc = {"rows": rows, "argv": argv, "peak_tflops": PEAK_TFLOPS, "flops": "model_flops"}
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def _fmt(x, spec: str = "") -> str:
    return "" if x is None else format(x, spec)


def table(rows: list) -> str:
    """The rows as a markdown table (a failed mode: its error in the ms column)."""
    head = ["shape", "mode", "ms", "tokens/s", "MFU", "peak GiB", "SM MHz", "W", "J/step"]
    head += [*FAMILIES, "first step s"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        if "error" in r:
            err = r["error"] if isinstance(r["error"], str) else " / ".join(r["error"])
            cells = [r.get("shape", ""), r["mode"], f"failed: {err}"[:120]]
            cells += [""] * (len(head) - len(cells))
        else:
            mfu = None if r.get("mfu") is None else 100 * r["mfu"]
            fams = r.get("breakdown_ms") or {}
            cells = [
                r["shape"],
                r["mode"],
                _fmt(r["ms"], ".1f"),
                _fmt(r["tokens_per_s"], ","),
                _fmt(mfu, ".1f") + ("%" if mfu is not None else ""),
                _fmt(r["peak_gib"], ".2f"),
                _fmt(r.get("sm_mhz")),
                _fmt(r.get("watts"), ".0f"),
                _fmt(r.get("j_per_step"), ".1f"),
                *(_fmt(fams.get(f), ".1f") for f in FAMILIES),
                _fmt(r.get("first_step_s")) + (" (warm)" * bool(r.get("inductor_cache_entries"))),
            ]
        out.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(out)


def run_child(mode: str, cmd: list, timeout: int) -> dict:
    """One mode's row, from its own process: its last stdout line, or the error (the last
    lines of its stderr)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"timed out after {timeout} s"}
    last = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    try:
        return json.loads(last[0]) if last else {"mode": mode, "error": _tail(done.stderr)}
    except json.JSONDecodeError:
        return {"mode": mode, "error": _tail(done.stdout + done.stderr)}


def _tail(text: str) -> list:
    return [x for x in text.strip().splitlines() if "DEBUG" not in x][-5:] or ["no output"]


if __name__ == "__main__":
    sys.exit(main())
