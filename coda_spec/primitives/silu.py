"""`silu`: SiLU (swish), x * sigmoid(x)."""

from coda_spec.primitives._elementwise import HOST_SILU, unary

PRIMITIVE = unary(
    "silu",
    lambda rt, x: x * rt.torch.sigmoid(x),
    summary="SiLU (swish), x * sigmoid(x).",
    example="- {silu: acc, as: act}",
    siblings=("gelu",),
    lower="silu",
    host=HOST_SILU,
)
