"""The `clamp` primitive (torch.clamp with number bounds, either optional): math, validation,
lowering and host kernel.

``clamp`` lives in ``coda_spec/primitives/clamp.py``, built by
``_elementwise.parameterised_unary`` as the chain max(x, min) -> min(., max) over the registered
``max`` and ``min`` primitives; ``tests/specs_extra/fp8_saturate.yaml`` (clamp, max, min, abs
and a row absmax) is proven by ``coda check --math`` with every mutant killed.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from coda_spec import cli
from coda_spec.check.frontend import check_file, check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.errors import EXIT_OK, SpecError
from coda_spec.ir import Loc, Op
from coda_spec.lower.module import lower_spec
from coda_spec.primitives import registry
from tests.conftest import ROOT

SPEC = ROOT / "tests" / "specs_extra" / "fp8_saturate.yaml"


def _op(prim: str, arg, **params) -> Op:
    return Op(prim, ((prim, arg), *params.items()), ("y",), Loc(0, 0, ()))


def _rt():
    from coda_spec.prove.reference import PRECISIONS, RefCtx

    return RefCtx(PRECISIONS["fp64"], {}, None)


@pytest.mark.parametrize("bounds", [{"min": -1.0, "max": 2.0}, {"min": 0.5}, {"max": -0.25}])
def test_reference_is_torch_clamp(bounds):
    torch = pytest.importorskip("torch")
    x = torch.linspace(-5.0, 5.0, 1001, dtype=torch.float64)
    (y,) = registry()["clamp"].reference(_rt(), _op("clamp", "x", **bounds), {"clamp": x}, {})
    torch.testing.assert_close(y, torch.clamp(x, **bounds), rtol=0, atol=0)
    assert (y != x).any() and (y == x).any()  # both sides of a bound are exercised


def test_mutants_move_and_drop_each_bound():
    muts = registry()["clamp"].mutants(_op("clamp", "x", min=-448.0, max=448.0))
    assert [dict(m.args) for m in muts] == [
        {"clamp": "x", "min": -223.75, "max": 448.0},  # base.moved: 0.5 b + 0.25 below 0
        {"clamp": "x", "min": -448.0, "max": 672.25},
        {"clamp": "x", "max": 448.0},
        {"clamp": "x", "min": -448.0},
    ]
    [one] = registry()["clamp"].mutants(_op("clamp", "x", max=1.0))
    assert dict(one.args) == {"clamp": "x", "max": 1.75}


_TEXT = """\
coda: 1
name: cl
dims: {{M: dynamic, D: 64, V: 256}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [V, D], dtype: bf16}}
steps:
  - kernel: head
    gemm: {{a: h, b: w.T}}
    epilogue:
      - {item}
      - {{store: y}}
outputs: {{y: bf16}}
"""


def _errors(item: str) -> list:
    with pytest.raises(SpecError) as e:
        check_source(parse_text("cl.yaml", _TEXT.format(item=item)))
    return [(d.line, d.col, d.message, d.hint) for d in e.value.diagnostics]


@pytest.mark.parametrize(
    "item",
    [
        "{clamp: acc, min: -448.0, max: 448.0, as: y}",
        "{max: 1, clamp: acc, min: 0, as: y}",  # key order does not matter
        "{clamp: acc, min: 0.0, as: y}",
        "{clamp: acc, max: 6, as: y}",
    ],
)
def test_valid_items_check_clean(item):
    [op] = check_source(parse_text("cl.yaml", _TEXT.format(item=item))).spec.steps[0].epilogue[:1]
    assert op.prim == "clamp"


def test_no_bound_is_located():
    [(line, col, msg, hint)] = _errors("{clamp: acc, as: y}")
    assert (line, col, msg) == (11, 9, "'clamp' needs a bound")
    assert "min: -448.0, max: 448.0" in hint


def test_min_above_max_is_located_at_min():
    [(line, col, msg, hint)] = _errors("{clamp: acc, min: 2.0, max: 1.0, as: y}")
    assert (line, col) == (11, 27)
    assert msg.startswith("min (2.0) is above max (1.0)") and hint == "swap the bounds"


def test_bound_must_be_a_number():
    [(line, col, msg, hint)] = _errors("{clamp: acc, max: '6', as: y}")
    assert (line, col, msg) == (11, 27, "expected a number, got string '6'")
    assert hint == "remove the quotes: max: 6"


def test_fp8_saturate_is_proven_by_check_math():
    res = CliRunner().invoke(cli.main, ["check", "--math", str(SPEC)])
    assert res.exit_code == EXIT_OK, res.output
    assert "3/3 forward outputs equal equivalent_to" in res.output


def test_every_fp8_saturate_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 8


def _body(item: str) -> list[str]:
    lowered = lower_spec(
        check_source(parse_text("cl.yaml", _TEXT.format(item=item))), BuildConfig()
    )
    [kernel] = lowered.kernels
    return [ln.strip() for ln in kernel.body if not ln.strip().startswith("#")]


def test_lowering_is_the_lines_of_max_then_min():
    got = _body("{clamp: acc, min: -448.0, max: 448, as: y}")
    assert got[:2] == ["y_max = lane_max(acc, -448.0)", "y = lane_min(y_max, 448.0)"]
    assert _body("{clamp: acc, max: 6, as: y}")[0] == "y = lane_min(acc, 6.0)"
    assert _body("{clamp: acc, min: 0, as: y}")[0] == "y = lane_max(acc, 0.0)"


def test_host_text():
    from coda_spec.lower.host_kernel import host_kernel

    text = """\
coda: 1
name: host_clamp
dims: {M: dynamic, W: 40}
tensors:
  x: {shape: [M, W], dtype: fp32}
steps:
  - host: sat
    over: x
    body:
      - {load_tile: x}
      - {clamp: x, min: -2.0, max: 3.0, as: y}
      - {clamp: x, max: 1.0, as: z}
      - {store: y, dtype: fp32}
      - {store: z, dtype: fp32}
outputs: {y: fp32, z: fp32}
"""
    src = host_kernel(check_source(parse_text("host_clamp.yaml", text)), "sat").source
    assert "y = tl.minimum(tl.maximum(x, -2.0), 3.0)" in src
    assert "z = tl.minimum(x, 1.0)" in src
