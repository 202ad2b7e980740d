"""`sqrt`: Square root."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "sqrt",
    lambda rt, x: rt.torch.sqrt(x),
    summary="Square root.",
    example="- {sqrt: var, as: std}",
    siblings=("rsqrt",),
    lower="cute.math.sqrt",
    host="tl.sqrt_rn({x})",  # IEEE-rounded, as torch (tl.sqrt is approximate)
)
