"""The registry-wide conformance suite: one small spec per primitive, in ``tests/primitives/``.

Every registered primitive (``coda_spec.primitives.registry()``) has its own file,
``tests/primitives/<name>.yaml`` (ESPHome's per-component test style): a minimal valid spec,
small static dims (``D: 64, F: 128, M: dynamic``), whose first line says what it exercises. It
uses the primitive in every place the primitive says it lowers (``Primitive.lowers_in()``): in
a GEMM epilogue (a ``kernel:`` step) when it has a ``lower``, and in a ``host:`` step when it
has a ``host``, each time on its own input so that ``equivalent_to`` states both results.
Loads, stores, reductions (with their ``finalize``) and the prepass statistic are primitives
too, each in the tiny chain it needs. Inputs carry a ``range:`` where the default draw would
miss a branch or a domain (``log``, ``sqrt``, ``rsqrt``, ``div``). Adding a primitive means
adding its file: the first test lists the primitives without one.

Per primitive, parametrized over the registry (ids are the primitive names):

a. the file exists, is named ``prim_<name>``, checks without a warning, and uses the primitive
   exactly where it lowers (a kernel step iff ``lower``, a host step iff ``host``);
b. ``coda check --math`` proves it with no diagnostic at all (a coverage warning included),
   and the fp64 algebra of ``tests/algebra.py`` agrees;
c. every sibling mutant and every perturbation is killed (``mutation_report``);
d. the generated text is golden: the GEMM kernel module (``lower_spec(...).source``) as
   ``tests/golden/primitives/<name>.py`` and the host step's Triton kernel as
   ``<name>.host.py``; ``CODA_UPDATE_GOLDEN=1`` rewrites them (review the diff). Run from the
   repo root (the ``at_root`` fixture), so the banners name ``tests/primitives/<name>.yaml``;
e. (slow, needs Triton) the host step's Triton kernel runs under Triton's CPU interpreter
   and matches the reference, at a width (F = 40) that leaves a masked last chunk.

Building and ``coda verify`` on a GPU are in ``tests/gpu/test_primitive_conformance_gpu.py``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.lower.host_kernel import host_kernel
from coda_spec.lower.module import lower_spec
from coda_spec.primitives import registry
from tests.algebra import all_checks, mutation_report, sizes_of, small
from tests.conftest import ROOT, assert_golden, coda_check, needs_triton

PRIMS = registry()
NAMES = list(PRIMS)
HOST_NAMES = [n for n in NAMES if PRIMS[n].host is not None]
FILES = Path("tests") / "primitives"  # relative to the repo root: banners name it so
GOLDEN = ROOT / "tests" / "golden" / "primitives"

pytestmark = pytest.mark.usefixtures("at_root")


def spec_path(name: str) -> Path:
    return FILES / f"{name}.yaml"


@functools.cache
def checked(name: str):
    path = ROOT / spec_path(name)
    assert path.is_file(), f"no conformance spec for '{name}': write {spec_path(name)}"
    return check_file(spec_path(name))


def steps_using(name: str) -> dict[str, list]:
    """kind ('kernel' / 'host') -> the steps of ``name``'s file whose items use ``name``."""
    out: dict[str, list] = {}
    for step in checked(name).spec.all_steps():
        ops = step.ops
        if any(op.prim == name for op in ops):
            out.setdefault(step.kind, []).append(step)
    return out


# -- a. one file per primitive, using it where it lowers -----------------------------------------


def test_every_primitive_has_its_file():
    have = {p.stem for p in (ROOT / FILES).glob("*.yaml")}
    assert sorted(set(NAMES) - have) == [], "primitives without a tests/primitives/ file"
    assert sorted(have - set(NAMES)) == [], "tests/primitives/ files of no registered primitive"


def test_no_stale_golden():
    want = {f"{n}.py" for n in NAMES} | {f"{n}.host.py" for n in HOST_NAMES}
    have = {p.name for p in GOLDEN.glob("*.py")}
    assert sorted(have - want) == []


@pytest.mark.parametrize("name", NAMES)
def test_file_uses_its_primitive_where_it_lowers(name):
    c = checked(name)
    first = (ROOT / spec_path(name)).read_text().splitlines()[0]
    assert first.startswith(f"# {name}: "), "the first line says what the file exercises"
    assert c.spec.name == f"prim_{name}"
    assert [w.message for w in c.analysis.warnings] == []
    prim = PRIMS[name]
    want = {k for k, fn in (("kernel", prim.lower), ("host", prim.host)) if fn is not None}
    assert set(steps_using(name)) == want, prim.lowers_in()
    assert len(steps_using(name).get("host", ())) <= 1  # one host golden per file


# -- b. check --math proves it, with no warning ------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_check_math_proves_it_without_warnings(name):
    run = coda_check("--math", "--format", "json", spec_path(name))
    assert run.exit_code == 0, run.output
    assert run.json() == []  # no error, no coverage or unused-value warning
    case = small(checked(name))
    results = all_checks(case, sizes_of(case))
    assert {c.output for c in results} == {o.name for o in case.spec.outputs}
    assert [(c.output, c.rel_err) for c in results if not c.ok] == []


# -- c. every mutant is killed ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_mutant_is_killed(name):
    case = small(checked(name))
    killed, total, survivors = mutation_report(case, sizes_of(case))
    assert survivors == []
    assert killed == total > 0


# -- d. golden generated text ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_generated_kernel_text_matches_golden(name):
    c = checked(name)
    lowered = lower_spec(c, BuildConfig())
    assert len(lowered.kernels) == len(steps_using(name).get("kernel", ())) == 1
    ast.parse(lowered.source)  # a real Python module
    assert_golden(GOLDEN / f"{name}.py", lowered.source)
    for step in steps_using(name).get("host", ()):
        source = host_kernel(c, step.name).source
        compile(source, f"{name}.host.py", "exec")
        assert_golden(GOLDEN / f"{name}.host.py", source)


# -- e. host kernels under Triton's CPU interpreter ------------------------------------------------


def _host_case(name: str) -> dict:
    [step] = steps_using(name)["host"]
    # F = 40: 40 columns (20 pairs; 80 for a gate/up tile) in chunks of 16 leave a masked tail
    case = {"spec": str(spec_path(name)), "step": step.name, "dims": {"F": 40}}
    case.update(rows=6, block=16)
    if checked(name).spec.tensor("target") is not None:  # first, ignored and last columns
        case["force"] = {"target": {"0": 0, "1": -100, "2": 39, "4": -100}}
    return case


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """Every file's host kernel under the interpreter, in one subprocess (one Triton start)."""
    from tests.test_host_kernel import interpret_all

    return interpret_all({n: _host_case(n) for n in HOST_NAMES}, tmp_path_factory.mktemp("i"))


@pytest.mark.slow  # Triton's CPU interpreter in a subprocess, shared by the files
@needs_triton
@pytest.mark.parametrize("name", HOST_NAMES)
def test_host_kernel_matches_reference_under_interpreter(name, interpreted):
    torch = pytest.importorskip("torch")
    from tests.test_host_kernel import TOLERANCE

    result = interpreted[name]
    assert "error" not in result, result.get("error")
    assert result["kernel"], "the host kernel writes nothing"
    for out, got in result["kernel"].items():
        want = result["reference"][out].to(got.dtype)
        rtol, atol = TOLERANCE[result["dtypes"][out]]
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol, msg=out)
