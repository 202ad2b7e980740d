"""Per-tensor statistics (``finalize ... over: rows|cols``) and ``finalize: var``, CPU side.

``fp8_out_amax.yaml`` gives its per-tensor amax ``[]`` beside ``row_amax``; ``layer_norm_var.yaml``
gives a LayerNorm's mean and variance of a GEMM's output. Both are proven with every mutant
killed; the misspellings are located errors; the manifest records a 0-d result and the finalize
kernel is one program with a literal grid of 1 (no atomics). Their kernels run under Triton's
interpreter in tests/test_finalize_kernel.py; the GPU build and verify are
tests/gpu/test_finalize_stats_gpu.py.
"""

from __future__ import annotations

import pytest

from coda_spec.artifact.manifest import finalize_data
from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig
from coda_spec.errors import EXIT_OK, SpecError
from coda_spec.lower.finalize_kernel import finalize_kernel
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, checked_text, invoke

AMAX = ROOT / "tests" / "specs_extra" / "fp8_out_amax.yaml"
VAR = ROOT / "tests" / "specs_extra" / "layer_norm_var.yaml"


def _errors(text: str) -> list:
    with pytest.raises(SpecError) as e:
        checked_text(text)
    return [(d.line, d.col, d.message, d.hint) for d in e.value.diagnostics]


def test_both_specs_are_proven():
    res = invoke("check", "--math", AMAX, VAR)
    assert res.exit_code == EXIT_OK, res.output
    assert "3/3 forward outputs equal equivalent_to" in res.output


@pytest.mark.parametrize("spec", [AMAX, VAR], ids=["amax", "var"])
def test_every_mutant_is_caught(spec):
    pytest.importorskip("torch")
    from tests.algebra import mutants, mutation_report, sizes_of, small

    checked = small(check_file(spec))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 10
    if spec == VAR:  # the centring itself is a mutant: var -> the mean of sumsq
        assert any("finalize var -> mean of ss_part" in d for d, _ in mutants(checked))


def test_the_per_tensor_amax_is_a_0d_result_of_one_program():
    checked = check_file(AMAX)
    assert checked.analysis.tensor("amax").shape == ()
    step = next(s for s in checked.spec.steps if s.kind == "finalize" and s.result == "amax")
    data = finalize_data(step, checked.analysis)
    assert data["over"] == "rows" and data["n"] == "(M)*(N)"
    fields = {f.tensor: f for k in lower_spec(checked, BuildConfig()).kernels for f in k.fields}
    f = fields["amax_part"]
    k = finalize_kernel(data, f.role, f.fold, list(f.shape), spec_file=str(AMAX))
    assert k.grid == (1,) and k.outputs[0]["shape"] == []
    assert "tl.atomic" not in k.source and "tl.store(result, total)" in k.source
    assert "over: rows" in k.source


def test_var_reads_both_partials_in_one_kernel():
    checked = check_file(VAR)
    assert checked.analysis.tensor("sigma2").shape == ("M",)
    step = next(s for s in checked.spec.steps if s.kind == "finalize" and s.result == "sigma2")
    data = finalize_data(step, checked.analysis)
    fields = {f.tensor: f for k in lower_spec(checked, BuildConfig()).kernels for f in k.fields}
    f = fields["s_part"]
    k = finalize_kernel(data, f.role, f.fold, list(f.shape), spec_file=str(VAR))
    assert [a.get("tensor") for a in k.args[:3]] == ["s_part", "ss_part", "sigma2"]
    assert "propagate_nan=tl.PropagateNan.ALL" in k.source  # the clamp keeps NaN


def _amax(line: str) -> str:
    return AMAX.read_text().replace(
        "  - {finalize: max, of: amax_part, over: rows, as: amax}", line
    )


def _var(line: str) -> str:
    return VAR.read_text().replace(
        "  - {finalize: var, of: s_part, sumsq: ss_part, as: sigma2}", line
    )


def test_over_on_the_wrong_axis_is_located():
    [(line, col, msg, hint)] = _errors(
        _amax("  - {finalize: max, of: amax_part, over: cols, as: amax}")
    )
    assert (line, col) == (29, 42)
    assert msg == "over: cols folds a reduce_col partial; 'amax_part' is a reduce_row partial"
    assert hint == "use over: rows"


def test_var_without_its_sumsq_is_located():
    errs = [e[:3] for e in _errors(_var("  - {finalize: var, of: s_part, as: sigma2}"))]
    assert (27, 5, "var needs sumsq: the sumsq partial beside 's_part'") in errs


def test_var_with_a_sum_as_its_sumsq_is_located():
    errs = _errors(_var("  - {finalize: var, of: s_part, sumsq: s_part, as: sigma2}"))
    assert (27, 40, "'s_part' is a sum partial, not sumsq") in [e[:3] for e in errs]


def test_sumsq_on_another_op_is_located():
    text = _var(
        "  - {finalize: var, of: s_part, sumsq: ss_part, as: sigma2}\n"
        "  - {finalize: mean, of: ss_part, sumsq: s_part, as: m2}"
    )
    text = text.replace("sigma2: fp32}", "sigma2: fp32, m2: fp32}")
    errs = _errors(text)
    assert (28, 42, "sumsq applies to var only, not 'mean'") in [e[:3] for e in errs]
