"""Finalize ops: fold a reduction's per-tile partials into a chain tensor (runs between kernels).

Contract
--------
:data:`TABLE` is the one home of what each finalize op is: one frozen :class:`FinalizeOp` row per
op, holding its name, which reductions' partials it may fold, how those partials combine across
tiles, its value over nothing, whether it takes ``n`` and ``eps``, and its arithmetic twice, as
torch (the reference) and as Triton text. Everything that knows an op reads its row: the schema
(the op names), ``analyze_steps`` (which reduction an op may fold, where ``n`` and ``eps`` apply),
the primitives' reductions (``primitives/_reduce.py``: a partial's fold), the reference
(:func:`fold`), the generated finalize kernels (``lower/finalize_kernel.py``) and host kernels
that fold a finalize (``lower/host_kernel.py``). ``tests/test_finalize_table.py`` checks that
each of them agrees with the row, empty folds included. Nothing here imports torch (the reference
passes its ``rt``) or triton (the Triton text is text).

Semantics
---------
In a built chain a finalize is a compiled Triton kernel (``coda_spec/lower/finalize_kernel.py``,
or folded into the host kernel that wrote the partial) over an (M, n_tiles) or (m_tiles, N) fp32
buffer: the tiles combine with the row's ``fold``, then the op runs on the total. In the
reference the partial already holds the exact reduction, so folding is the identity plus the
op's arithmetic. Results are fp32. An op that ``needs_n`` runs on the mean ``total / n``, not on
the total: ``n`` defaults to the reduced extent (the row width, the group size, or M for column
reductions); CODA's zdz divides a row dot over the next GEMM's width by the norm width D, so it
sets ``n: D`` explicitly.

Reductions over nothing (M = 0 rows; docs/runtime.md documents the rule): the total is the
fold's identity (``FinalizeOp.empty``: a sum is 0, max and logsumexp are -inf; :data:`EMPTY_FOLD`
by fold), a mean over nothing is 0 (not 0/0, :func:`mean_of`), so rsqrt_mean is rsqrt(eps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType


def _same(rt, x, eps):
    return x


@dataclass(frozen=True)
class FinalizeOp:
    """One finalize op. ``torch`` and ``triton`` are the op on its input: the folded total, or
    the mean (``total / n``) when ``needs_n``."""

    name: str
    result: str  # what it computes, in words (docs/spec-language.md's table says the same)
    reads: tuple  # the reductions (partial kinds) whose partials it may fold
    fold: str  # how those per-tile partials combine: sum | max | logsumexp
    empty: float  # the folded total over nothing (no rows, no tiles): the fold's identity
    needs_n: bool = False  # runs on total / n (0 over nothing) instead of the total
    needs_eps: bool = False
    torch: Callable = _same  # (rt, x, eps) -> tensor: the reference arithmetic
    triton: str = "{x}"  # the same as Triton text over {x} and {eps} (fp32)


_SUMS = ("sum", "sumsq", "dot")
_INF = float("inf")

TABLE = (
    FinalizeOp("sum", "the sum", _SUMS, "sum", 0.0),
    FinalizeOp("mean", "sum / n", _SUMS, "sum", 0.0, needs_n=True),
    FinalizeOp(
        "rsqrt_mean",
        "1 / sqrt(sum / n + eps)",
        _SUMS,
        "sum",
        0.0,
        needs_n=True,
        needs_eps=True,
        torch=lambda rt, x, eps: rt.torch.rsqrt(x + eps),
        triton="1.0 / tl.sqrt_rn({x} + {eps})",
    ),
    FinalizeOp("logsumexp", "log-sum-exp across tiles", ("logsumexp",), "logsumexp", -_INF),
    FinalizeOp("max", "max across tiles", ("max", "absmax"), "max", -_INF),
)
OPS = tuple(o.name for o in TABLE)
NEEDS_N = tuple(o.name for o in TABLE if o.needs_n)
NEEDS_EPS = tuple(o.name for o in TABLE if o.needs_eps)
# partial fold -> the ops that may read it, and its identity (a fold over nothing)
FOLD_OPS = MappingProxyType(
    {f: tuple(o.name for o in TABLE if o.fold == f) for f in dict.fromkeys(o.fold for o in TABLE)}
)
EMPTY_FOLD = MappingProxyType({o.fold: o.empty for o in TABLE})
REDUCTIONS = tuple(dict.fromkeys(k for o in TABLE for k in o.reads))  # what a finalize folds


def finalize_op(name: str) -> FinalizeOp:
    """The row of op ``name``; ValueError naming the known ops otherwise."""
    row = next((o for o in TABLE if o.name == name), None)
    if row is None:
        raise ValueError(f"unknown finalize op {name!r} (one of {', '.join(OPS)})")
    return row


def ops_folding(kind: str) -> tuple:
    """The finalize ops that may fold a ``kind`` reduction's partials (the first is its fold)."""
    return tuple(o.name for o in TABLE if kind in o.reads)


def partial_fold(kind: str) -> str:
    """How the per-tile partials of a ``kind`` reduction combine (sum | max | logsumexp)."""
    return next(o.fold for o in TABLE if kind in o.reads)


def fold(rt, op: str, partial, n: int, eps: float | None, kind: str):
    """Reference fold. ``partial`` is [M, 1], [M, G] (grouped) or [1, N]; returns the tensor."""
    row = finalize_op(op)
    x = partial
    if kind == "rowpart" and x.shape[1] == 1:
        x = x.reshape(-1)
    elif kind == "colpart":
        x = x.reshape(-1)
    if row.needs_n:
        x = mean_of(x, n)
    return row.torch(rt, x, eps)


def mean_of(total, n: int):
    """``total / n``; a mean over nothing (n = 0: a column reduction over M = 0 rows) is 0."""
    return total / n if n else total.new_zeros(total.shape)
