"""`store`: write a value to a chain tensor (a kernel output, or an input of a later step).

``to`` defaults to the value's own name. ``dtype`` defaults to the dtype declared in ``outputs``,
else to the GEMM's A operand dtype (fp32 for column vectors). With ``add_to: t`` the result is
``t + value`` written in place of ``t`` (QuACK's add_to_output: a TMA reduce-add, no extra read
pass); the new tensor is named by ``to`` and ``t`` may not be read after this step.
Tiles write an M x W tensor; column vectors (a gathered target logit) write a length-M one.
"""

from coda_spec.primitives.base import (
    DTYPES,
    NAME_RE,
    TENSOR_REF,
    TILE,
    VALUE_REF,
    Primitive,
    TypeProblem,
    item_schema,
)


def _infer(tc, op, ins, tensors):
    t = ins["store"]
    if t.kind not in ("tile", "col"):
        hint = "finalize partials in a 'finalize' step" if t.kind.endswith("part") else ""
        raise TypeProblem(f"store writes tiles and per-row vectors, got {t.show()}", "store", hint)
    return (t,)


def _reference(rt, op, ins, tensors):
    v = ins["store"]
    if rt.store_is_col(op):
        v = v.reshape(-1)
    if "add_to" in tensors:
        v = rt.load(tensors["add_to"]) + v
    return (v,)


PRIMITIVE = Primitive(
    name="store",
    family=TILE,
    summary="Write a value to a chain tensor; `add_to` accumulates into an existing one.",
    example="- {store: x1, dtype: bf16}",
    schema=item_schema(
        "store",
        VALUE_REF,
        {
            "to": {"type": "string", "pattern": NAME_RE},
            "dtype": {"enum": list(DTYPES)},
            "add_to": TENSOR_REF,
        },
        result="none",
    ),
    operands=("store",),
    tensors=("add_to",),
    results="none",
    infer=_infer,
    reference=_reference,
)
