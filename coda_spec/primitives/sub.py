"""`sub`: Elementwise difference a - b."""

from coda_spec.primitives._elementwise import binary

PRIMITIVE = binary(
    "sub",
    lambda rt, a, b: a - b,
    summary="Elementwise difference a - b.",
    example="- {sub: [acc, bias], as: y}",
    siblings=(
        "add",
        "mul",
    ),
    symbol="-",
)
