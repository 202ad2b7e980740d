"""Finalize ops: fold a reduction's per-tile partials into a chain tensor (runs between kernels).

In a built chain a finalize is a compiled Triton kernel (``coda_spec/lower/finalize_kernel.py``,
or folded into the host kernel that wrote the partial) over an (M, n_tiles) or (m_tiles, N) fp32
buffer; in the reference the partial already holds the exact reduction, so
folding is the identity plus the op's arithmetic. Results are fp32.

====================  =================================  ======================================
op                    result                             may fold partials of
====================  =================================  ======================================
``sum``               sum                                sum, sumsq, dot
``mean``              sum / n                            sum, sumsq, dot
``rsqrt_mean``        1 / sqrt(sum / n + eps)            sum, sumsq, dot
``logsumexp``         log sum exp over tiles             logsumexp
``max``               max over tiles                     max, absmax
====================  =================================  ======================================

``n`` defaults to the reduced extent (the row width, the group size, or M for column
reductions); CODA's zdz divides a row dot over the next GEMM's width by the norm width D, so it
sets ``n: D`` explicitly.

Reductions over nothing (M = 0 rows; docs/runtime.md documents the rule): a sum is 0, a mean
is 0 (not 0/0), rsqrt_mean is therefore rsqrt(eps), max and logsumexp are -inf
(:data:`EMPTY_FOLD`; the generated finalize kernels and the tests' torch emulation follow it).
"""

from __future__ import annotations

OPS = ("sum", "mean", "rsqrt_mean", "logsumexp", "max")
NEEDS_N = ("mean", "rsqrt_mean")
EMPTY_FOLD = {"sum": 0.0, "max": float("-inf"), "logsumexp": float("-inf")}  # a fold over nothing


def fold(rt, op: str, partial, n: int, eps: float | None, kind: str):
    """Reference fold. ``partial`` is [M, 1], [M, G] (grouped) or [1, N]; returns the tensor."""
    x = partial
    if kind == "rowpart" and x.shape[1] == 1:
        x = x.reshape(-1)
    elif kind == "colpart":
        x = x.reshape(-1)
    if op in ("sum", "logsumexp", "max"):
        return x
    if op == "mean":
        return mean_of(x, n)
    if op == "rsqrt_mean":
        return rt.torch.rsqrt(mean_of(x, n) + eps)
    raise ValueError(op)


def mean_of(total, n: int):
    """``total / n``; a mean over nothing (n = 0: a column reduction over M = 0 rows) is 0."""
    return total / n if n else total.new_zeros(total.shape)
