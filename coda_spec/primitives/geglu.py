"""`geglu`: GeGLU on interleaved (gate, up) column pairs: gelu_tanh(g) * u; half as wide.

The tanh GELU only (Gemma's and T5 v1.1's GeGLU; torch's `gelu(approximate='tanh')`), with no
`approximate:` key as `gelu` has: its lowerings are QuACK's tanh `geglu`/`dgeglu` helpers in
pair and packed-pair kernels, and an erf form would need pair lowerings of its own (and the
two backward helpers), which no model family coda serves needs yet.
"""

from coda_spec.primitives._pairs import (
    gated_host,
    gated_infer,
    gated_reference,
    gated_supports,
)
from coda_spec.primitives.base import PAIR, VALUE_REF, Primitive, item_schema


def _lower(lc, op):
    """``geglu(g, u)`` (quack.activation: gelu_tanh_approx(g) * u) on the pair's named lanes."""
    g, u = lc.lanes(lc.v(op.get("geglu")), names=("g", "u"))
    lc.let(op.results[0], lc.call("geglu", g, u), "s")


PRIMITIVE = Primitive(
    name="geglu",
    family=PAIR,
    summary="GeGLU on interleaved (gate, up) column pairs: gelu_tanh(g) * u; half as wide.",
    example="- {geglu: z, as: out}",
    schema=item_schema("geglu", VALUE_REF),
    operands=("geglu",),
    infer=gated_infer("geglu"),
    reference=gated_reference("gelu"),
    mutants=lambda op: (op.with_prim("swiglu"),),
    lower=_lower,
    host=gated_host("gelu"),
    supports=gated_supports,
)
