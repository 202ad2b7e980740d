"""`scale`: multiply by a constant compiled into the kernel (alpha * acc).

`by` is a number (`by: 0.125`) or a constant written over the static dims, in numbers,
`+ - * /` and `sqrt()` (`by: "1/sqrt(head_dim)"`, `by: "1/D"`;
`coda_spec.dims.constant` is its grammar). Either way the value is folded at check time and
written into the kernel as a literal, so it costs nothing at run time. A constant over dims is
*baked*: the build's kernels hold its value at the build's dims, and running the build at other
dims that change it (`coda_spec.ops.resized`, verify's ragged case) is refused, naming the
rebuild (`coda_spec.check.suits.baked_change`). The dynamic dim (M) is known only at call time and
cannot appear; nor can a tensor. For a value that changes between calls (a learned or
scheduled scale), read a device scalar: `{load_scalar: alpha}` then `{mul: [acc, alpha]}`.
"""

from coda_spec import dims
from coda_spec.errors import ItemError
from coda_spec.primitives._ranges import ranged
from coda_spec.primitives.base import (
    ELEMENTWISE,
    VALUE_REF,
    Primitive,
    broadcast,
    item_schema,
    moved,
)

BY_DIMS = {  # by's second form, as the schema and docs describe it
    "type": "string",
    "minLength": 1,
    "description": "an expression of static dims, e.g. '1/sqrt(head_dim)'",
}


def _moved(by):
    """``base.moved`` of a number, or the same map written over the dims' constant: by + 0.25 +
    |by| / 2 (|x| as sqrt(x * x)), never equal to it."""
    if isinstance(by, (int, float)):
        return moved(float(by))
    return f"({by}) + 0.25 + sqrt(({by}) * ({by})) / 2"


def _infer(tc, op, ins, tensors):
    try:
        dims.constant(op.get("by"), tc.sizes)
    except dims.DimError as e:
        raise ItemError(f"scale: by: {e}", "by", e.hint) from e
    return (broadcast([ins["scale"]], "'scale'"),)


def _lower(lc, op):
    x = lc.v(op.get("scale"))
    lc.let(op.results[0], f"{x.expr} * {lc.constant(op.get('by'))!r}", x.form)


def _host(hc, op):
    x = hc.value(op.get("scale"))
    by = hc.constant(op.get("by"))
    hc.let(op.results[0], [f"{lane} * {by!r}" for lane in x.lanes])


PRIMITIVE = ranged(
    Primitive(
        name="scale",
        family=ELEMENTWISE,
        summary="Multiply a value by a constant `by`: a number or an expression of static dims "
        "(compiled into the kernel).",
        example='- {scale: scores, by: "1/sqrt(head_dim)", as: y}',
        schema=item_schema(
            "scale",
            VALUE_REF,
            {"by": {"anyOf": [{"type": "number"}, BY_DIMS]}},
            required=("by",),
        ),
        operands=("scale",),
        infer=_infer,
        reference=lambda rt, op, ins, tensors: (ins["scale"] * rt.constant(op.get("by")),),
        mutants=lambda op: (op.with_arg("by", _moved(op.get("by"))),),
        bakes=lambda op, where: () if isinstance(op.get("by"), (int, float)) else (op.get("by"),),
        lower=_lower,
        host=_host,
    )
)
