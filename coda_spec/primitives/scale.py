"""`scale`: multiply by an immediate constant (alpha * acc). For a device-pointer scalar, use
`load_scalar` and `mul`."""

from coda_spec.primitives._ranges import ranged
from coda_spec.primitives.base import (
    ELEMENTWISE,
    VALUE_REF,
    Primitive,
    broadcast,
    item_schema,
    moved,
)


def _lower(lc, op):
    x = lc.v(op.get("scale"))
    lc.let(op.results[0], f"{x.expr} * {float(op.get('by'))!r}", x.form)


def _host(hc, op):
    x = hc.value(op.get("scale"))
    hc.let(op.results[0], [f"{lane} * {float(op.get('by'))!r}" for lane in x.lanes])


PRIMITIVE = ranged(
    Primitive(
        name="scale",
        family=ELEMENTWISE,
        summary="Multiply a value by an immediate constant `by` (compiled into the kernel).",
        example="- {scale: acc, by: 0.125, as: y}",
        schema=item_schema("scale", VALUE_REF, {"by": {"type": "number"}}, required=("by",)),
        operands=("scale",),
        infer=lambda tc, op, ins, tensors: (broadcast([ins["scale"]], "'scale'"),),
        reference=lambda rt, op, ins, tensors: (ins["scale"] * float(op.get("by")),),
        mutants=lambda op: (op.with_arg("by", moved(float(op.get("by")))),),
        lower=_lower,
        host=_host,
    )
)
