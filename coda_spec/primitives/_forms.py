"""A primitive with several *forms* chosen by one optional key (``gelu``'s ``approximate:``).

``with_forms(key, forms, default)`` makes one primitive out of whole primitives of the same
name, one per value of ``key`` (``{"tanh": <tanh gelu>, "none": <erf gelu>}``): its schema is
the default form's plus ``key`` (an enum of the form names, optional), and every callback
(typing, reference, both lowerings, mutants, support and refusals) is the chosen form's, called
with the item less ``key``. So each form stays an ordinary primitive (a ``unary`` over a QuACK
helper, or a ``composite`` of one expression), written once.

An item without the key is the default form, and nothing of the key reaches it: its schema
fragment grows an optional property, but its item, its generated text and its ``cache_key()``
are what they were, so a spec written before the key existed keeps its build address. That is
why the default is the form the primitive had before (``gelu``: tanh, though torch's own default
is ``approximate='none'``), and why the key is never filled in by normalization.

Mutants: the chosen form's own (the key put back on those of the same primitive), and the item
switched to each other form: a proof that cannot tell the forms apart does not prove the item.
"""

from __future__ import annotations

from dataclasses import replace

from coda_spec.primitives.base import Primitive


def with_forms(key: str, forms: dict, default: str, doc: str) -> Primitive:
    """One primitive over ``forms`` (form name -> a primitive of the same name), chosen by the
    item's optional ``key`` (``default`` when absent); ``doc``: the key's schema description."""
    base = forms[default]
    name = base.name
    if any(p.name != name for p in forms.values()):
        raise ValueError(f"with_forms: the forms of '{name}' are primitives of another name")

    def pick(op) -> tuple[Primitive, object]:
        form = op.get(key)
        inner = replace(op, args=tuple(a for a in op.args if a[0] != key))
        return forms[default if form is None else form], inner

    def call(field: str):
        def dispatch(op, *rest):
            p, inner = pick(op)
            return getattr(p, field)(inner, *rest)

        return dispatch

    def ctx_call(field: str):
        def dispatch(ctx, op, *rest):
            p, inner = pick(op)
            return getattr(p, field)(ctx, inner, *rest)

        return dispatch

    def mutants(op):
        p, inner = pick(op)
        form = op.get(key, default)
        own = tuple(
            m.with_arg(key, form) if m.prim == name and form != default else m
            for m in p.mutants(inner)
        )
        return own + tuple(op.with_arg(key, other) for other in forms if other != form)

    def supports(config, sizes, op):
        p, inner = pick(op)
        return p.supports(config, sizes, inner)

    schema = dict(base.schema)
    schema["properties"] = {
        **base.schema["properties"],
        key: {"enum": list(forms), "description": doc},
    }
    no_host = sorted(n for n, p in forms.items() if p.host is None)
    if no_host:  # host_kernel refuses by ``host is None`` for the whole primitive
        raise ValueError(f"with_forms: '{name}' forms {no_host} have no host lowering")
    return replace(
        base,
        schema=schema,
        infer=ctx_call("infer"),
        reference=ctx_call("reference"),
        mutants=mutants,
        supports=supports,
        bakes=call("bakes"),
        lower=ctx_call("lower") if all(p.lower for p in forms.values()) else None,
        host=ctx_call("host"),
        prepass_of=call("prepass_of"),
        item_refusal=call("item_refusal"),
        no_mode={m: why for p in forms.values() for m, why in p.no_mode.items()},
    )
