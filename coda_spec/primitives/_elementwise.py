"""Shared builders for the elementwise family (unary and binary ops).

Each elementwise primitive still has its own file (its math, doc, example, mutants and the
text of its lowerings); this module holds only the typing, schema and lowering plumbing they
have in common, so a new unary op is ~10 lines.

Parameterised unary ops (``{softcap: x, cap: 30.0, as: y}``) are one table-like call,
:func:`parameterised_unary`, in the spirit of QuACK's ``act_fn_map``: the immediates' schemas,
the torch math, the CuTe lowering as a *chain* of registered elementwise primitives (softcap is
div -> tanh -> mul), and a Triton lane template. The CuTe side is a chain rather than text so a
new op writes no helper or import names of its own: each link is lowered by the registered
primitive it names, and the generated kernel reads as those primitives' lines in turn.

Host kernels (``coda_spec/lower/host_kernel.py``): a unary op gives its Triton text as a
template over ``{x}`` (one fp32 lane), applied to each lane of its operand; a binary op is its
operator symbol applied lane by lane, per-row values and scalars broadcast over the lanes. The
``HOST_*`` templates below are the activations pair primitives (SwiGLU, GeGLU and their
backward passes) share with the elementwise ops of the same name.
"""

from __future__ import annotations

from dataclasses import replace

from coda_spec.errors import ItemError
from coda_spec.primitives._lowering import binary_call_lower, binary_lower, unary_lower
from coda_spec.primitives._ranges import ranged
from coda_spec.primitives.base import (
    ELEMENTWISE,
    OPERAND,
    VALUE_REF,
    Primitive,
    broadcast,
    item_schema,
    moved,
)

# Triton has no tanh outside libdevice (which its CPU interpreter cannot run):
# tanh(x) = 2 sigmoid(2x) - 1, exact algebra, absolute error ~1e-7 in fp32.
HOST_TANH = "(2.0 * tl.sigmoid(2.0 * {x}) - 1.0)"
HOST_SILU = "{x} * tl.sigmoid({x})"
# torch's gelu(approximate='tanh') = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2 / pi);
# 0.5 (1 + tanh(u)) = sigmoid(2u), so it is x * sigmoid(2k (x + 0.044715 x^3)).
HOST_GELU = "{x} * tl.sigmoid(1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x}))"


def unary_host(template: str):
    """Host lowering of a unary op: ``template`` (Triton text over ``{x}``) on every lane."""

    def host(hc, op):
        x = hc.value(op.get(op.prim))
        hc.let(op.results[0], [template.format(x=lane) for lane in x.lanes])

    return host


def binary_host(symbol: str, template: str = ""):
    """Host lowering of a binary op ``a <symbol> b`` (or of ``template`` over ``{a}`` and
    ``{b}``, e.g. ``tl.maximum({a}, {b})``), lane by lane (rows, cols, scalars and number
    literals broadcast)."""
    template = template or "{a} " + symbol + " {b}"

    def host(hc, op):
        a, b = (hc.value(x) for x in op.get(op.prim))
        n = hc.lane_count(a, b)
        pairs = zip(hc.spread(a, n), hc.spread(b, n), strict=True)
        hc.let(op.results[0], [template.format(a=x, b=y) for x, y in pairs])

    return host


def _unary_infer(name):
    def infer(tc, op, ins, tensors):
        return (broadcast([ins[name]], f"'{name}'"),)

    return infer


def _siblings(name, siblings):
    return lambda op: tuple(op.with_prim(s) for s in siblings if s != name)


def unary(name: str, fn, summary: str, example: str, siblings=(), lower="", host="") -> Primitive:
    """A one-operand op ``{name: x, as: y}``; ``fn(rt, x)`` is its torch math, ``lower`` its
    CuTe text and ``host`` its Triton text (a template over ``{x}``)."""
    return ranged(
        Primitive(
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
            host=unary_host(host) if host else None,
        )
    )


def extremum(both: str, one: str):
    """The torch math of ``max``/``min``: ``torch.<both>(a, b)`` of two values,
    ``torch.<one>(a, b)`` (``clamp_min``) with a number literal on either side."""

    def fn(rt, a, b):
        t = rt.torch
        if not isinstance(a, t.Tensor):
            a, b = b, a
        return getattr(t, both if isinstance(b, t.Tensor) else one)(a, b)

    return fn


def _binary_infer(name):
    def infer(tc, op, ins, tensors):
        a, b = ins[name]
        if a.kind == "scalar" and b.kind == "scalar" and tc.both_literals(op):
            raise ItemError(f"'{name}' of two numbers; write the result as a literal", name)
        return (broadcast([a, b], f"'{name}'"),)

    return infer


def binary(name: str, fn, summary: str, example: str, siblings=(), symbol="", call=()) -> Primitive:
    """A two-operand op ``{name: [a, b], as: y}``; operands are values or number literals.

    ``symbol``: the operator of both lowerings (``*``); or ``call``: ``(cute, triton)``, the
    kernel helper of the CuTe text (``lane_max``, ``_lowering.binary_call_lower``) and the Triton
    function of the host text (``tl.maximum``)."""
    pair = {"type": "array", "items": OPERAND, "minItems": 2, "maxItems": 2}
    return ranged(
        Primitive(
            name=name,
            family=ELEMENTWISE,
            summary=summary,
            example=example,
            schema=item_schema(name, pair),
            operands=(name,),
            infer=_binary_infer(name),
            reference=lambda rt, op, ins, tensors: (fn(rt, *ins[name]),),
            mutants=_siblings(name, siblings),
            lower=binary_call_lower(call[0]) if call else binary_lower(symbol),
            host=binary_host(symbol, f"{call[1]}({{a}}, {{b}})" if call else ""),
        )
    )


def _chain_lower(name: str, chain: tuple):
    """CuTe lowering of ``x`` through ``chain``: each link ``(prim, *operands)`` applies the
    registered elementwise primitive ``prim`` to the running value (and, for a binary one, to
    ``operands``: a parameter's name, read from the item, or a number). A link whose parameter
    the item leaves out (an optional one: clamp's ``min``) is skipped. Intermediate values get
    fresh names ``<result>_<prim>``; the last link binds the item's result."""

    def lower(lc, op):
        from coda_spec.primitives import registry

        prims = registry()
        result, value = op.results[0], op.get(name)
        links = [
            link
            for link in chain
            if all(op.get(a) is not None for a in link[1:] if isinstance(a, str))
        ]
        for i, (prim, *operands) in enumerate(links):
            out = result if i == len(links) - 1 else lc.fresh(f"{lc.ident(result)}_{prim}")
            extra = [float(op.get(a)) if isinstance(a, str) else a for a in operands]
            arg = [value, *extra] if extra else value
            prims[prim].lower(lc, replace(op, prim=prim, args=((prim, arg),), results=(out,)))
            value = out

    return lower


def parameterised_unary(
    name: str,
    params: dict,
    torch,
    cute: tuple,
    triton: str,
    summary: str,
    example: str,
    mutants=None,
    siblings=(),
    optional=(),
    check=None,
) -> Primitive:
    """A one-operand op with immediate parameters: ``{name: x, <param>: number, ..., as: y}``.

    ``params``: parameter -> JSON Schema fragment (each required unless named in ``optional``;
    compiled into the kernel as a constant, like ``scale``'s ``by``). ``torch(rt, x,
    **params)``: the reference math, the parameters as floats (an absent optional one is
    ``None``). ``cute``: the GEMM-epilogue lowering as a chain of registered
    elementwise primitives, ``(("div", "cap"), ("tanh",), ("mul", "cap"))`` (see
    :func:`_chain_lower`). ``triton``: host-kernel text over one fp32 lane ``{x}`` and the
    parameters ``{<param>}`` (float literals), or a function ``triton(x, **params)`` of that
    lane's text and the present parameters' literals. ``mutants(op)``: extra mutants (default:
    each parameter moved, ``base.moved``); ``siblings``: unary primitives to swap in,
    parameters dropped. ``check(params)``: raises an ``ItemError`` for parameters the schema
    cannot refuse (``coda check`` reports it located at the item).
    """

    def values(op) -> dict:
        return {k: float(op.get(k)) for k in params if op.get(k) is not None}

    def infer(tc, op, ins, tensors):
        if check is not None:
            check(values(op))
        return (broadcast([ins[name]], f"'{name}'"),)

    def reference(rt, op, ins, tensors):
        given = dict.fromkeys(params) | values(op)
        return (torch(rt, ins[name], **given),)

    def host(hc, op):
        x = hc.value(op.get(name))
        lits = {k: repr(v) for k, v in values(op).items()}
        text = triton if callable(triton) else triton.format
        hc.let(op.results[0], [text(x=lane, **lits) for lane in x.lanes])

    def all_mutants(op):
        shifted = (
            mutants(op)
            if mutants is not None
            else tuple(op.with_arg(k, moved(v)) for k, v in values(op).items())
        )
        swapped = tuple(
            replace(op, prim=s, args=((s, op.get(name)),)) for s in siblings if s != name
        )
        return shifted + swapped

    return ranged(
        Primitive(
            name=name,
            family=ELEMENTWISE,
            summary=summary,
            example=example,
            schema=item_schema(
                name,
                VALUE_REF,
                dict(params),
                required=tuple(p for p in params if p not in optional),
            ),
            operands=(name,),
            infer=infer,
            reference=reference,
            mutants=all_mutants,
            lower=_chain_lower(name, tuple(cute)),
            host=host,
        )
    )
