"""Text-emitting helpers shared by the primitives' ``lower`` functions (see lower/emit.py).

Generated code calls a few helpers defined in kernel.py's preamble: ``_map(f, v)`` applies a
scalar function lane-wise to a ``Pair``, ``_div(a, b)`` divides lane-wise. Module aliases:
``_qa`` = quack.activation, ``_cm`` = cutlass.cute.math, ``_rot`` = quack.epilogue.rotary.
"""

from __future__ import annotations


def binary_lower(symbol: str):
    def lower(lc, op):
        from coda_spec.lower.emit import forms_join

        a, b = (lc.vs(x) for x in op.get(op.prim))
        expr = f"_div({a.expr}, {b.expr})" if symbol == "/" else f"{a.expr} {symbol} {b.expr}"
        lc.let(op.results[0], expr, forms_join(a, b))

    return lower


def unary_lower(template: str):
    """``template`` uses ``{x}``; a plain function name means ``_map(fn, x)``."""

    def lower(lc, op):
        x = lc.vs(op.get(op.prim))
        if "{x}" in template:
            expr = template.format(x=x.expr)
        else:
            expr = f"_map({template}, {x.expr})" if x.form == "p" else f"{template}({x.expr})"
        lc.let(op.results[0], expr, x.form)

    return lower


def lanes(lc, val, base: str) -> tuple[str, str]:
    """Emit ``a, b = unpack(val)`` and return the lane names."""
    from coda_spec.lower.emit import LowerError

    if val.form != "p":
        raise LowerError("needs adjacent-column pairs here (acc_pair or packed mode)")
    a, b = lc.tmp(f"{base}_a"), lc.tmp(f"{base}_b")
    lc.line(f"{a}, {b} = unpack({val.expr})")
    return a, b
