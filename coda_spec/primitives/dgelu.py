"""`dgelu`: the backward of a plain (non-gated) GELU, tanh approximation: dz = dy * gelu'(z).

`{dgelu: [dy, z], as: dz}`: `dy` the gradient arriving at GELU's output, `z` its saved
input (the pre-activation). With u = k (z + 0.044715 z^3), k = sqrt(2 / pi), t = tanh(u):
gelu(z) = 0.5 z (1 + t), so gelu'(z) = 0.5 (1 + t) + 0.5 z (1 - t^2) k (1 + 3 * 0.044715 z^2),
the derivative of torch's `gelu(approximate='tanh')`. It is one expression over registered
primitives (`_composite.composite`); z^2 and tanh(u) are computed once (0.39894... is
0.5 k). A GELU MLP's down-projection
dgrad applies it in its epilogue (`dy` is the accumulator, `z` a loaded tile), where a gated
MLP uses `dgeglu`.
"""

from coda_spec.primitives._composite import composite

PRIMITIVE = composite(
    "dgelu",
    operands=("dy", "z"),
    body="""
z2 = z * z
t = tanh(0.7978845608028654 * (z + 0.044715 * z2 * z))
dy * (0.5 * (1 + t) + 0.3989422804014327 * z * (1 - t * t) * (1 + 0.134145 * z2))
""",
    summary="GELU's backward (tanh approximation): dy * gelu'(z), z the saved input.",
    example="- {dgelu: [acc, z], as: dz}",
)
