"""`rsqrt`: Reciprocal square root, 1 / sqrt(x)."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "rsqrt",
    lambda rt, x: rt.torch.rsqrt(x),
    summary="Reciprocal square root, 1 / sqrt(x).",
    example="- {rsqrt: ms, as: rstd}",
    siblings=("sqrt",),
    lower="cute.math.rsqrt",
    host="tl.rsqrt({x})",
)
