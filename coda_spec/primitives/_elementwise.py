"""Shared builders for the elementwise family (unary and binary ops).

Each elementwise primitive still has its own file (its math, doc, example and mutants); this
module holds only the typing and schema they have in common, so a new unary op is ~10 lines.
"""

from __future__ import annotations

from coda_spec.primitives._lowering import binary_lower, unary_lower
from coda_spec.primitives.base import (
    ELEMENTWISE,
    OPERAND,
    VALUE_REF,
    Primitive,
    TypeProblem,
    broadcast,
    item_schema,
)


def _unary_infer(name):
    def infer(tc, op, ins, tensors):
        return (broadcast([ins[name]], f"'{name}'"),)

    return infer


def _siblings(name, siblings):
    return lambda op: tuple(op.with_prim(s) for s in siblings if s != name)


def unary(name: str, fn, summary: str, example: str, siblings=(), lower="") -> Primitive:
    """A one-operand op ``{name: x, as: y}``; ``fn(rt, x)`` is its torch math."""
    return Primitive(
        name=name,
        family=ELEMENTWISE,
        summary=summary,
        example=example,
        schema=item_schema(name, VALUE_REF),
        operands=(name,),
        infer=_unary_infer(name),
        reference=lambda rt, op, ins, tensors: (fn(rt, ins[name]),),
        mutants=_siblings(name, siblings),
        lower=unary_lower(lower) if lower else None,
    )


def _binary_infer(name):
    def infer(tc, op, ins, tensors):
        a, b = ins[name]
        if a.kind == "scalar" and b.kind == "scalar" and tc.both_literals(op):
            raise TypeProblem(f"'{name}' of two numbers; write the result as a literal", name)
        return (broadcast([a, b], f"'{name}'"),)

    return infer


def binary(name: str, fn, summary: str, example: str, siblings=(), symbol="") -> Primitive:
    """A two-operand op ``{name: [a, b], as: y}``; operands are values or number literals."""
    pair = {"type": "array", "items": OPERAND, "minItems": 2, "maxItems": 2}
    return Primitive(
        name=name,
        family=ELEMENTWISE,
        summary=summary,
        example=example,
        schema=item_schema(name, pair),
        operands=(name,),
        infer=_binary_infer(name),
        reference=lambda rt, op, ins, tensors: (fn(rt, *ins[name]),),
        mutants=_siblings(name, siblings),
        lower=binary_lower(symbol),
    )
