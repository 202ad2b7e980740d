"""`load_col`: read a per-row vector broadcast over columns (rstd, zdz, positions)."""

from coda_spec.primitives._loads import col_operand, need_rank, need_rows
from coda_spec.primitives.base import TENSOR_REF, VECTOR, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["load_col"]
    need_rank(info, 1, "load_col", "load_col")
    need_rows(tc, info, "load_col", "load_col")
    return (VType("col"),)


def _lower(lc, op):
    lc.bind(op.results[0], col_operand(lc, op.get("load_col")), "s")


def _host(hc, op):
    t = op.get("load_col")
    hc.let(op.results[0], hc.fp32(f"tl.load({hc.ptr(t)} + row)", t))


PRIMITIVE = Primitive(
    name="load_col",
    family=VECTOR,
    summary="Read a length-M vector, one value per row, broadcast over columns.",
    example="- {load_col: r}",
    schema=item_schema("load_col", TENSOR_REF, result="optional"),
    operands=(),
    tensors=("load_col",),
    infer=_infer,
    reference=lambda rt, op, ins, tensors: (rt.load(tensors["load_col"]).reshape(-1, 1),),
    lower=_lower,
    prepass=True,
    host=_host,
)
