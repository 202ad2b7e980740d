"""`square`: Square, x * x."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "square",
    lambda rt, x: x * x,
    summary="Square, x * x.",
    example="- {square: x1, as: x1_sq}",
    siblings=("neg",),
    lower="{x} * {x}",
    host="{x} * {x}",
)
