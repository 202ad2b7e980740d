"""`gelu`: GELU, the tanh approximation (the default) or the exact, erf form (`approximate: none`).

* `{gelu: z, as: h}` (or `approximate: tanh`): 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))),
  torch's `gelu(approximate='tanh')`, as in GPT-2 and Gemma; QuACK's `gelu_tanh_approx` in a
  GEMM epilogue.
* `{gelu: z, approximate: none, as: h}`: 0.5 z (1 + erf(z / sqrt 2)), torch's default
  `gelu(approximate='none')`, as in BERT, ViT and GPT-NeoX; one expression over the registered
  `erf` (`cute.math.erf`, CUDA's erff, in a GEMM epilogue; `tl.math.erf` in a host step), in
  torch's own arrangement of it (its CUDA kernel's), so a kernel tracks torch to fp32 rounding.

The key, not a separate `gelu_erf` primitive, because it keeps every existing build: an item
without it is the tanh form, which is what `gelu` was before the key existed, so such an item's
generated text and `cache_key()` are unchanged (`_forms.with_forms`). That is why the default is
NOT torch's: in `equivalent_to`, `gelu(z)` is torch's, the erf form, and a chain of plain `gelu`
items states `gelu(z, approximate='tanh')` (`coda check --math` names the mismatch when the two
disagree). Mutants: the other form (and `silu`).
"""

from coda_spec.primitives._composite import composite
from coda_spec.primitives._elementwise import HOST_GELU, unary
from coda_spec.primitives._forms import with_forms

TANH = unary(
    "gelu",
    lambda rt, x: rt.torch.nn.functional.gelu(x, approximate="tanh"),
    summary="GELU: tanh approximation (default, GPT-2's; torch's approximate='tanh') or "
    "`approximate: none`, the exact erf form (BERT's; torch's default).",
    example="- {gelu: acc, as: act}",
    siblings=("silu",),
    lower="gelu_tanh_approx",
    host=HOST_GELU,
)

# torch's CUDA kernel: x * 0.5 * (1 + erf(x * M_SQRT1_2))
ERF = composite(
    "gelu",
    body="x * 0.5 * (1 + erf(x * 0.7071067811865476))",
    summary=TANH.summary,
    example="- {gelu: acc, approximate: none, as: act}",
    siblings=("silu",),
)

PRIMITIVE = with_forms(
    "approximate",
    {"tanh": TANH, "none": ERF},
    default="tanh",
    doc="tanh (the default): the tanh approximation, torch's approximate='tanh'; none: the "
    "exact erf form, torch's approximate='none' (torch's default, not coda's: an item "
    "without the key is tanh, as before the key existed)",
)
