"""The catalogue's baselines for ``coda bench``: plain PyTorch and Liger Kernel, per bundled spec.

Not part of the installed package: ``coda bench`` finds this folder in a source checkout
(``coda_spec.bench.baselines.catalogue``; ``$CODA_BASELINES`` points elsewhere) and imports it
as ``benchmarks.baselines``. The contract every baseline keeps -- :class:`Baseline`, ``prepare``,
``note`` -- is ``coda_spec.bench.baselines``'s; here is what the catalogue's baselines are.

* **eager** (``eager.EAGER``, keyed by spec name): one function per catalogue chain, written the
  way a practitioner writes the unfused chain: bf16 tensors, ``@``, ``F.rms_norm``, ``F.silu``,
  ``F.cross_entropy``, ``torch.logsumexp``, reductions upcast to fp32 as HF does; backward chains
  use ``torch.autograd.grad`` where a user would (norm, SwiGLU and CE backward) and the explicit
  formula where it is one line (RoPE's transpose). Every output of the spec is produced in the
  spec's layout. A spec outside the catalogue falls back to its ``equivalent_to``
  (``coda_spec.bench.baselines``).
* **liger** (``liger.LIGER``): cuBLAS GEMMs through ``torch.mm`` plus the Liger Kernel ops of
  the chain: fused add+RMSNorm, RMSNorm, SwiGLU on gate|up halves, RoPE, cross-entropy and
  fused-linear cross-entropy. ``None`` for a chain Liger has no op for (``f8_scale``), for a
  spec outside the catalogue, and when ``liger_kernel`` does not import. Liger's layouts are
  used where a Liger user would have them: gate|up as concatenated halves (the interleaved
  weight's rows permuted, ``liger.halves_index``) and RoPE in HF's rotate-half order
  (``liger.rotate_half_index``); ``prepare`` permutes weights or saved activations into them,
  and ``note`` names every layout difference and every spec output not produced.

Why these choices: the bench answers "how much faster than what people run today", so eager is
idiomatic rather than clever and Liger is given its best realistic setup: its RoPE kernel runs in
place on the q and k column blocks of the one fused QKV GEMM output (the same traffic as HF Llama
with separate q/k/v projections, whose outputs Liger rotates in place; ``LigerRopeFunction`` on
slices of a fused output would first copy them), and kernels that Liger runs in place on their
input (RoPE backward, cross-entropy) consume a private copy made by ``prepare`` instead of paying
a clone inside the timing: the first call returns the spec's values, later calls redo the same
work on the values the previous call left there. RoPE tables (cos/sin of pos * freqs) are built
in ``prepare`` for both baselines, as models build them once per forward and share them across
layers. The registries are read-only mappings of plain functions: no state lives here.
"""

from __future__ import annotations

from .eager import EAGER
from .liger import LIGER
from .liger import liger as liger_baseline  # not ``liger``: that name is the submodule

__all__ = ["EAGER", "LIGER", "liger_baseline"]
