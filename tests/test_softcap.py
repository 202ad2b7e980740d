"""The `softcap` primitive (cap * tanh(x / cap)): math, validation, lowering and host kernel.

``softcap`` lives in one file (``coda_spec/primitives/softcap.py``), one expression built by
``_composite.composite``; these tests check every layer that file feeds:

* Reference algebra against torch, and the CuTe chain (div -> tanh -> mul) means the same math.
* Validation: a missing or non-positive ``cap`` is one located error.
* ``tests/specs_extra/softcap_logits.yaml`` is proven by ``coda check --math``; every mutant
  (another cap, the sibling ``tanh``) is caught.
* Lowering: the GEMM epilogue and the host kernel are exactly the lines of the registered div,
  tanh and mul primitives, in plain and in acc_pair mode (so they follow any change of their
  text).
* Host kernels: the generated Triton text runs under Triton's CPU interpreter and matches the
  reference.
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
from tests.conftest import ROOT, needs_triton
from tests.primitive_checks import lowers_as

SPEC = ROOT / "tests" / "specs_extra" / "softcap_logits.yaml"


def _op(prim: str, arg, **params) -> Op:
    return Op(prim, ((prim, arg), *params.items()), ("y",), Loc(0, 0, ()))


def _rt():
    from coda_spec.prove.reference import PRECISIONS, RefCtx

    return RefCtx(PRECISIONS["fp64"], {}, None)


# -- reference algebra ---------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [30.0, 50.0, 0.5])
def test_reference_is_cap_times_tanh_of_x_over_cap(cap):
    torch = pytest.importorskip("torch")
    x = torch.linspace(-400.0, 400.0, 4001, dtype=torch.float64)
    (y,) = registry()["softcap"].reference(_rt(), _op("softcap", "x", cap=cap), {"softcap": x}, {})
    torch.testing.assert_close(y, cap * torch.tanh(x / cap), rtol=0, atol=0)
    assert (y.abs() <= cap).all()  # squashed into [-cap, cap] (fp64 tanh saturates to 1)
    torch.testing.assert_close(y, -y.flip(0))  # odd
    small = x.abs() < cap * 1e-3
    torch.testing.assert_close(y[small], x[small], rtol=1e-6, atol=0)  # ~identity near 0


def test_cute_chain_means_the_reference_math():
    """div -> tanh -> mul through the registered primitives' references equals softcap's."""
    torch = pytest.importorskip("torch")
    prims, rt, cap = registry(), _rt(), 30.0
    x = torch.randn(64, 48, dtype=torch.float64) * 60
    (t,) = prims["div"].reference(rt, _op("div", ["x", cap]), {"div": [x, cap]}, {})
    (t,) = prims["tanh"].reference(rt, _op("tanh", "t"), {"tanh": t}, {})
    (t,) = prims["mul"].reference(rt, _op("mul", ["t", cap]), {"mul": [t, cap]}, {})
    (y,) = prims["softcap"].reference(rt, _op("softcap", "x", cap=cap), {"softcap": x}, {})
    torch.testing.assert_close(t, y, rtol=1e-15, atol=0)


def test_mutants_are_another_cap_and_the_sibling_tanh():
    muts = registry()["softcap"].mutants(_op("softcap", "x", cap=30.0))
    assert [(m.prim, dict(m.args)) for m in muts] == [
        ("softcap", {"softcap": "x", "cap": 45.25}),
        ("tanh", {"tanh": "x"}),  # the sibling's schema has no cap: dropped
    ]


# -- validation ----------------------------------------------------------------------------------

_TEXT = """\
coda: 1
name: sc
dims: {{M: dynamic, D: 64, V: 256}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [V, D], dtype: bf16}}
steps:
  - kernel: head
    gemm: {{a: h, b: w.T}}
    epilogue:
      - {item}
      - {{store: logits}}
outputs: {{logits: bf16}}
"""


def _errors(item: str) -> list:
    with pytest.raises(SpecError) as e:
        check_source(parse_text("sc.yaml", _TEXT.format(item=item)))
    return [(d.line, d.col, d.message, d.hint) for d in e.value.diagnostics]


def test_valid_item_checks_clean():
    check_source(parse_text("sc.yaml", _TEXT.format(item="{softcap: acc, cap: 30, as: logits}")))


def test_missing_cap_is_located():
    [(line, col, msg, _)] = _errors("{softcap: acc, as: logits}")
    assert (line, msg) == (11, "missing required key 'cap'")
    assert col == 9  # the item's mapping


@pytest.mark.parametrize("cap", ["0", "-30.0", "0.0"])
def test_cap_must_be_positive(cap):
    [(line, col, msg, _)] = _errors(f"{{softcap: acc, cap: {cap}, as: logits}}")
    assert line == 11 and col == 29  # at the value
    assert msg == f"cap must be > 0, got number {float(cap) if '.' in cap else int(cap)}"


def test_cap_must_be_a_number():
    [(line, col, msg, hint)] = _errors("{softcap: acc, cap: '30', as: logits}")
    assert (line, col, msg) == (11, 29, "expected a number, got string '30'")
    assert hint == "remove the quotes: cap: 30"


def test_cap_on_another_primitive_is_an_unknown_key():
    [(line, _, msg, _)] = _errors("{tanh: acc, cap: 30.0, as: logits}")
    assert (line, msg) == (11, "unknown key 'cap'")


def test_misspelled_softcap_is_an_unknown_primitive_with_a_suggestion():
    [(line, col, msg, hint)] = _errors("{softcapp: acc, cap: 30.0, as: logits}")
    assert (line, col, msg) == (11, 10, "unknown primitive 'softcapp'")
    assert "softcap" in hint


# -- the spec: check --math, mutants ---------------------------------------------------------


def test_softcap_logits_is_proven_by_check_math():
    res = CliRunner().invoke(cli.main, ["check", "--math", str(SPEC)])
    assert res.exit_code == EXIT_OK, res.output
    assert "1/1 forward outputs equal equivalent_to" in res.output


def test_every_softcap_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 2


# -- GEMM-epilogue lowering ------------------------------------------------------------------


@pytest.mark.parametrize("pairs", [False, True], ids=["plain", "acc_pair"])
def test_lowering_is_the_lines_of_div_tanh_mul(pairs):
    """softcap emits exactly what the three registered primitives emit, in either mode."""
    name = "z1" if pairs else "logits"
    spelled = [
        f"{{div: [acc, 30.0], as: {name}_div}}",
        f"{{tanh: {name}_div, as: {name}_tanh}}",
        f"{{mul: [{name}_tanh, 30.0], as: {name}}}",
    ]
    got = lowers_as(f"{{softcap: acc, cap: 30.0, as: {name}}}", spelled, name, pairs)
    at = next(i for i, ln in enumerate(got) if ln.startswith(f"{name}_div = "))
    assert got[at + 1].startswith(f"{name}_tanh = ")
    assert got[at + 2] == f"{name} = {name}_tanh * 30.0"


def test_lowering_of_the_spec_file():
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        kernel = lower_spec(check_file(SPEC.relative_to(ROOT)), BuildConfig()).kernels[0]
    finally:
        os.chdir(cwd)
    body = [ln.strip() for ln in kernel.body]
    line = next(i for i, t in enumerate(SPEC.read_text().splitlines(), 1) if "softcap:" in t)
    at = body.index(next(b for b in body if b.startswith(f"# {SPEC.relative_to(ROOT)}:{line}:")))
    assert body[at + 1].startswith("logits_div = ") and "30.0" in body[at + 1]
    assert body[at + 2].startswith("logits_tanh = ") and "logits_div" in body[at + 2]
    assert body[at + 3] == "logits = logits_tanh * 30.0"
    assert kernel.d[0] == "logits" and kernel.d[1] == "bf16"


# -- host kernels (Triton, CPU interpreter) ----------------------------------------------------

_HOST = """\
coda: 1
name: host_softcap
dims: {M: dynamic, W: 40}
tensors:
  x: {shape: [M, W], dtype: fp32}
  s: {shape: [M], dtype: fp32}
steps:
  - host: capped
    over: x
    body:
      - {load_tile: x}
      - {load_col: s}
      - {scale: x, by: 80.0, as: big}
      - {softcap: big, cap: 30.0, as: y}
      - {softcap: s, cap: 0.5, as: sc}
      - {store: y, dtype: fp32}
      - {store: y, to: y_bf16, dtype: bf16}
      - {store: sc, dtype: fp32}
outputs: {y: fp32, y_bf16: bf16, sc: fp32}
"""


def test_host_text_is_the_lane_template():
    from coda_spec.lower.host_kernel import host_kernel

    checked = check_source(parse_text("host_softcap.yaml", _HOST))
    src = host_kernel(checked, "capped").source
    # the composite's body, tanh(x / cap) * cap: the div, tanh and mul primitives' own lines
    assert "y_div = big / 30.0\n        y_tanh = (2.0 * tl.sigmoid(2.0 * y_div) - 1.0)\n" in src
    assert "        y = y_tanh * 30.0\n" in src
    assert "    sc_div = s / 0.5\n    sc_tanh = (2.0 * tl.sigmoid(2.0 * sc_div) - 1.0)\n" in src


@pytest.mark.slow  # Triton's CPU interpreter in a subprocess
@needs_triton
def test_host_kernel_matches_reference_under_interpreter(tmp_path):
    torch = pytest.importorskip("torch")
    from tests.test_host_kernel import TOLERANCE, _interpret

    spec = tmp_path / "host_softcap.yaml"
    spec.write_text(_HOST)
    case = {"spec": str(spec), "step": "capped", "rows": 5, "block": 16}  # 40 cols: masked tail
    result = _interpret(case, tmp_path)
    assert set(result["kernel"]) == {"y", "y_bf16", "sc"}
    for name, got in result["kernel"].items():
        dtype = result["dtypes"][name]
        want = result["reference"][name].to(got.dtype)
        rtol, atol = TOLERANCE[dtype]
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol, msg=name)
    y = result["kernel"]["y"]
    assert y.abs().max() > 25.0, "inputs never reach the saturating part of the curve"
