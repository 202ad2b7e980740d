"""`max`: elementwise maximum of two operands (values or a number literal).

`{max: [x, 0.0], as: y}` is ReLU; `{max: [a, b], as: y}` of two values is torch.maximum. Both
lowerings are one instruction per element: `lane_max` (``arith.maxnumf``, as QuACK's `relu`)
in GEMM epilogues, `tl.maximum` in host steps. A NaN operand yields the other operand there
(IEEE maximumNumber), where torch gives NaN; the fp64 proof never draws a NaN.
"""

from coda_spec.primitives._elementwise import binary, extremum

PRIMITIVE = binary(
    "max",
    extremum("maximum", "clamp_min"),
    summary="Elementwise maximum of two operands (a value and a number, or two values).",
    example="- {max: [acc, -448.0], as: floored}",
    siblings=("min",),
    call=("lane_max", "tl.maximum"),
)
