"""`load_row`: read a per-column vector broadcast over rows (gamma, bias, RoPE frequencies)."""

from coda_spec.primitives._loads import need_rank
from coda_spec.primitives.base import TENSOR_REF, VECTOR, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["load_row"]
    need_rank(info, 1, "load_row", "load_row")
    return (VType("row", info.shape[0]),)


def _lower(lc, op):
    t = op.get("load_row")
    info = lc.info(t)
    width = info.shape[0]
    if width != lc.width:
        # A half-width row in acc_pair mode is a per-pair table (RoPE frequencies): the
        # consumer decides how it is passed, so defer it.
        lc.bind(op.results[0], f"<row {t}>", "deferred", tensor=t)
        return
    name = lc.param(t, "row", lc.op("RowVecLoad", lc.ident(t)), (1, width), info.dtype)
    lc.bind(op.results[0], name, lc.form_of_width(width))


def _host(hc, op):
    t = op.get("load_row")
    lanes = hc.value_lanes(op.results[0])  # RoPE's W/2 frequencies: one per pair, one lane
    block = f"tl.load({hc.ptr(t)} + {hc.offsets(lanes)}{hc.mask_arg(lanes)})"
    hc.let_block(op.results[0], hc.fp32(block, t))


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
    lower=_lower,
    prepass=True,
    host=_host,
)
