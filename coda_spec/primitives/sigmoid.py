"""`sigmoid`: Logistic sigmoid, 1 / (1 + exp(-x))."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "sigmoid",
    lambda rt, x: rt.torch.sigmoid(x),
    summary="Logistic sigmoid, 1 / (1 + exp(-x)).",
    example="- {sigmoid: acc, as: gate}",
    siblings=("tanh",),
    lower="sigmoid",
    host="tl.sigmoid({x})",
)
