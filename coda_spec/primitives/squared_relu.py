"""`squared_relu`: Squared ReLU, max(x, 0)^2 (Primer; relu² in nanoGPT speedruns)."""

from coda_spec.primitives._elementwise import unary

PRIMITIVE = unary(
    "squared_relu",
    lambda rt, x: rt.torch.clamp_min(x, 0.0) ** 2,
    summary="Squared ReLU, max(x, 0)^2 (Primer; relu² in nanoGPT speedruns).",
    example="- {squared_relu: acc, as: act}",
    siblings=("relu",),
    lower="relu_sq",
    host="tl.maximum({x}, 0.0) * tl.maximum({x}, 0.0)",
)
