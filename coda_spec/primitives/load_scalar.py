"""`load_scalar`: read one number from device memory (a learned or scheduled scale).

An immediate constant needs no load: write it as a literal operand (``{mul: [acc, 0.5]}``) or
use ``scale``. A device scalar can change between calls without recompiling.
"""

from coda_spec.errors import ItemError
from coda_spec.primitives.base import TENSOR_REF, VECTOR, Primitive, VType, item_schema


def _infer(tc, op, ins, tensors):
    info = tensors["load_scalar"]
    if tuple(info.shape) not in ((), (1,)):
        raise ItemError(
            f"load_scalar needs a tensor of shape [] or [1]; '{info.name}' is {list(info.shape)}",
            "load_scalar",
        )
    return (VType("scalar"),)


def _lower(lc, op):
    t = op.get("load_scalar")
    name = lc.param(t, "scalar", lc.op("Scalar", lc.ident(t)), (), "fp32")
    lc.bind(op.results[0], name, "s")


def _host(hc, op):
    t = op.get("load_scalar")
    hc.let(op.results[0], hc.fp32(f"tl.load({hc.ptr(t)})", t))


PRIMITIVE = Primitive(
    name="load_scalar",
    family=VECTOR,
    summary="Read a device scalar (shape [] or [1]).",
    example="- {load_scalar: alpha}",
    schema=item_schema("load_scalar", TENSOR_REF, result="optional"),
    operands=(),
    tensors=("load_scalar",),
    infer=_infer,
    reference=lambda rt, op, ins, tensors: (rt.load(tensors["load_scalar"]).reshape(()),),
    lower=_lower,
    prepass=True,
    host=_host,
)
