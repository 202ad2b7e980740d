"""`tanh`: Hyperbolic tangent."""

from coda_spec.primitives._elementwise import HOST_TANH, unary

PRIMITIVE = unary(
    "tanh",
    lambda rt, x: rt.torch.tanh(x),
    summary="Hyperbolic tangent.",
    example="- {tanh: acc, as: t}",
    siblings=("sigmoid",),
    lower="tanh",
    host=HOST_TANH,
)
