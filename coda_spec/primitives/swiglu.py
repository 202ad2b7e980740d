"""`swiglu`: SwiGLU on interleaved (gate, up) column pairs: silu(g) * u, half as wide."""

from coda_spec.primitives._pairs import (
    gated_host,
    gated_infer,
    gated_reference,
    gated_supports,
)
from coda_spec.primitives.base import PAIR, VALUE_REF, Primitive, item_schema


def _lower(lc, op):
    """``swiglu(g, u)`` (quack.activation: silu(g) * u) on the pair's named lanes."""
    g, u = lc.lanes(lc.v(op.get("swiglu")), names=("g", "u"))
    lc.let(op.results[0], lc.call("swiglu", g, u), "s")


PRIMITIVE = Primitive(
    name="swiglu",
    family=PAIR,
    summary="SwiGLU on interleaved (gate, up) column pairs: silu(g) * u, half as wide.",
    example="- {swiglu: z, as: out}",
    schema=item_schema("swiglu", VALUE_REF),
    operands=("swiglu",),
    infer=gated_infer("swiglu"),
    reference=gated_reference("silu"),
    mutants=lambda op: (op.with_prim("geglu"),),
    lower=_lower,
    host=gated_host("silu"),
    supports=gated_supports,
)
