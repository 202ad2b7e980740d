"""Lowering builders shared by the elementwise primitives (``lower`` of unary and binary ops).

Primitives lower against ``coda_spec.primitives.lower_api`` only (see its docstring for the
contract): text
goes out through :class:`~coda_spec.primitives.lower_api.LowerCtx`, and every name the text calls is
declared there, so kernel.py imports exactly what it uses.

A unary op's lowering is given as one of:

* a function name generated code may call (``"silu"``, QuACK's ``quack.activation``) or a dotted
  path under ``cute`` (``"cute.math.exp"``): ``f(x)``, or ``lanewise(f, x)`` on a ``Pair``;
* a template over ``{x}`` (``"-{x}"``, ``"{x} * {x}"``); any other ``{name}`` field is a function
  to import and call (``"{x} * {tanh}({x})"``) and is declared as used.
"""

from __future__ import annotations

from string import Formatter

from coda_spec.primitives.lower_api import forms_join


def binary_lower(symbol: str):
    """``a <symbol> b``; ``/`` of a ``Pair`` is ``lane_div(a, b)`` (a ``Pair`` has no ``/``)."""

    def lower(lc, op):
        a, b = (lc.vs(x) for x in op.get(op.prim))
        if symbol == "/" and forms_join(a, b) == "p":
            expr = lc.call("lane_div", a.expr, b.expr)
        else:
            expr = f"{a.expr} {symbol} {b.expr}"
        lc.let(op.results[0], expr, forms_join(a, b))

    return lower


def binary_call_lower(fn: str):
    """``fn(a, b)``, ``fn`` a :data:`~coda_spec.primitives.lower_api.KERNEL_IMPORTS` helper that
    takes
    plain values and ``Pair``s alike (``lane_max``)."""

    def lower(lc, op):
        a, b = (lc.vs(x) for x in op.get(op.prim))
        lc.let(op.results[0], lc.call(fn, a.expr, b.expr), forms_join(a, b))

    return lower


def unary_lower(template: str):
    """The lowering of a unary op from a function name or a ``{x}`` template (module doc)."""
    fields = {f for _, f, _, _ in Formatter().parse(template) if f}

    def lower(lc, op):
        x = lc.vs(op.get(op.prim))
        if "x" in fields:
            names = {f: lc.use(f) for f in fields - {"x"}}
            expr = template.format(x=x.expr, **names)
        else:
            expr = lc.lanewise(template, x)
        lc.let(op.results[0], expr, x.form)

    return lower
