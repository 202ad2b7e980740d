"""`abs`: absolute value, |x| (an amax's operand, a magnitude)."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "abs",
    lambda rt, x: rt.torch.abs(x),
    summary="Absolute value, |x|.",
    example="- {abs: acc, as: magnitude}",
    siblings=("neg", "relu"),
    lower="cute.math.abs",
    host="tl.abs({x})",
)
