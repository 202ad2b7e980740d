"""`gather_col`: per row, pick the value at one column given by an index tensor (target logit).

Only the tile holding row m's target column writes that row's result; rows whose index equals the
tensor's ``ignore_index`` are declared untouched by design (the reference gives 0 there, and
verify does not read those slots).
"""

from coda_spec.primitives._loads import (
    host_hit,
    index_tensor,
    need_index,
    need_rank,
    need_rows,
)
from coda_spec.primitives.base import (
    TENSOR_REF,
    VALUE_REF,
    VECTOR,
    Primitive,
    VType,
    item_schema,
    need_tile,
)


def _infer(tc, op, ins, tensors):
    need_tile(ins["gather_col"], "gather_col", "gather_col")
    info = tensors["index"]
    need_rank(info, 1, "gather_col index", "index")
    need_rows(tc, info, "gather_col index", "index")
    need_index(info, "gather_col", "index")
    return (VType("col"),)


def _reference(rt, op, ins, tensors):
    idx, valid = index_tensor(rt, tensors["index"], rt.decl(op.get("index")))
    picked = ins["gather_col"].gather(1, idx.reshape(-1, 1))
    return (picked * valid.reshape(-1, 1).to(picked.dtype),)


def _lower(lc, op):
    x = lc.v(op.get("gather_col"))
    if x.form != "s":
        raise lc.error("gather_col reads a plain (unpaired) tile")
    lc.select(op.results[0], x.expr, op.get("index"))


def _host(hc, op):
    """Host kernels: a masked select-and-sum across the row's chunks, finished after the loop.
    Exactly one column matches (none on an ignored row, which gives 0 as the reference does)."""
    x = hc.value(op.get("gather_col"))
    t = op.get("index")
    idx, info = hc.index(t), hc.info_of(t)
    name = op.results[0]
    acc = hc.fresh(f"{hc.ident(name)}_acc")
    hc.pre(f"{acc} = tl.zeros([BLOCK], dtype=tl.float32)")
    n = len(x.lanes)
    picks = [
        f"tl.where({host_hit(hc.column(n, i), idx, info)}, {lane}, 0.0)"
        for i, lane in enumerate(x.lanes)
    ]
    hc.line(f"{acc} += {' + '.join(picks)}")
    hc.finish(name, f"tl.sum({acc}, axis=0)")


PRIMITIVE = Primitive(
    name="gather_col",
    family=VECTOR,
    summary="Per row, the value at column `index[m]` (e.g. the target logit); a column vector.",
    example="- {gather_col: logits, index: target, as: target_logit}",
    schema=item_schema("gather_col", VALUE_REF, {"index": TENSOR_REF}, required=("index",)),
    operands=("gather_col",),
    tensors=("index",),
    infer=_infer,
    reference=_reference,
    lower=_lower,
    host=_host,
)
