"""The `max`, `min` and `abs` primitives: reference math, mutants, validation, the CuTe text
(``lane_max``/``lane_min`` of ``coda_spec.lower.kernel_lib``, ``cute.math.abs``) in plain and
acc_pair kernels, and the Triton text of host steps. Their proof with every mutant killed is
``tests/specs_extra/fp8_saturate.yaml`` (tests/test_clamp.py)."""

from __future__ import annotations

import pytest

from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.errors import SpecError
from coda_spec.ir import Loc, Op
from coda_spec.lower.module import lower_spec
from coda_spec.primitives import registry


def _rt():
    from coda_spec.prove.reference import PRECISIONS, RefCtx

    return RefCtx(PRECISIONS["fp64"], {}, None)


def _ref(prim, arg, ins):
    op = Op(prim, ((prim, arg),), ("y",), Loc(0, 0, ()))
    return registry()[prim].reference(_rt(), op, {prim: ins}, {})[0]


def test_references_are_torch_maximum_minimum_abs():
    torch = pytest.importorskip("torch")
    a, b = torch.randn(2, 64, 48, dtype=torch.float64)
    torch.testing.assert_close(_ref("max", ["a", "b"], [a, b]), torch.maximum(a, b))
    torch.testing.assert_close(_ref("min", ["a", "b"], [a, b]), torch.minimum(a, b))
    torch.testing.assert_close(_ref("max", ["a", 0.5], [a, 0.5]), a.clamp_min(0.5))
    torch.testing.assert_close(_ref("min", [0.5, "a"], [0.5, a]), a.clamp_max(0.5))
    torch.testing.assert_close(_ref("abs", "a", a), a.abs())


def test_mutants_swap_max_and_min_and_abs_for_neg_or_relu():
    op = Op("max", (("max", ["a", 1.0]),), ("y",), Loc(0, 0, ()))
    assert [(m.prim, dict(m.args)) for m in registry()["max"].mutants(op)] == [
        ("min", {"min": ["a", 1.0]})
    ]
    op = Op("abs", (("abs", "a"),), ("y",), Loc(0, 0, ()))
    assert [m.prim for m in registry()["abs"].mutants(op)] == ["neg", "relu"]


_TEXT = """\
coda: 1
name: mm
dims: {{M: dynamic, D: 64, V: 256}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [V, D], dtype: bf16}}
  r: {{shape: [M], dtype: fp32}}
steps:
  - kernel: head
    gemm: {{a: h, b: w.T}}
    epilogue:
      - {{load_col: r}}
{items}
      - {{store: y}}
outputs: {{y: bf16}}
"""


def _body(items: str, text=_TEXT) -> list[str]:
    lowered = lower_spec(
        check_source(parse_text("mm.yaml", text.format(items=items))), BuildConfig()
    )
    [kernel] = lowered.kernels
    return [ln.strip() for ln in kernel.body if not ln.strip().startswith("#")]


def test_two_numbers_are_refused_located():
    with pytest.raises(SpecError) as e:
        check_source(parse_text("mm.yaml", _TEXT.format(items="      - {max: [1.0, 2.0], as: y}")))
    [d] = e.value.diagnostics
    assert (d.line, d.col) == (
        13,
        15,
    ) and d.message == "'max' of two numbers; write the result as a literal"


def test_plain_lowering():
    items = "\n".join(
        [
            "      - {max: [acc, r], as: m}",
            "      - {min: [2.0, m], as: n}",
            "      - {abs: n, as: y}",
        ]
    )
    assert _body(items)[:3] == [
        "m = lane_max(acc, r)",
        "n = lane_min(2.0, m)",
        "y = cute.math.abs(n)",
    ]


_PAIRS = """\
coda: 1
name: mm_pairs
dims: {{M: dynamic, D: 64, F: 128}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: ["2*F", D], dtype: bf16}}
  r: {{shape: [M], dtype: fp32}}
steps:
  - kernel: gate_up
    gemm: {{a: h, b: w.T}}
    epilogue:
      - {{load_col: r}}
{items}
      - {{swiglu: z, as: y}}
      - {{store: y}}
outputs: {{y: bf16}}
"""


def test_acc_pair_lowering_passes_pairs_to_the_lane_helpers():
    items = "\n".join(["      - {max: [acc, r], as: m}", "      - {abs: m, as: z}"])
    body = _body(items, _PAIRS)
    assert "m = lane_max(acc, r)" in body
    assert "z = lanewise(cute.math.abs, m)" in body


def test_host_text():
    from coda_spec.lower.host_kernel import host_kernel

    text = """\
coda: 1
name: host_mm
dims: {M: dynamic, W: 40}
tensors:
  x: {shape: [M, W], dtype: fp32}
  s: {shape: [M], dtype: fp32}
steps:
  - host: mm
    over: x
    body:
      - {load_tile: x}
      - {load_col: s}
      - {max: [x, s], as: a}
      - {min: [a, 3.0], as: b}
      - {abs: b, as: y}
      - {store: y, dtype: fp32}
outputs: {y: fp32}
"""
    src = host_kernel(check_source(parse_text("host_mm.yaml", text)), "mm").source
    assert "a = tl.maximum(x, s)" in src and "b = tl.minimum(a, 3.0)" in src
    assert "y = tl.abs(b)" in src
