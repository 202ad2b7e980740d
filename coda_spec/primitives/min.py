"""`min`: elementwise minimum of two operands (values or a number literal).

`{min: [x, 448.0], as: y}` caps a value; `{min: [a, b], as: y}` of two values is
torch.minimum. Both lowerings are one instruction per element: `lane_min` (``arith.minnumf``)
in GEMM epilogues, `tl.minimum` in host steps. A NaN operand yields the other operand there
(IEEE minimumNumber), where torch gives NaN; the fp64 proof never draws a NaN.
"""

from coda_spec.primitives._elementwise import binary, extremum

PRIMITIVE = binary(
    "min",
    extremum("minimum", "clamp_max"),
    summary="Elementwise minimum of two operands (a value and a number, or two values).",
    example="- {min: [acc, 448.0], as: capped}",
    siblings=("max",),
    call=("lane_min", "tl.minimum"),
)
