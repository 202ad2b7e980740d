"""Checks every epilogue primitive's tests share: that an item lowers, in a GEMM epilogue of
either pairing mode, to exactly the text of the items it is spelled as (a composite's or a
chained primitive's contract: its kernel reads as its constituents' lines)."""

from __future__ import annotations

from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.lower.module import lower_spec

# One kernel over acc = h @ w^T (M x F) with a loaded tile z, its items, then: ``plain``, a store
# of the result; ``acc_pair`` (w is 2F rows), SwiGLU of the result, which pairs the kernel.
_KERNEL = """\
coda: 1
name: probe
dims: {{M: dynamic, D: 64, F: 128}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [{rows}, D], dtype: bf16}}
  z: {{shape: [M, {cols}], dtype: bf16}}
steps:
  - kernel: k
    gemm: {{a: h, b: w.T}}
    epilogue:
      - {{load_tile: z}}
{items}
{tail}
outputs: {{{out}: bf16}}
"""


def epilogue_body(text: str) -> list[str]:
    """The statements of the one generated epilogue fn of spec ``text`` (comments dropped)."""
    lowered = lower_spec(check_source(parse_text("probe.yaml", text)), BuildConfig())
    [kernel] = lowered.kernels
    return [ln.strip() for ln in kernel.body if not ln.strip().startswith("#")]


def probe_spec(items: list[str], result: str, pairs: bool) -> str:
    """A one-kernel spec whose epilogue is ``items`` (YAML flow mappings) making ``result``."""
    body = "\n".join(f"      - {item}" for item in items)
    if pairs:
        tail = f"      - {{swiglu: {result}, as: out}}\n      - {{store: out}}"
        return _KERNEL.format(rows="2*F", cols="2*F", items=body, tail=tail, out="out")
    tail = f"      - {{store: {result}}}"
    return _KERNEL.format(rows="F", cols="F", items=body, tail=tail, out=result)


def lowers_as(item: str, spelled: list[str], result: str, pairs: bool) -> list[str]:
    """Assert that ``item`` lowers to the same statements as ``spelled``; returns them."""
    got = epilogue_body(probe_spec([item], result, pairs))
    want = epilogue_body(probe_spec(spelled, result, pairs))
    assert got == want, (got, want)
    return got
