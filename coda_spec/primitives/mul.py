"""`mul`: Elementwise product; multiplying by a column vector applies a per-row scale such as rstd."""

from coda_spec.primitives._elementwise import binary

PRIMITIVE = binary(
    "mul",
    lambda rt, a, b: a * b,
    summary="Elementwise product; multiplying by a column vector applies a per-row scale such as rstd.",
    example="- {mul: [acc, r], as: z}",
    siblings=(
        "add",
        "div",
    ),
)
