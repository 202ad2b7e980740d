"""`onehot`: a tile that is 1 at column ``index[m]`` of row m and 0 elsewhere.

Ignored rows (``ignore_index``) are all zero. With ``exp`` and ``sub`` this expresses the
cross-entropy gradient ``softmax(z) - onehot(target)`` without materialising the one-hot matrix.
"""

from coda_spec.primitives._loads import (
    host_hit,
    index_tensor,
    need_index,
    need_rank,
    need_rows,
)
from coda_spec.primitives.base import TENSOR_REF, VECTOR, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["onehot"]
    need_rank(info, 1, "onehot", "onehot")
    need_rows(tc, info, "onehot", "onehot")
    need_index(info, "onehot", "onehot")
    return (VType("tile", tc.width),)


def _reference(rt, op, ins, tensors):
    idx, valid = index_tensor(rt, tensors["onehot"], rt.decl(op.get("onehot")))
    cols = rt.torch.arange(rt.width, device=idx.device).reshape(1, -1)
    hit = (cols == idx.reshape(-1, 1)) & valid.reshape(-1, 1)
    return (hit.to(rt.dtype),)


def _host(hc, op):
    t = op.get("onehot")
    idx, info = hc.index(t), hc.info_of(t)
    n = hc.value_lanes(op.results[0])
    hits = [host_hit(hc.column(n, lane), idx, info) for lane in range(n)]
    hc.let(op.results[0], [f"({hit}).to(tl.float32)" for hit in hits])


PRIMITIVE = Primitive(
    name="onehot",
    family=VECTOR,
    summary="A tile of the accumulator's width: 1 where column == index[m], else 0.",
    example="- {onehot: target, as: y}",
    schema=item_schema("onehot", TENSOR_REF),
    operands=(),
    tensors=("onehot",),
    infer=_infer,
    reference=_reference,
    host=_host,
)
