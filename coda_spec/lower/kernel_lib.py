"""Helpers that generated ``kernel.py`` files import: lane-wise math over QuACK ``Pair`` values,
rounding, and a select.

Layer map: only generated modules import this file (so, like ``lower/quack_ops``, it is loaded
only inside the compile workers of ``lower/quack_adapter.py``); the lowering names these helpers
through ``lower_api.KERNEL_IMPORTS`` and never imports them. Each helper is traced by CuTe DSL
inside an epilogue fn: plain Python branching on the value's type happens at trace time.

Why here and not in each kernel.py: a generated file then reads like a hand-written QuACK mod (an
import block and the epilogue fns), and the helpers are reviewed and versioned once.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from quack.epilogue.math import Pair


def lanewise(f, v):
    """Apply a scalar function to each lane of a ``Pair`` (or to a plain value)."""
    return Pair(f(v.a), f(v.b)) if isinstance(v, Pair) else f(v)


def lane_div(a, b):
    """Lane-wise division (``Pair`` has no ``/``); a plain operand divides both lanes."""
    if isinstance(a, Pair) or isinstance(b, Pair):
        a0, a1 = a if isinstance(a, Pair) else (a, a)
        b0, b1 = b if isinstance(b, Pair) else (b, b)
        return Pair(a0 / b0, a1 / b1)
    return a / b


def _lanes2(f, a, b):
    """``f`` of two fp32 operands, lane by lane when either is a ``Pair`` (a plain operand,
    such as a number literal or a per-row value, applies to both lanes)."""
    if isinstance(a, Pair) or isinstance(b, Pair):
        a0, a1 = a if isinstance(a, Pair) else (a, a)
        b0, b1 = b if isinstance(b, Pair) else (b, b)
        return Pair(_lanes2(f, a0, b0), _lanes2(f, a1, b1))
    return f(cutlass.Float32(a), cutlass.Float32(b))


def lane_max(a, b):
    """max(a, b) per lane: ``arith.maxnumf`` (one FMNMX; a NaN operand yields the other)."""
    return _lanes2(cute.math.max, a, b)


def lane_min(a, b):
    """min(a, b) per lane: ``arith.minnumf`` (one FMNMX; a NaN operand yields the other)."""
    return _lanes2(cute.math.min, a, b)


def round_bf16(x):
    """Round an fp32 value to bf16 (round to nearest even) and keep it as fp32."""
    return cutlass.Float32(cutlass.BFloat16(x))


def round_fp16(x):
    """Round an fp32 value to fp16 (round to nearest even) and keep it as fp32."""
    return cutlass.Float32(cutlass.Float16(x))


def select(cond, a, b):
    """``a`` where the traced Boolean ``cond`` holds, else ``b``, as fp32: one compare and one
    select per element (``onehot``'s ``select(columns == target, 1.0, 0.0)``)."""
    return cutlass.Float32(cutlass.select_(cond, cutlass.Float32(a), cutlass.Float32(b)))
