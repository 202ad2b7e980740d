"""`add`: Elementwise sum of two values (broadcasting rows, columns and scalars)."""

from coda_spec.primitives._elementwise import binary

PRIMITIVE = binary(
    "add",
    lambda rt, a, b: a + b,
    summary="Elementwise sum of two values (broadcasting rows, columns and scalars).",
    example="- {add: [acc, res], as: x1}",
    siblings=(
        "sub",
        "mul",
    ),
    symbol="+",
)
