"""`load_row`: read a per-column vector broadcast over rows (gamma, bias, RoPE frequencies).

A ``uint8``/``bool`` mask vector reads as fp32 0/1 values (the runtime converts it for a GEMM
epilogue; a host step loads the bytes and converts them)."""

from coda_spec.primitives._loads import need_rank
from coda_spec.primitives.base import (
    MASK_DTYPES,
    TENSOR_REF,
    VECTOR,
    Primitive,
    VType,
    item_schema,
)


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
    # A uint8/bool mask row is converted to fp32 by the runtime (``to_fp32``), as int columns
    # are: the vector loads then read 4-byte elements only.
    dtype, transform = ("fp32", "to_fp32") if info.dtype in MASK_DTYPES else (info.dtype, "")
    load = lc.op("RowVecLoad", lc.ident(t))
    name = lc.param(t, "row", load, (1, width), dtype, transform)
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
