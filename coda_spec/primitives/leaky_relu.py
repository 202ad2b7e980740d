"""`leaky_relu`: x where x > 0, slope * x elsewhere (torch.nn.functional.leaky_relu).

One expression over registered primitives (`_composite.composite`): x * slope + relu(x) *
(1 - slope), which is x above 0 and slope * x below it for any slope; `1 - slope` is folded to
one constant when the item is known. `slope` is an immediate (compiled into the kernel).
"""

from coda_spec.primitives._composite import composite

PRIMITIVE = composite(
    "leaky_relu",
    params={"slope": {"type": "number"}},
    body="x * slope + relu(x) * (1 - slope)",
    summary="Leaky ReLU: x above 0, slope * x below it (torch's leaky_relu).",
    example="- {leaky_relu: acc, slope: 0.01, as: act}",
    siblings=("relu",),
)
