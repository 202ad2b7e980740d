"""`valid`: a column vector, 1 for rows whose index is not the tensor's ``ignore_index``, else 0.

Multiply by it to zero the loss and gradient of padding rows, as cross-entropy's
``ignore_index`` does. It lowers in host steps and in every GEMM epilogue (a per-row compare of
the index, converted to fp32, with ``ignore_index``; exact for an ``ignore_index`` below 2^24 in
magnitude), but not inside a ``prepass`` statistic's input:

<!-- yaml: fragment -->
```yaml
- {valid: target, as: keep}
- {load_col: d_loss}
- {mul: [d_loss, keep], as: g}          # the incoming gradient, zero on ignored rows
```
"""

from coda_spec.dtypes import FP32_EXACT
from coda_spec.errors import ItemError
from coda_spec.primitives._loads import (
    col_operand,
    index_tensor,
    need_index,
    need_rank,
    need_rows,
)
from coda_spec.primitives.base import TENSOR_REF, VECTOR, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["valid"]
    need_rank(info, 1, "valid", "valid")
    need_rows(tc, info, "valid", "valid")
    need_index(info, "valid", "valid")
    if info.ignore_index is None:
        raise ItemError(
            f"'{info.name}' declares no ignore_index, so every row is valid",
            "valid",
            f"add ignore_index: -100 to tensor '{info.name}'",
        )
    if tc.has_acc and abs(info.ignore_index) >= FP32_EXACT:
        raise ItemError(
            f"valid: '{info.name}' has ignore_index {info.ignore_index}; a GEMM epilogue compares "
            "indices in fp32, exact below 2^24 in magnitude",
            "valid",
            f"declare a smaller ignore_index for '{info.name}', e.g. -100",
        )
    return (VType("col"),)


def _reference(rt, op, ins, tensors):
    _, valid = index_tensor(rt, tensors["valid"], rt.decl(op.get("valid")))
    return (valid.reshape(-1, 1).to(rt.dtype),)


def _lower(lc, op):
    """``select(index != ignore_index, 1.0, 0.0)``, once per row."""
    t = op.get("valid")
    idx, ignore = col_operand(lc, t), lc.info(t).ignore_index
    lc.let(op.results[0], lc.call("select", f"{idx} != {float(ignore)!r}", "1.0", "0.0"), "s")


def _host(hc, op):
    t = op.get("valid")
    ignore = hc.info_of(t).ignore_index
    hc.let(op.results[0], f"({hc.index(t)} != {ignore}).to(tl.float32)")


PRIMITIVE = Primitive(
    name="valid",
    family=VECTOR,
    summary="Per-row 1/0 mask: 1 unless index[m] == ignore_index.",
    example="- {valid: target, as: keep}",
    schema=item_schema("valid", TENSOR_REF),
    operands=(),
    tensors=("valid",),
    infer=_infer,
    reference=_reference,
    lower=_lower,
    host=_host,
)
