"""`load_row`: read a per-column vector broadcast over rows (gamma, bias, RoPE frequencies).

A ``uint8``/``bool`` mask vector reads as fp32 0/1 values (the runtime converts it for a GEMM
epilogue; a host step loads the bytes and converts them).

``repeat: n`` (a dim expression) reads a vector repeated ``n`` times end to end: a per-head
vector (Qwen3's ``q_norm.weight [head_dim]``, RoPE's ``inv_freq [head_dim/2]``) as one value per
column (or per pair) of every head, ``v.repeat(n)`` in torch, CuTe's layout
``(len, n):(1, 0)``. Its width is ``len * n``; ``coda check`` refuses a count that does not fold
to a static positive integer, and a consumer of the wrong width says which width it needs.

Lowering: QuACK 0.6.5's ``RowVecLoad`` reads a (1, N) buffer per CTA tile, so the kernel reads
the repeated vector as any other row vector and the runtime materializes it once per tensor and
contents (``Field.transform`` ``repeat``: ``len * n`` fp32 values, a few KB, kept like RoPE's turns
table), composed with ``turns_table`` when RoPE reads it as its frequencies. The epilogue's reads
are those of a full-width vector (L2-resident, one per CTA tile and subtile); a stride-0 load from
the short vector (an ``EpiOp`` with a (len, n):(1, 0) layout) would save the table, not a read. A
host kernel reads the short vector itself, at ``column % len``.
"""

from coda_spec.errors import ItemError
from coda_spec.primitives._loads import need_rank
from coda_spec.primitives.base import (
    DIM_REF,
    MASK_DTYPES,
    TENSOR_REF,
    VECTOR,
    Primitive,
    VType,
    item_schema,
)


def repeats(op, fold) -> int:
    """``op``'s repeat count (1 without one); ``fold`` folds a dim expression."""
    n = op.get("repeat")
    return 1 if n is None else int(fold(n))


def _infer(tc, op, ins, tensors):
    info = tensors["load_row"]
    need_rank(info, 1, "load_row", "load_row")
    if op.get("repeat") is None:
        return (VType("row", info.shape[0]),)
    n = tc.fold(op.get("repeat"), "repeat")
    length = info.shape[0]
    if not isinstance(n, int) or not isinstance(length, int):
        raise ItemError(
            f"load_row: a repeated vector needs a static length and count; '{info.name}' has "
            f"{length} values, repeated {n} times",
            "repeat",
            "give the dims sizes under dims:",
        )
    return (VType("row", length * int(n)),)


def _lower(lc, op):
    t = op.get("load_row")
    info = lc.info(t)
    n = repeats(op, lc.fold)
    width = info.shape[0] * n if n != 1 else info.shape[0]  # a plain row keeps its dim text
    if width != lc.width:
        # A half-width row in acc_pair mode is a per-pair table (RoPE frequencies): the
        # consumer decides how it is passed, so defer it (a repeated one is shorter than the
        # W/2 pairs its consumer reads: rope's table repeats it, ``_pairs.rope_lower``).
        lc.bind(op.results[0], f"<row {t}>", "deferred", tensor=t)
        return
    # A uint8/bool mask row is converted to fp32 by the runtime (``to_fp32``), as int columns
    # are, and so is a repeated one: the vector loads then read 4-byte elements only.
    if n != 1:
        dtype, transform = "fp32", "repeat"
    elif info.dtype in MASK_DTYPES:
        dtype, transform = "fp32", "to_fp32"
    else:
        dtype, transform = info.dtype, ""
    name = lc.param(t, "row", lc.op("RowVecLoad", lc.ident(t)), (1, width), dtype, transform)
    lc.bind(op.results[0], name, lc.form_of_width(width))


def _host(hc, op):
    t = op.get("load_row")
    lanes = hc.value_lanes(op.results[0])  # RoPE's W/2 frequencies: one per pair, one lane
    offsets = hc.offsets(lanes)
    if op.get("repeat") is not None:
        length = hc.info_of(t).shape[0]
        offsets = f"({offsets}) % {length}"
    block = f"tl.load({hc.ptr(t)} + {offsets}{hc.mask_arg(lanes)})"
    hc.let_block(op.results[0], hc.fp32(block, t))


def _reference(rt, op, ins, tensors):
    v = rt.load(tensors["load_row"]).reshape(1, -1)
    return (v.repeat(1, repeats(op, rt.fold)),)


PRIMITIVE = Primitive(
    name="load_row",
    family=VECTOR,
    summary="Read a length-W vector, one value per column, broadcast over rows (repeat: n reads "
    "a per-head vector repeated n times).",
    example="- {load_row: gamma, as: g}",
    schema=item_schema(
        "load_row",
        TENSOR_REF,
        {"repeat": {**DIM_REF, "description": "read the vector repeated n times (per head)"}},
        result="optional",
    ),
    operands=(),
    tensors=("load_row",),
    infer=_infer,
    reference=_reference,
    lower=_lower,
    prepass=True,
    host=_host,
)
