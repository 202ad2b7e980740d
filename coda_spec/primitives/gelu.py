"""`gelu`: GELU, tanh approximation (as in GPT-2 and torch's approximate='tanh')."""

from coda_spec.primitives._elementwise import HOST_GELU, unary

PRIMITIVE = unary(
    "gelu",
    lambda rt, x: rt.torch.nn.functional.gelu(x, approximate="tanh"),
    summary="GELU, tanh approximation (as in GPT-2 and torch's approximate='tanh').",
    example="- {gelu: acc, as: act}",
    siblings=("silu",),
    lower="gelu_tanh_approx",
    host=HOST_GELU,
)
