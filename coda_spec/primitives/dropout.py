"""`dropout`: inverted dropout of a value by a uniform: ``x * (u >= p) / (1 - p)``.

``{dropout: [x, u], p: 0.1, as: y}`` keeps ``x`` scaled by ``1 / (1 - p)`` where ``u >= p`` and
zeroes it elsewhere, so each element survives with probability ``1 - p`` and the expectation is
``x``. ``u`` is a uniform in [0, 1), normally a ``philox`` value (a counter-based generator keyed
by a seed and an offset): the backward pass regenerates the same ``u`` from the same seed and
offset and applies the same ``dropout`` to the incoming gradient, the mask being a constant. ``p``
is an immediate in [0, 1), compiled into the kernel.

<!-- yaml: fragment -->
```yaml
- {philox: acc, seed: seed, offset: offset, as: u}
- {dropout: [acc, u], p: 0.1, as: h}
```

Both lowerings are one compare and one select per element: ``select(u >= p, x * s, 0.0)`` with
``s = 1 / (1 - p)`` rounded to fp32 (the reference divides in fp64: a rounding inside the verify
tolerance), ``tl.where`` in host steps. Because ``philox``'s uniforms are multiples of 2^-24,
exact in fp32, the kernels and the fp64 reference draw the same mask for any ``p``.
"""

from coda_spec.primitives.base import (
    ELEMENTWISE,
    OPERAND,
    Primitive,
    broadcast,
    item_schema,
    moved,
)
from coda_spec.primitives.lower_api import forms_join


def _p(op) -> float:
    return float(op.get("p"))


def _infer(tc, op, ins, tensors):
    return (broadcast(list(ins["dropout"]), "'dropout'"),)


def _reference(rt, op, ins, tensors):
    x, u = ins["dropout"]
    p = _p(op)
    return (x * (u >= p).to(rt.dtype) / (1.0 - p),)


def _lower(lc, op):
    x, u = (lc.vs(v) for v in op.get("dropout"))
    keep = f"{u.expr} >= {_p(op)!r}"
    scaled = f"{x.expr} * {1.0 / (1.0 - _p(op))!r}"
    lc.let(op.results[0], lc.call("select", keep, scaled, "0.0"), forms_join(x, u))


def _host(hc, op):
    x, u = (hc.value(v) for v in op.get("dropout"))
    n = hc.lane_count(x, u)
    scale = 1.0 / (1.0 - _p(op))
    lanes = [
        f"tl.where({b} >= {_p(op)!r}, {a} * {scale!r}, 0.0)"
        for a, b in zip(hc.spread(x, n), hc.spread(u, n), strict=True)
    ]
    hc.let(op.results[0], lanes)


def _mutants(op):
    p = _p(op)
    moved_p = moved(p)
    return (op.with_arg("p", moved_p if moved_p < 1 else p / 2 + 0.01),)


PRIMITIVE = Primitive(
    name="dropout",
    family=ELEMENTWISE,
    summary="Inverted dropout by a uniform u: x * (u >= p) / (1 - p) (p an immediate in [0, 1)).",
    example="- {dropout: [acc, u], p: 0.1, as: h}",
    schema=item_schema(
        "dropout",
        {"type": "array", "items": OPERAND, "minItems": 2, "maxItems": 2},
        {"p": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}},
        ("p",),
    ),
    operands=("dropout",),
    infer=_infer,
    reference=_reference,
    mutants=_mutants,
    lower=_lower,
    host=_host,
)
