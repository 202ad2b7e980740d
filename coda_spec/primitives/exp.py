"""`exp`: Natural exponential."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "exp",
    lambda rt, x: rt.torch.exp(x),
    summary="Natural exponential.",
    example="- {exp: shifted, as: p}",
    siblings=("sigmoid",),
    lower="cute.math.exp",
    host="tl.exp({x})",
)
