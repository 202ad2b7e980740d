"""The replay ruler: each chain's part of a Llama step replayed as the step runs it, at the cap.

``benchmarks/step_gemms.py --predict replay`` (or ``all``) times coda's GEMM kernels this way
beside the sustained and isolated rulers. The sustained ruler streams one kernel alone for 0.5 s:
at the 700 W cap a pure GEMM stream runs at 1290-1530 MHz, while the step, whose attention and
host passes draw less power per second, holds its GEMMs near 1560-1630 MHz, so that ruler
over-predicts the step's GEMM time (docs/benchmarks.md, "The step at the power cap"). The
replay ruler keeps the step's mix instead, one role at a time (``coda_spec.nn.llama.CHAINS``):

* ``llama3_first``: the chain's forward and backward (the embedding is left out);
* ``llama3_layer`` and ``llama3_last_mlp``: SDPA over a ``qkv`` leaf (``nn.llama._attention``,
  as the model calls it) feeding the chain, then the backward of both, through autograd, as
  the model's layer runs;
* ``llama3_lm_head``: the model's ``_LMHead`` over its row chunks, forward and backward.

Each role is replayed back to back for ``sustain_s`` seconds (the clock settles at the cap),
then ``iters`` more replays run under torch.profiler; each coda GEMM kernel's time is its mean
over those calls. Inputs are drawn as ``coda bench`` draws them (``bench.driver.draw``) at the
step's M, incoming gradients are random; what a role computes is discarded. A role is a fresh
measurement of the kernels in their step's neighbourhood, not a piece of the timed step.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict


def _as_leaves(inputs: dict) -> dict:
    """The drawn inputs as leaves, floating ones requiring grad (as the model's weights and
    activations do; a chain input with no gradient gets ``None`` from the op)."""
    return {
        k: v.detach().requires_grad_(v.is_floating_point()) if hasattr(v, "detach") else v
        for k, v in inputs.items()
    }


def _backward(outs: list, seed: int):
    """Random incoming gradients for ``outs`` (the ones that require grad), made once."""
    import torch

    g = torch.Generator(device=outs[0].device).manual_seed(seed)
    diff = [t for t in outs if t.requires_grad]
    grads = [(torch.randn(t.shape, generator=g, device=t.device) * 1e-2).to(t.dtype) for t in diff]
    return lambda ts: torch.autograd.backward([t for t in ts if t.requires_grad], grads)


def _cleared(fn, leaves):
    """``fn``, then every leaf's ``.grad`` dropped, as a training step's ``grad = None`` does
    (a replay that accumulated into ``.grad`` would add a kernel per weight the step has not)."""

    def run():
        fn()
        for t in leaves:
            if hasattr(t, "grad"):
                t.grad = None

    return run


def role_fns(ops: dict, shape, b: int, s: int, inputs: dict) -> dict:
    """``{role: fn}``: ``fn()`` replays that role's forward and backward once. ``ops``: the
    model's chain ops (``nn.llama.chain_ops``); ``inputs``: ``{role: drawn inputs at M = b*s}``."""
    import torch

    from coda_spec.nn.llama import _attention, _LMHead, lm_head_chunks

    m = b * s
    fns, made = {}, []

    def _leaves(drawn: dict) -> dict:
        got = _as_leaves(drawn)
        made.extend(got.values())
        return got

    if "llama3_first" in ops:
        op, x = ops["llama3_first"], _leaves(inputs["llama3_first"])
        back = _backward([op(**x)["qkv"]], 1)
        fns["llama3_first"] = lambda op=op, x=x, back=back: back([op(**x)["qkv"]])
    for role, outs in (("llama3_layer", ("x2", "qkv")), ("llama3_last_mlp", ("x2",))):
        if role not in ops:
            continue
        op, x = ops[role], _leaves(inputs[role])
        width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
        qkv = (torch.randn(m, width, device=x["y"].device) * 0.5).to(x["y"].dtype)
        made.append(qkv.requires_grad_(True))

        def run(op=op, x=x, qkv=qkv, outs=outs):
            got = op(**{**x, "y": _attention(qkv, shape, b, s)})
            return [got[n] for n in outs]

        back = _backward(run(), 2)
        fns[role] = lambda run=run, back=back: back(run())
    if "llama3_lm_head" in ops:
        head, x = ops["llama3_lm_head"], _leaves(inputs["llama3_lm_head"])
        chunks = lm_head_chunks(m, shape.vocab)
        names = ("x2", "h2", "r2", "gamma_f", "w_lm", "target", "row_w")
        no_grad = ("h2", "r2", "row_w")  # the model passes these without grad
        args = [x[n].detach() if n in no_grad else x[n] for n in names]
        fns["llama3_lm_head"] = lambda: _LMHead.apply(head, chunks, *args).backward()
        # (the last role: nothing rebinds what this closure reads)
    return {role: _cleared(fn, made) for role, fn in fns.items()}


def time_roles(fns: dict, resolve, sustain_s: float, iters: int, sampler, say) -> dict:
    """``{"chain/step": {"replay": ms per call, "replay_mhz": SM clock}}``: each role replayed
    for ``sustain_s`` s, then ``iters`` replays profiled; ``resolve(kernel name)`` names a coda
    GEMM kernel (``step_gemms.coda_resolver``), None for any other kernel."""
    import torch

    from coda_spec.bench.timing import telemetry

    out = {}
    cuda = torch.autograd.DeviceType.CUDA
    for role, fn in fns.items():
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        sampler.start()  # the clock over the stream and the profiled replays
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < sustain_s:
            fn()
            n += 1
            if n % 4 == 0:  # keep the CPU at most a few replays ahead
                torch.cuda.synchronize()
        acts = [torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
        mhz, _ = telemetry(sampler.stop(), 0.0)
        times = defaultdict(list)
        for ev in prof.events():
            if ev.device_type == cuda and (r := resolve(ev.name)) is not None:
                times[f"{r['chain']}/{r['step']}"].append(ev.time_range.elapsed_us())
        say(f"replay {role}: {n} replays in {sustain_s} s, {len(times)} kernels, SM {mhz} MHz")
        for k, us in times.items():
            out[k] = {"replay": statistics.mean(us) / 1e3, "replay_mhz": mhz}
    return out
