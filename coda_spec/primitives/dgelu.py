"""`dgelu`: the backward of a plain (non-gated) GELU: dz = dy * gelu'(z), either form of `gelu`.

`{dgelu: [dy, z], as: dz}`: `dy` the gradient arriving at GELU's output, `z` its saved
input (the pre-activation). A GELU MLP's down-projection dgrad applies it in its epilogue
(`dy` is the accumulator, `z` a loaded tile), where a gated MLP uses `dgeglu`. `approximate:`
names the form of the forward `gelu`, as there (`_forms.with_forms`; the default is tanh, what
`dgelu` was before the key, so existing builds keep their addresses):

* tanh (the default): with u = k (z + 0.044715 z^3), k = sqrt(2 / pi), t = tanh(u):
  gelu(z) = 0.5 z (1 + t), so gelu'(z) = 0.5 (1 + t) + 0.5 z (1 - t^2) k (1 + 3 * 0.044715
  z^2), the derivative of torch's `gelu(approximate='tanh')`; z^2 and tanh(u) are computed once
  (0.39894... is 0.5 k).
* none (erf): gelu'(z) = Phi(z) + z phi(z), Phi(z) = 0.5 (1 + erf(z / sqrt 2)) and
  phi(z) = exp(-z^2 / 2) / sqrt(2 pi) (0.39894...), in torch's arrangement (its CUDA
  `GeluBackwardCUDAKernelImpl`).

Each form is one expression over registered primitives (`_composite.composite`).
"""

from coda_spec.primitives._composite import composite
from coda_spec.primitives._forms import with_forms

SUMMARY = (
    "GELU's backward: dy * gelu'(z), z the saved input; `approximate:` as on `gelu` "
    "(tanh by default, or none: the erf form)."
)

TANH = composite(
    "dgelu",
    operands=("dy", "z"),
    body="""
z2 = z * z
t = tanh(0.7978845608028654 * (z + 0.044715 * z2 * z))
dy * (0.5 * (1 + t) + 0.3989422804014327 * z * (1 - t * t) * (1 + 0.134145 * z2))
""",
    summary=SUMMARY,
    example="- {dgelu: [acc, z], as: dz}",
)

ERF = composite(
    "dgelu",
    operands=("dy", "z"),
    body="""
cdf = 0.5 * (1 + erf(z * 0.7071067811865476))
dy * (cdf + z * (0.3989422804014327 * exp(-0.5 * z * z)))
""",
    summary=SUMMARY,
    example="- {dgelu: [acc, z], approximate: none, as: dz}",
)

PRIMITIVE = with_forms(
    "approximate",
    {"tanh": TANH, "none": ERF},
    default="tanh",
    doc="the form of the forward gelu: tanh (the default) or none (erf)",
)
