"""Text-emitting helpers shared by the primitives' ``lower`` functions (see lower/emit.py).

Generated code calls a few helpers defined in kernel.py's preamble: ``_map(f, v)`` applies a
scalar function lane-wise to a ``Pair``, ``_div(a, b)`` divides lane-wise. Module aliases:
``_qa`` = quack.activation, ``_cm`` = cutlass.cute.math, ``_rot`` = quack.epilogue.rotary.
A pair's lanes are read through :func:`lanes` (one ``unpack`` per pair, named lanes after that)
and pairs are built with :func:`let_pack`, so the lanes stay named fp32 values.
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


def lanes(lc, val, base: str = "", names: tuple[str, str] = ("a", "b")) -> tuple[str, str]:
    """The two fp32 lanes of a pair value, by name.

    A pair whose lanes are already named (unpacked earlier, or built by :func:`let_pack` from
    two names) reuses them; otherwise this emits ``<base>_<a>, <base>_<b> = unpack(<val>)`` once
    and remembers them. ``base`` defaults to the value's own name; ``names`` are the lane
    suffixes (``("g", "u")`` for an interleaved gate/up pair).
    """
    from coda_spec.lower.emit import LowerError

    if val.form != "p":
        raise LowerError("needs adjacent-column pairs here (acc_pair or packed mode)")
    if val.expr in lc.lanes:
        return lc.lanes[val.expr]
    base = base or (val.expr if val.expr.isidentifier() else "x")
    a, b = (lc.fresh(f"{base}_{n}") for n in names)
    lc.line(f"{a}, {b} = unpack({val.expr})")
    lc.lanes[val.expr] = (a, b)
    return a, b


def let_pack(lc, name: str, a: str, b: str):
    """Emit ``name = pack(a, b)``; when both lanes are names, later readers use them directly."""
    lc.let(name, f"pack({a}, {b})", "p")
    if a.isidentifier() and b.isidentifier():
        lc.lanes[lc.v(name).expr] = (a, b)
