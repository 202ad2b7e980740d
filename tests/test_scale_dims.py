"""`scale` by a constant over the dims (``by: "1/sqrt(HD)"``), and baked constants in general.

* ``tests/specs_extra/scale_dims.yaml`` (a GEMM epilogue and a host step) is proven by
  ``coda check --math`` and every mutant is caught, the expression's own mutant included.
* Validation: an unknown dim (with its did-you-mean), the dynamic dim, and text that is no
  expression are each one located error at ``by``.
* Lowering: the folded value is a literal in the CuTe and the Triton text.
* A build cannot run at dims that change a constant it compiled in (``suits.baked_change``,
  philox's width too):
  ``coda_spec.op(..., dims=...)`` refuses, naming the constant and the rebuild; a per-head
  ``group`` is baked the same way, and dims that leave a constant alone still re-size.
"""

from __future__ import annotations

import pytest

from coda_spec.check import suits
from coda_spec.check.frontend import check_file, check_source, with_dims
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.errors import SpecError
from coda_spec.lower.host_kernel import host_kernel
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT

SPEC = ROOT / "tests" / "specs_extra" / "scale_dims.yaml"


def test_the_spec_is_proven_and_every_mutant_is_caught():
    pytest.importorskip("torch")
    from coda_spec.prove.mathcheck import prove
    from tests.algebra import mutation_report, sizes_of, small

    checked = check_file(SPEC)
    assert prove(checked).ok
    small_ = small(checked)
    killed, total, survivors = mutation_report(small_, sizes_of(small_))
    assert survivors == [] and killed == total >= 2


def _errors(by: str) -> list:
    text = SPEC.read_text().replace('by: "1/sqrt(HD)"', f"by: {by!r}")
    with pytest.raises(SpecError) as e:
        check_source(parse_text("scale_dims.yaml", text))
    return [(d.line, d.col, d.message, d.hint) for d in e.value.diagnostics]


@pytest.mark.parametrize(
    "by, fragment",
    [
        ("1/sqrt(HDD)", "unknown dim 'HDD' in '1/sqrt(HDD)'"),
        ("1/M", "dynamic dim 'M' is known only at call time"),
        ("1/sqrt(HD", "cannot parse"),
        ("exp(HD)", "unsupported constant expression"),
    ],
    ids=["unknown", "dynamic", "unparsable", "call"],
)
def test_a_bad_by_is_one_located_error(by, fragment):
    [(line, col, message, hint)] = _errors(by)
    assert (line, col) == (16, 26)
    assert fragment in message
    if by == "1/sqrt(HDD)":
        assert "did you mean 'HD'" in hint
    if by == "1/M":
        assert "load_scalar" in hint


def test_the_folded_value_is_a_literal_in_both_kernels():
    checked = check_file(SPEC)
    [kernel] = lower_spec(checked, BuildConfig()).kernels
    assert any("* 0.125" in line for line in kernel.body)
    host = host_kernel(checked, checked.spec.steps[1])
    assert "* 0.484375" in host.source  # 32/64 - 1/64


def test_a_constant_over_a_dim_the_new_dims_change_is_baked():
    checked = check_file(SPEC)
    why = suits.baked_change(checked, with_dims(checked, {"HD": 128}))
    assert why == (
        "kernel 'scores' compiled scale's 1/sqrt(HD) in as 0.125; at these dims it is 0.0883883"
    )
    assert suits.baked_change(checked, with_dims(checked, {"D": 512})) is None


def test_a_per_head_group_is_baked_too():
    checked = check_file(ROOT / "specs" / "f7_qkv_head_sumsq.yaml")
    why = suits.baked_change(checked, with_dims(checked, {"head_dim": 64}))
    assert why is not None and "compiled reduce_row's head_dim in as 128" in why


def test_the_op_refuses_to_run_a_build_at_dims_that_change_a_constant(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from coda_spec import ops
    from coda_spec.runtime.plan import CodaRuntimeError
    from tests import test_runtime_cpu as rt

    monkeypatch.setattr(ops, "_OPS", {})
    monkeypatch.setitem(rt.SPECS, "scale_dims", (SPEC, {}))
    build, _ = rt.make_build(tmp_path, "scale_dims")
    with pytest.raises(CodaRuntimeError, match=r"compiled scale's 1/sqrt\(HD\) in as 0.125"):
        ops.op(build, dims={"HD": 128})
    assert ops.op(build, dims={"D": 512}).chain.manifest.dims["D"] == 512


def test_philox_bakes_its_kernels_width():
    """philox's counter stride is the kernel's N, a literal in the epilogue: another D (the
    GEMM N of the dropout kernel) is refused, another F (a later kernel's) is not."""
    checked = check_file(ROOT / "tests" / "specs_extra" / "dropout_residual.yaml")
    why = suits.baked_change(checked, with_dims(checked, {"D": 232}))
    assert why == "kernel 'proj_dropout' compiled philox for its width 256; at these dims it is 232"
    assert suits.baked_change(checked, with_dims(checked, {"F": 1024})) is None


@pytest.fixture
def scale_build(tmp_path, monkeypatch):
    """A CPU build of scale_dims.yaml (``tests.test_runtime_cpu.make_build``)."""
    pytest.importorskip("torch")
    from coda_spec import ops
    from tests import test_runtime_cpu as rt

    monkeypatch.setattr(ops, "_OPS", {})
    monkeypatch.setitem(rt.SPECS, "scale_dims", (SPEC, {}))
    build, _ = rt.make_build(tmp_path, "scale_dims")
    return build


def test_bench_and_tune_refuse_a_resize_that_changes_a_constant(scale_build):
    """``coda bench --dims`` and ``coda tune`` re-size through the one recipe
    (``coda_spec.ops.resized``): before, they ran the build with its stale 1/sqrt(HD)."""
    from coda_spec.bench import driver
    from coda_spec.errors import ToolError
    from coda_spec.runtime import load
    from coda_spec.tune import tune_shape

    chain = load(scale_build, tuned=False)
    checked = chain.checked()
    sizes = {**checked.spec.dim_sizes(), "M": 64, "HD": 128}
    baked = r"cannot run at \{'HD': 128\}: .*compiled scale's 1/sqrt\(HD\) in as 0.125.*coda build"
    with pytest.raises(ToolError, match=baked):
        driver.at_dims(chain, checked, sizes)
    with pytest.raises(ToolError, match=baked):
        tune_shape(chain, checked, sizes, opts=None, clock=None, progress=None)
    resized, case = driver.at_dims(chain, checked, {**sizes, "HD": 64, "D": 512})
    assert resized.manifest.dims["D"] == 512 and case.spec.dim_sizes()["D"] == 512


def test_the_package_op_takes_dims_and_refuses_a_spec_file(scale_build):
    """``coda_spec.op(build, dims=...)`` as docs/training.md documents it (before: TypeError);
    a spec file where a build goes is a clear error (before: NotADirectoryError)."""
    import coda_spec
    from coda_spec.runtime.plan import CodaRuntimeError

    assert coda_spec.op(scale_build, dims={"D": 512}).chain.manifest.dims["D"] == 512
    with pytest.raises(CodaRuntimeError, match=r"compiled scale's 1/sqrt\(HD\)"):
        coda_spec.op(scale_build, dims={"HD": 128})
    with pytest.raises(CodaRuntimeError, match="is a spec, not a build directory.*coda build"):
        coda_spec.op(SPEC)
