"""``GroupStat``: a deterministic per-(row, group) statistic of the raw accumulator pass.

QuACK's :class:`~quack.epilogue.ops.GroupedColStatsBase` does all the work: the kernel's prepass
fn returns the statistic's input per element under the op's name, the base class folds it per
(tile row, group of ``group_cols`` adjacent N columns) in registers and then across warps in a
fixed order (no float atomics, so the result is bitwise reproducible), and ``stat_value``
finalizes each (row, group) total. The main epilogue fn then receives the finalized value as a
value operand (a parameter named after the op, broadcast over the group's columns; a ``Pair`` in
``acc_pair`` mode), and ``op.out(name)`` (declared in ``extra_ops``) writes it to an
(M, N / group_cols) fp32 buffer.

GroupStat only chooses the fold and the finalize:

==========  ============  =======================================================
statistic   combine       stat_value(total)
==========  ============  =======================================================
sum, sumsq  ``"add"``     total (the prepass fn returns x, or x * x)
mean, ...sq ``"add"``     total / group_cols (exact division, once per group)
max, absmax ``"max"``     total (from a -inf identity; the fn returns x or |x|)
logsumexp   ``"lse"``     total (log-add-exp fold from a -inf identity; fn returns x)
==========  ============  =======================================================

``"lse"`` keeps the log-sum-exp itself as the one fp32 fold state: ``lse(a, b) = hi +
log1p(exp(lo - hi))`` (hi, lo the larger and smaller) is associative and commutative, with
identity -inf, so QuACK's register fold, lane butterfly and fixed-order cross-warp fold serve it
unchanged, and the statistic needs one pass over the raw accumulator (no max pass first: a
softmax in the same epilogue is ``exp(x - lse)``). Each fold rounds once near ``lse``, so the
error grows with the fold's depth in units of ulp(lse), far below a bf16 or fp32 store of
``exp(x - lse)`` at the row widths one tile holds. ``lo - hi`` is taken against
``max(hi, -FLT_MAX)`` so that two -inf operands (an all-masked start) give -inf, not NaN.

Host argument (QuACK's stats-op schema): the group width as a plain ``int`` at compile time
(baked into the kernel as a constexpr), ``None`` in its EpilogueArguments slot at run time.
QuACK requires the group width to divide both GEMM N and tile_N, and (checked at trace time)
to nest with the epilogue subtile's N extent.
"""

from __future__ import annotations

import math

import cutlass.cute as cute
from cutlass import Float32
from quack.epilogue.ops import GroupedColStatsBase

COMBINES = ("add", "max", "lse")
FLT_MAX = 3.4028234663852886e38


def logaddexp(a, b):
    """``log(exp(a) + exp(b))`` in fp32 (the ``"lse"`` fold; the module doc): traced inline."""
    hi, lo = cute.arch.fmax(a, b), cute.arch.fmin(a, b)
    ref = cute.arch.fmax(hi, Float32(-FLT_MAX))
    return hi + cute.math.log1p(cute.math.exp(lo - ref))


class GroupStat(GroupedColStatsBase):
    """Per-(row, group) sum, max or log-sum-exp of the prepass fn's value; ``mean=True`` divides
    by the group width. ``combine`` shadows QuACK's class attribute per instance, so it is part of
    :meth:`config_key` (QuACK's compile-cache identity is ``(module, class, name, config_key)``).
    """

    def __init__(self, name: str, combine: str = "add", mean: bool = False):
        super().__init__(name)
        if combine not in COMBINES:
            raise ValueError(f"GroupStat {name!r}: combine must be one of {COMBINES}")
        if mean and combine != "add":
            raise ValueError(f"GroupStat {name!r}: mean needs combine='add'")
        self.combine = combine
        self.mean = bool(mean)

    def config_key(self):
        return (self.combine, self.mean)

    def _combine_op(self):
        return logaddexp if self.combine == "lse" else super()._combine_op()

    def _fold_identity(self):
        return -math.inf if self.combine == "lse" else super()._fold_identity()

    def stat_value(self, total, group_cols):
        # Traced inline from QuACK's @cute.jit prepass hooks; ``group_cols`` is a Python int
        # (compile-time), so this branch is resolved while tracing.
        if self.mean:
            return total / Float32(group_cols)
        return total

    def __repr__(self):
        return f"GroupStat({self.name!r}, combine={self.combine!r}, mean={self.mean})"
