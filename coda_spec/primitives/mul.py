"""`mul`: Elementwise product; times a column vector it is a per-row scale (rstd)."""

from coda_spec.primitives._elementwise import binary

PRIMITIVE = binary(
    "mul",
    lambda rt, a, b: a * b,
    summary="Elementwise product; times a column vector it is a per-row scale (rstd).",
    example="- {mul: [acc, r], as: z}",
    siblings=(
        "add",
        "div",
    ),
    symbol="*",
)
