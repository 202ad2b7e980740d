"""`gelu`: GELU, the tanh approximation (the default) or the exact, erf form (`approximate: none`).

* `{gelu: z, as: h}` (or `approximate: tanh`): 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))),
  torch's `gelu(approximate='tanh')`, as in GPT-2 and Gemma; QuACK's `gelu_tanh_approx` in a
  GEMM epilogue.
* `{gelu: z, approximate: none, as: h}`: 0.5 z (1 + erf(z / sqrt 2)), torch's default
  `gelu(approximate='none')`, as in BERT, ViT and GPT-NeoX; one expression over the registered
  `erf` (`cute.math.erf`, CUDA's erff, in a GEMM epilogue; `tl.math.erf` in a host step), in
  torch's own arrangement of it (its CUDA kernel's), so a kernel tracks torch to fp32 rounding.

Mind the default: it is NOT torch's. In `equivalent_to`, `gelu(z)` is torch's, the erf form, so
a chain of plain `gelu` items states `gelu(z, approximate='tanh')` there, and an
`approximate: none` item `gelu(z)`. When they disagree, `coda check --math` says so: an output
that fails its proof but is proven with every `gelu(...)` of `equivalent_to` in the other form
gets that as its hint. `coda grad` derives `dgelu` of the item's form.

Why a key and not a separate `gelu_erf` primitive, and why tanh is the default: an item without
the key is what `gelu` was before the key existed, with the same generated text and the same
`cache_key()` (`_forms.with_forms`), so every existing spec keeps its build address. Mutants:
the other form, and `silu`.
"""

import ast

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


FORM_HINT = (
    "the chain's GELU and equivalent_to's are different forms: with its gelu(...) calls in "
    "the other form this output is proven. A gelu (or dgelu) item is the tanh approximation "
    "unless it says 'approximate: none' (the exact erf form; geglu and dgeglu are tanh only), "
    "while gelu(x) in equivalent_to is torch's, the erf form unless it says "
    "approximate='tanh'; make the two agree"
)


class _Swap(ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        if not (isinstance(node.func, ast.Name) and node.func.id == "gelu"):
            return node
        given = [k for k in node.keywords if k.arg == "approximate"]
        form = given[0].value.value if given and isinstance(given[0].value, ast.Constant) else None
        if given and form not in ("none", "tanh"):
            return node  # not a form this swap knows (a name, a typo): left as written
        other = "none" if form == "tanh" else "tanh"
        rest = [k for k in node.keywords if k.arg != "approximate"]
        node.keywords = [*rest, ast.keyword("approximate", ast.Constant(other))]
        return node


def other_form(math: str) -> str | None:
    """``math`` (an ``equivalent_to``) with every ``gelu(...)`` call in the other form (tanh <->
    erf, torch's default ``approximate='none'`` when a call gives none), or None when it calls
    no ``gelu`` (or does not parse: the proof reports that itself)."""
    try:
        tree = ast.parse(math)
    except SyntaxError:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    if not any(isinstance(c.func, ast.Name) and c.func.id == "gelu" for c in calls):
        return None
    return ast.unparse(_Swap().visit(tree))
