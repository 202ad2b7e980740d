"""`neg`: Negation, -x."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "neg",
    lambda rt, x: -x,
    summary="Negation, -x.",
    example="- {neg: g, as: minus_g}",
    siblings=("square",),
    lower="-{x}",
    host="-{x}",
)
