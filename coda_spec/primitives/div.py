"""`div`: Elementwise quotient a / b."""

from coda_spec.primitives._elementwise import binary

PRIMITIVE = binary(
    "div",
    lambda rt, a, b: a / b,
    summary="Elementwise quotient a / b.",
    example="- {div: [acc, s], as: y}",
    siblings=(
        "mul",
        "sub",
    ),
    symbol="/",
)
