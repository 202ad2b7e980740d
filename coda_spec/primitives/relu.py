"""`relu`: ReLU, max(x, 0)."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "relu",
    lambda rt, x: rt.torch.clamp_min(x, 0.0),
    summary="ReLU, max(x, 0).",
    example="- {relu: acc, as: act}",
    siblings=("squared_relu",),
    lower="relu",
    host="tl.maximum({x}, 0.0)",
)
