"""`onehot`: a tile that is 1 at column ``index[m]`` of row m and 0 elsewhere.

Rows whose index is the tensor's ``ignore_index``, or outside ``[0, W)``, are all zero. With
``exp``, ``sub`` and ``mul`` this expresses the cross-entropy gradient ``softmax(z) -
onehot(target)`` without materialising the one-hot matrix: in a host step, or in the epilogue of
the logits GEMM itself, where the M x V logits are never written (CODA's LM-head backward):

<!-- yaml: fragment -->
```yaml
- {load_col: lse}
- {sub: [logits, lse], as: shifted}
- {exp: shifted, as: p}                 # softmax from the forward's lse
- {onehot: target, as: y}
- {sub: [p, y], as: dce}                # d loss / d logits, per unit of incoming gradient
```

In a GEMM epilogue it compares the global column of each element with ``index[m]`` in fp32
(exact for N up to 2^24): the kernel reads a column table (0, 1, ..., N - 1, which the runtime
fills once per N and device) and the index as a per-row value (int32 converted to fp32). It
lowers in plain and ``acc_pair`` kernels (there a pair of adjacent columns), not in
``packed_pair`` kernels, nor inside a ``prepass`` statistic's input; ``coda check`` says so at the
item.
"""

from coda_spec.primitives._loads import (
    NO_PACKED_TABLE,
    host_hit,
    index_tensor,
    lower_onehot,
    need_exact_width,
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
    need_exact_width(tc, "onehot", "onehot")
    return (VType("tile", tc.width),)


def _reference(rt, op, ins, tensors):
    idx, valid = index_tensor(rt, tensors["onehot"], rt.decl(op.get("onehot")))
    cols = rt.torch.arange(rt.width, device=idx.device).reshape(1, -1)
    hit = (cols == idx.reshape(-1, 1)) & valid.reshape(-1, 1)
    return (hit.to(rt.dtype),)


def _lower(lc, op):
    lower_onehot(lc, op.results[0], op.get("onehot"))


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
    lower=_lower,
    no_mode={"packed_pair": NO_PACKED_TABLE},
    host=_host,
)
