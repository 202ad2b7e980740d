"""Torch glue a family runs between its chains, compiled by ``torch.compile`` on the GPU.

Some of a family's glue has no fused form in coda's chains yet (Qwen3's per-head q/k RMSNorm
and RoPE, OLMo-2's post-norms and full-width q/k norm, Gemma-3's attention-side norms; each
family's module docstring names its own). In eager torch each of its elementwise ops and row
reductions is a kernel of its own, forward and backward, with fp32 copies of whole rows between
them. :func:`compiled` hands such a function to ``torch.compile`` (inductor), which fuses it
into a few Triton kernels per direction, the first time it runs on CUDA tensors; the compiled
function is made once per glue function and kept (``functools.cache``).

* On the CPU the function runs as written: the fp64 parity tests check the math itself, with
  no compiler in the way.
* Inside a region ``torch.compile`` is already tracing (the ``coda-compile`` and graph modes of
  ``benchmarks/train_step.py``), the function runs as written too, so the outer compile traces
  and fuses it with the rest of the graph (no nested compile, no graph break).
* The first eager step pays the compile (seconds per function, once per process, in inductor's
  cache afterwards); shapes are static per call site, as a training step's are.

The fused kernels are inductor's, not coda's: a step's profile lists them as Triton kernels
under "other", and docs/training.md says per family which glue runs this way.
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def _compile(fn):
    return torch.compile(fn, dynamic=False)


def compiled(fn):
    """``fn`` (tensors first), compiled on CUDA tensors outside a compiled region; as it is
    elsewhere (the module docstring)."""

    @functools.wraps(fn)
    def run(first, *args, **kw):
        if not first.is_cuda or torch.compiler.is_compiling():
            return fn(first, *args, **kw)
        return _compile(fn)(first, *args, **kw)

    return run
