"""Finalize ops: fold a reduction's per-tile partials into a chain tensor (runs between kernels).

Contract
--------
:data:`TABLE` is the one home of what each finalize op is: one frozen :class:`FinalizeOp` row per
op, holding its name, which reductions' partials it may fold, how those partials combine across
tiles, its value over nothing, whether it takes ``n`` and ``eps``, and its arithmetic twice, as
torch (the reference) and as Triton text. Everything that knows an op reads its row: the schema
(the op names), ``check.steps`` (which reduction an op may fold, where ``n`` and ``eps`` apply),
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
by fold), a mean over nothing is 0 (not 0/0, :func:`mean_of`), so rsqrt_mean is rsqrt(eps) and
var is 0.

Per-tensor statistics (``over``)
--------------------------------
``over: rows`` (a ``reduce_row`` partial) or ``over: cols`` (a ``reduce_col`` partial) folds the
partial over the other axis too, every tile of every row: the result is one ``[]`` fp32 scalar
(an fp8 quantisation's per-tensor amax is ``{finalize: max, of: amax_part, over: rows}``). Any
op may take it; ``n`` then defaults to every element, rows x width (:func:`default_n`). The
fold is the op's own fold over all partial entries, so over nothing it is the fold's identity
(-inf for max). The generated kernel is ONE program looping over the flattened buffer in a
fixed order (:data:`OVER` kernels: no atomics, so the result is reproducible bit for bit); a
grouped partial has no ``over`` (its [M, G] is per head).

Two partials (``var``)
----------------------
An op with a ``second`` reads a second partial, named by the step key of that name and of that
reduction kind, beside ``of``: ``{finalize: var, of: s, sumsq: ss, as: v}`` is the population
variance ``max(E[x^2] - E[x]^2, 0)`` from a row's ``sum`` and ``sumsq`` partials, with the
same ``n``. Both partials come from one step (so one variant, one tile count, one layout), and
its text is over ``{x}`` (the mean of ``of``) and ``{x2}`` (the mean of the second).

Accuracy of ``var`` (why not Chan's (count, mean, M2) partials): a partial is one fp32 value
per tile, so the pair a Welford/Chan combine needs would be a multi-value partial the reduction
machinery does not have. E[x^2] - E[x]^2 instead has an absolute error of about
``(k + 3) * u * E[x^2]`` (u = 2^-24, k the summands along the fold: the tile's columns plus the
tiles), i.e. a relative error of ``(k + 3) * u * (1 + mean^2 / var)``: exact enough for
LayerNorm where |mean| is at most a few std, poor when |mean| >> std (at mean/std = 100 and
k = 4096 the variance carries about 2.4% error). Rounding can make it slightly negative, so it
is clamped at 0 (NaN still propagates). Centre the data (a bias) when |mean| >> std.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType


def _same(rt, x, eps, x2=None):
    return x


@dataclass(frozen=True)
class FinalizeOp:
    """One finalize op. ``torch`` and ``triton`` are the op on its input: the folded total, or
    the mean (``total / n``) when ``needs_n``; with a ``second`` partial also on ``x2``, that
    partial's total (or mean) folded the same way."""

    name: str
    result: str  # what it computes, in words (docs/spec-language.md's table says the same)
    reads: tuple  # the reductions (partial kinds) whose partials it may fold
    fold: str  # how those per-tile partials combine: sum | max | logsumexp
    empty: float  # the folded total over nothing (no rows, no tiles): the fold's identity
    needs_n: bool = False  # runs on total / n (0 over nothing) instead of the total
    needs_eps: bool = False
    torch: Callable = _same  # (rt, x, eps, x2) -> tensor: the reference arithmetic
    triton: str = "{x}"  # the same as Triton text over {x}, {x2} and {eps} (fp32)
    second: str = ""  # the reduction kind of a second partial, named by the step key of this name


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
    FinalizeOp(
        "var",
        "sumsq / n - (sum / n)^2, clamped at 0 (population variance)",
        ("sum",),
        "sum",
        0.0,
        needs_n=True,
        torch=lambda rt, x, eps, x2: rt.torch.clamp_min(x2 - x * x, 0.0),
        triton="tl.maximum({x2} - {x} * {x}, 0.0, propagate_nan=tl.PropagateNan.ALL)",
        second="sumsq",
    ),
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
SECONDS = tuple(dict.fromkeys(o.second for o in TABLE if o.second))  # second-partial step keys
# ``over``: the partial kind (rowpart: reduce_row, colpart: reduce_col) -> its spelling
OVER = MappingProxyType({"rowpart": "rows", "colpart": "cols"})


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


def fold(rt, op: str, partial, n: int, eps: float | None, kind: str, *, second=None, over=False):
    """Reference fold. ``partial`` (and ``second``, an op's second partial) is [M, 1], [M, G]
    (grouped) or [1, N]; ``over``: fold every entry into one [] scalar. Returns the tensor."""
    row = finalize_op(op)
    xs = [_shaped(rt, row.fold, p, kind, over) for p in (partial, second) if p is not None]
    if row.needs_n:
        xs = [mean_of(x, n) for x in xs]
    return row.torch(rt, xs[0], eps, *xs[1:])


def _shaped(rt, how: str, x, kind: str, over: bool):
    """A reference partial (exact per row) as the result's shape: flat, or folded to []."""
    if over:
        return fold_all(rt, how, x.reshape(-1))
    if kind == "rowpart" and x.shape[1] == 1:
        return x.reshape(-1)
    if kind == "colpart":
        return x.reshape(-1)
    return x


def fold_all(rt, how: str, x):
    """Fold a flat tensor with ``how`` (sum | max | logsumexp) to a [] scalar; over nothing the
    fold's identity (torch's amax refuses an empty tensor); NaN propagates."""
    t = rt.torch
    if how == "sum":
        return x.sum()
    if x.numel() == 0:
        return x.new_full((), EMPTY_FOLD[how])
    return t.amax(x) if how == "max" else t.logsumexp(x, dim=0)


def default_n(kind: str, width, group, rows, over: str | None):
    """``n`` when the step gives none: the reduced extent (the row width, the group size, or M
    for a column reduction); with ``over``, every entry: rows x width (a dim expression)."""
    if not over:
        return group or width if kind == "rowpart" else rows
    a, b = (getattr(d, "expr", d) for d in (rows, width))
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return f"({a})*({b})"


def mean_of(total, n: int):
    """``total / n``; a mean over nothing (n = 0: a column reduction over M = 0 rows) is 0."""
    return total / n if n else total.new_zeros(total.shape)
