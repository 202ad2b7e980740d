"""Helpers that generated ``kernel.py`` files import: lane-wise math over QuACK ``Pair`` values,
rounding, and a select.

Only generated modules import this file (so, like ``lower/quack_ops``, it is loaded only inside the
compile workers of ``lower/quack_adapter.py``); the lowering names these helpers through
``primitives.lower_api.KERNEL_IMPORTS`` and never imports them. Each helper is traced by CuTe DSL
inside an epilogue fn: plain Python branching on the value's type happens at trace time.

Why here and not in each kernel.py: a generated file then reads like a hand-written QuACK mod (an
import block and the epilogue fns), and the helpers are reviewed and versioned once.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from quack.epilogue.math import Pair

from coda_spec import philox


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


def philox_uniform(seed, offset, row, col, width: int):
    """The Philox4x32-10 uniform of the element at global ``row``, ``col`` of a ``width``-wide
    tile (``coda_spec.philox``'s definition, bit for bit): counter ``offset + row * width +
    col`` (64-bit, wrapping), key ``seed``, ``u = (r >> 8) * 2^-24``. ``seed`` and ``offset``
    are Int64 scalars (``Scalar(dtype=Int64)``), ``row`` and ``col`` fp32 table values (exact
    below 2^24), ``width`` a compile-time int. Unsigned 32-bit words throughout: ``*`` is the
    low half of the product (wrapping ``mul.lo.u32``), ``cute.arch.mul_hi`` the high half
    (``mul.hi.u32``); the 10 rounds unroll at trace time."""
    u32, u64 = cutlass.Uint32, cutlass.Uint64
    c = u64(cutlass.Int64(offset)) + u64(cutlass.Int64(row)) * u64(width) + u64(cutlass.Int64(col))
    s = u64(cutlass.Int64(seed))
    c0, c1 = u32(c), u32(c >> u64(32))
    c2, c3 = u32(0), u32(0)
    k0, k1 = u32(s), u32(s >> u64(32))
    mul_a, mul_b = u32(philox.MUL_A), u32(philox.MUL_B)
    key_a, key_b = u32(philox.KEY_A), u32(philox.KEY_B)
    for _ in range(philox.ROUNDS):
        hi_b, lo_b = cute.arch.mul_hi(mul_b, c2), mul_b * c2
        hi_a, lo_a = cute.arch.mul_hi(mul_a, c0), mul_a * c0
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = k0 + key_a, k1 + key_b
    top = cutlass.Int32(c0 >> u32(philox.UNIFORM_SHIFT))  # < 2^24: exact as fp32
    return cutlass.Float32(top) * cutlass.Float32(philox.UNIFORM_SCALE)
