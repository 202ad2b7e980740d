"""`load_row`: read a per-column vector broadcast over rows (gamma, bias, RoPE frequencies)."""

from coda_spec.primitives._loads import need_rank
from coda_spec.primitives.base import TENSOR_REF, VECTOR, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["load_row"]
    need_rank(info, 1, "load_row", "load_row")
    return (VType("row", info.shape[0]),)


PRIMITIVE = Primitive(
    name="load_row",
    family=VECTOR,
    summary="Read a length-W vector, one value per column, broadcast over rows.",
    example="- {load_row: gamma, as: g}",
    schema=item_schema("load_row", TENSOR_REF, result="optional"),
    operands=(),
    tensors=("load_row",),
    infer=_infer,
    reference=lambda rt, op, ins, tensors: (rt.load(tensors["load_row"]).reshape(1, -1),),
)
