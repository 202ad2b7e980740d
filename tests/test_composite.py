"""Primitives written as one expression (``coda_spec.primitives._composite``): ``leaky_relu``,
``dgelu`` and ``softcap`` (whose own file is ``tests/test_softcap.py``).

* A body is parsed at import: a name, an operation or a call it cannot compute is a ValueError
  naming the composite.
* The reference is the body's math through the registered primitives' references, equal to
  torch's own function (leaky_relu, GELU's derivative by autograd).
* Arithmetic on parameters and numbers folds; a repeated sub-expression is computed once.
* ``tests/specs_extra/gelu_mlp_bwd.yaml`` (dgelu and leaky_relu in a dgrad epilogue) is proven
  by ``check --math``, every mutant caught, and its host kernel matches the reference under
  Triton's CPU interpreter.
* The GEMM-epilogue text is the constituent primitives' lines, in plain and acc_pair mode.
"""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from coda_spec import cli
from coda_spec.check.frontend import check_file, check_source
from coda_spec.check.source import parse_text
from coda_spec.errors import EXIT_OK, SpecError
from coda_spec.ir import Loc, Op
from coda_spec.primitives import registry
from coda_spec.primitives._composite import composite
from tests.conftest import ROOT, needs_triton
from tests.primitive_checks import epilogue_body, lowers_as, probe_spec

SPEC = ROOT / "tests" / "specs_extra" / "gelu_mlp_bwd.yaml"


def _op(prim: str, arg, **params) -> Op:
    return Op(prim, ((prim, arg), *params.items()), ("y",), Loc(0, 0, ()))


def _rt():
    from coda_spec.prove.reference import PRECISIONS, RefCtx

    return RefCtx(PRECISIONS["fp64"], {}, None)


# -- the body ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, why",
    [
        ("x +", "is not an expression"),
        ("y * 2", "unknown name 'y'"),
        ("x ** 2", "is not an operand, parameter, number"),
        ("t = relu(x)", "then the result expression"),
        ("tanh(2.0) * x", "tanh() of numbers only"),
        ("reduce_row(x)", "are not elementwise primitives"),
        ("frobnicate(x)", "are not elementwise primitives"),
        ("2.0 * 3.0", "must compute something"),
    ],
    ids=["syntax", "unknown-name", "power", "no-result", "constant-call", "reduction", "unknown",
         "constant"],
)  # fmt: skip
def test_a_bad_body_fails_at_import_naming_the_composite(body, why):
    with pytest.raises(ValueError, match=re.escape(why)) as e:
        composite("probe", body=body, summary="s", example="- {probe: acc, as: y}")
    assert "composite 'probe'" in str(e.value)


def test_parameter_arithmetic_folds_and_a_repeat_is_computed_once():
    from coda_spec.primitives._composite import _Body

    body = _Body("p", "t = tanh(x * (1 - s))\nt * t + t * (2 * s)", ("x",), ("s",))
    steps = body.plan({"s": 0.25})
    assert [(st.prim, st.args) for st in steps] == [
        ("mul", (("in", 0), ("num", 0.75))),
        ("tanh", (("step", 0),)),
        ("mul", (("step", 1), ("step", 1))),
        ("mul", (("step", 1), ("num", 0.5))),
        ("add", (("step", 2), ("step", 3))),
    ]


# -- reference algebra ---------------------------------------------------------------------------


@pytest.mark.parametrize("slope", [0.01, 0.2, -0.5, 1.5])
def test_leaky_relu_is_torch_s(slope):
    torch = pytest.importorskip("torch")
    x = torch.linspace(-50.0, 50.0, 2001, dtype=torch.float64)
    (y,) = registry()["leaky_relu"].reference(
        _rt(), _op("leaky_relu", "x", slope=slope), {"leaky_relu": x}, {}
    )
    want = torch.nn.functional.leaky_relu(x, slope)
    torch.testing.assert_close(y, want, rtol=1e-15, atol=1e-15)


def test_dgelu_is_gelu_s_derivative_by_autograd():
    torch = pytest.importorskip("torch")
    z = torch.linspace(-8.0, 8.0, 4001, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(4001, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    (want,) = torch.autograd.grad(torch.nn.functional.gelu(z, approximate="tanh"), z, dy)
    (got,) = registry()["dgelu"].reference(
        _rt(), _op("dgelu", ["dy", "z"]), {"dgelu": [dy, z.detach()]}, {}
    )
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)


def test_mutants_move_the_parameter_and_swap_the_sibling():
    muts = registry()["leaky_relu"].mutants(_op("leaky_relu", "x", slope=0.1))
    assert [(m.prim, dict(m.args)) for m in muts] == [
        ("leaky_relu", {"leaky_relu": "x", "slope": 0.4}),
        ("relu", {"relu": "x"}),
    ]


# -- validation ----------------------------------------------------------------------------------

_TEXT = """\
coda: 1
name: c
dims: {{M: dynamic, D: 64, F: 128}}
tensors:
  h: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [F, D], dtype: bf16}}
  z: {{shape: [M, F], dtype: bf16}}
steps:
  - kernel: k
    gemm: {{a: h, b: w.T}}
    epilogue:
      - {{load_tile: z}}
      - {item}
      - {{store: y}}
outputs: {{y: bf16}}
"""


def _errors(item: str) -> list:
    with pytest.raises(SpecError) as e:
        check_source(parse_text("c.yaml", _TEXT.format(item=item)))
    return [(d.line, d.message) for d in e.value.diagnostics]


def test_valid_items_check_clean():
    for item in ("{leaky_relu: acc, slope: 0.01, as: y}", "{dgelu: [acc, z], as: y}"):
        check_source(parse_text("c.yaml", _TEXT.format(item=item)))


def test_a_missing_parameter_is_located():
    assert _errors("{leaky_relu: acc, as: y}") == [(13, "missing required key 'slope'")]


def test_dgelu_takes_two_operands():
    [(line, msg)] = _errors("{dgelu: acc, as: y}")
    assert line == 13 and "expected a list" in msg, msg


# -- the spec ------------------------------------------------------------------------------------


def test_gelu_mlp_bwd_is_proven_by_check_math():
    res = CliRunner().invoke(cli.main, ["check", "--math", str(SPEC)])
    assert res.exit_code == EXIT_OK, res.output
    assert "2/2 forward outputs equal equivalent_to" in res.output
    assert "warning" not in res.output


def test_every_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 2


# -- GEMM-epilogue lowering ------------------------------------------------------------------


@pytest.mark.parametrize("pairs", [False, True], ids=["plain", "acc_pair"])
def test_leaky_relu_lowers_as_mul_relu_mul_add(pairs):
    spelled = [
        "{mul: [acc, 0.25], as: y_mul}",
        "{relu: acc, as: y_relu}",
        "{mul: [y_relu, 0.75], as: y_mul_1}",
        "{add: [y_mul, y_mul_1], as: y}",
    ]
    lowers_as("{leaky_relu: acc, slope: 0.25, as: y}", spelled, "y", pairs)


def test_dgelu_computes_z_squared_and_tanh_once():
    body = epilogue_body(probe_spec(["{dgelu: [acc, z], as: y}"], "y", pairs=False))
    assert sum("tanh(" in ln for ln in body) == 1
    assert sum(ln.endswith("= z * z") for ln in body) == 1
    assert body[-2].startswith("y = acc * ")


# -- host kernels ----------------------------------------------------------------------------

_HOST = """\
coda: 1
name: host_composite
dims: {M: dynamic, D: 40}
tensors:
  dy: {shape: [M, D], dtype: fp32}
  z: {shape: [M, D], dtype: fp32, range: [-4, 4]}
steps:
  - host: bwd
    over: dy
    body:
      - {load_tile: dy}
      - {load_tile: z}
      - {dgelu: [dy, z], as: dz}
      - {leaky_relu: dz, slope: 0.1, as: y}
      - {store: dz, dtype: fp32}
      - {store: y, dtype: fp32}
outputs: {dz: fp32, y: fp32}
"""


@pytest.mark.slow  # Triton's CPU interpreter in a subprocess
@needs_triton
def test_host_kernel_matches_reference_under_interpreter(tmp_path):
    torch = pytest.importorskip("torch")
    from tests.test_host_kernel import TOLERANCE, _interpret

    spec = tmp_path / "host_composite.yaml"
    spec.write_text(_HOST)
    case = {"spec": str(spec), "step": "bwd", "rows": 5, "block": 16}  # 40 cols: masked tail
    result = _interpret(case, tmp_path)
    assert set(result["kernel"]) == {"dz", "y"}
    for name, got in result["kernel"].items():
        want = result["reference"][name].to(got.dtype)
        rtol, atol = TOLERANCE[result["dtypes"][name]]
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("v", [-448.0, -0.5, -0.25, 0.0, 0.5, 30.0])
def test_a_moved_parameter_is_never_the_same(v):
    """``base.moved``: 1.5 v + 0.25 alone maps -0.5 to itself, a mutant no test can kill."""
    from coda_spec.primitives.base import moved

    assert moved(v) != v
