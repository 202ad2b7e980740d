"""What one call owns, and the loop that runs its steps.

A :class:`Call` holds one call's device and stream, dim sizes, tensors (``env``) and the poison
flag. It is made per call and passed down, never stored on the chain: two threads, or a verify
run interleaved with a training call, cannot see each other's state.

:func:`run_steps` runs steps in order, each inside an NVTX range (nsys) and, while torch's
profiler records, a ``record_function`` range, named ``<chain>/<step> (<spec file>:<line>)``.
"""

from __future__ import annotations

import torch

_NVTX = torch._C._nvtx if hasattr(torch._C, "_nvtx") else None  # absent from CPU builds


class Call:
    """``cache``: the call may keep what it computes for later calls (RoPE turns tables); a
    torch op's call may not (CUDA-graph trees require every allocation in their pool to be an
    output). ``into``: {gradient: tensor} that the gradient's accumulating kernel adds into in
    place (``Chain.backward(accumulate=...)``)."""

    __slots__ = ("device", "stream", "sizes", "env", "poison", "nvtx", "cache", "into")

    def __init__(
        self,
        device,
        sizes: dict,
        env: dict,
        poison: bool = False,
        cache: bool = True,
        into: dict | None = None,
    ):
        self.device, self.sizes, self.env, self.poison = device, sizes, env, poison
        self.cache, self.into = cache, into or {}
        cuda = device.type == "cuda"
        self.stream = torch._C._cuda_getCurrentRawStream(device.index) if cuda else 0
        self.nvtx = cuda and _NVTX is not None


def alloc(call: Call, shape, dtype) -> torch.Tensor:
    """A buffer a kernel writes: uninitialised, or NaN when the call poisons (verify)."""
    if call.poison:
        return torch.full(shape, float("nan"), dtype=dtype, device=call.device)
    return torch.empty(shape, dtype=dtype, device=call.device)


def run_steps(steps, call: Call, ranges: dict, run_one) -> None:
    """``run_one(step, call)`` for each step, inside its named ranges (``ranges``: step name ->
    range name)."""
    profiling = torch.autograd._profiler_enabled()
    for step in steps:
        name = ranges[step.name]
        if call.nvtx:
            _NVTX.rangePushA(name)
        scope = torch.profiler.record_function(name) if profiling else None
        if scope is not None:
            scope.__enter__()
        try:
            run_one(step, call)
        finally:
            if scope is not None:
                scope.__exit__(None, None, None)
            if call.nvtx:
                _NVTX.rangePop()
