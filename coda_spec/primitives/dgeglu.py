"""`dgeglu`: GeGLU backward: packed (dg, du) pairs and the recomputed gelu_tanh(g) * u.

dg = dy * u * act'(g), du = dy * act(g). The saved z is read as packed 16-bit pairs (one 32-bit
lane per (g, u)), and dz is written the same way, so the kernel runs in packed-pair mode.
"""

from coda_spec.primitives._lowering import lanes
from coda_spec.primitives._pairs import dgated_infer, dgated_reference
from coda_spec.primitives.base import PAIR, VALUE_REF, Primitive, item_schema


def _lower(lc, op):
    dy = lc.v(op.get("dgeglu"))
    g, u = lanes(lc, lc.v(op.get("z")), "z")
    dz, out = op.results
    a, da = lc.tmp("act"), lc.tmp("dact")
    lc.line(f"{a}, {da} = _gelu_and_grad({g})")
    lc.let(dz, f"pack({dy.expr} * {u} * {da}, {dy.expr} * {a})", "p")
    lc.let(out, f"{a} * {u}", "s")


PRIMITIVE = Primitive(
    name="dgeglu",
    family=PAIR,
    summary="GeGLU backward: packed (dg, du) pairs and the recomputed gelu_tanh(g) * u.",
    example="- {dgeglu: acc, z: z, as: [dz, out]}",
    schema=item_schema("dgeglu", VALUE_REF, {"z": VALUE_REF}, required=("z",), result="list"),
    operands=("dgeglu", "z"),
    results="many",
    infer=dgated_infer("dgeglu"),
    reference=dgated_reference("gelu"),
    mutants=lambda op: (op.with_prim("dswiglu"),),
    lower=_lower,
)
