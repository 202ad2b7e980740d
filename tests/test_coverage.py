"""The proof's coverage (``coda_spec.prove.coverage``): ``coda check --math`` warns, located at the
item, when the generated inputs never exercise it (issue 22, item 7).

``tests/math_specs/clamp_never_saturates.yaml`` is the issue's case: a clamp whose operand never
reaches its bounds, so the spec with the clamp deleted is proven too. The original gets the
warning, with a range: that exercises the clamp; under that range the warning is gone and the
clamp-deleted spec fails, as it should.
"""

from __future__ import annotations

import json
import re

import pytest

from coda_spec.errors import EXIT_MISMATCH, EXIT_OK
from coda_spec.ir import Loc, Op
from tests.conftest import ROOT, checked_text, coda_check

torch = pytest.importorskip("torch")

SPEC = ROOT / "tests" / "math_specs" / "clamp_never_saturates.yaml"
CLAMP = "      - {clamp: scaled, min: -448.0, max: 448.0, as: sat}\n"
SUGGESTED = re.compile(r"a range: \[(\S+), (\S+)\] on 'scale' would exercise it")


def _deleted(text: str) -> str:
    """The spec with its clamp deleted: the unclamped value stored as sat."""
    assert CLAMP in text
    return text.replace(CLAMP, "").replace("{store: sat}", "{store: scaled, to: sat}")


def test_never_saturating_clamp_warns_at_the_clamp():
    res = coda_check("--math", SPEC)
    assert res.exit_code == EXIT_OK, res.output  # a warning leaves the exit status alone
    line = SPEC.read_text().splitlines().index(CLAMP.rstrip("\n")) + 1
    head = f"{SPEC}:{line}:9: warning: steps[0].epilogue[2]: the proof's inputs never exercise "
    assert head + "this clamp" in res.output, res.output
    assert "never goes below the min bound -448" in res.output
    assert "nor above the max bound 448" in res.output
    assert "still passes with this clamp deleted" in res.output
    assert SUGGESTED.search(res.output), res.output
    assert "'scale' has range [0, 1] now" in res.output
    assert res.output.count("warning:") == 1  # the mul and the loads are exercised
    assert "1 valid and proven" in res.output and "0 error(s)" in res.output
    [d] = json.loads(coda_check("--math", "--format", "json", SPEC).stdout)
    assert (d["line"], d["col"], d["severity"]) == (line, 9, "warning")


def test_deleted_clamp_passes_until_the_suggested_range(tmp_path):
    text = SPEC.read_text()
    deleted = tmp_path / "deleted.yaml"
    deleted.write_text(_deleted(text))
    res = coda_check("--math", deleted)
    assert res.exit_code == EXIT_OK, res.output  # the case: the proof checked nothing

    lo, hi = SUGGESTED.search(coda_check("--math", SPEC).output).groups()
    ranged = text.replace("range: [0, 1]}", f"range: [{lo}, {hi}]}}")
    assert ranged != text
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(ranged)
    res = coda_check("--math", fixed)
    assert res.exit_code == EXIT_OK, res.output
    assert "warning" not in res.output, res.output
    deleted.write_text(_deleted(ranged))
    res = coda_check("--math", deleted)
    assert res.exit_code == EXIT_MISMATCH, res.output  # now the proof depends on the clamp


_CHAIN = """\
coda: 1
name: cov
dims: {{M: dynamic, D: 64, N: 64}}
tensors:
  x: {{shape: [M, D], dtype: bf16}}
  w: {{shape: [N, D], dtype: bf16}}
steps:
  - kernel: k
    gemm: {{a: x, b: w.T}}
    epilogue:
{items}
outputs: {{y: fp32}}
equivalent_to: |
  y = {math}
"""


def _gaps(items: list[str], math: str) -> dict:
    from coda_spec.prove.mathcheck import coverage_diagnostics, prove

    body = "\n".join(f"      - {i}" for i in items)
    checked = checked_text(_CHAIN.format(items=body, math=math))
    report = prove(checked)
    assert report.ok, report.proofs
    diags = coverage_diagnostics(checked, report)
    assert all(d.severity == "warning" for d in diags)
    return {d.path: d for d in diags}


def test_branch_items_taken_on_both_sides_give_no_warning():
    got = _gaps(
        [
            "{relu: acc, as: r}",
            "{abs: acc, as: a}",
            "{max: [r, a], as: m}",
            "{clamp: acc, min: -1.0, max: 1.0, as: c}",
            "{min: [c, 0.5], as: y0}",
            "{add: [m, y0], as: y}",
            "{store: y}",
        ],
        "abs(x @ w.T) + clamp(x @ w.T, min=-1.0, max=0.5)",
    )
    # max(relu(a), |a|) is always |a|: the max's one side never wins, and so the relu (taken on
    # both sides) can be deleted; the abs, the clamp and the min are exercised
    assert sorted(got) == ["steps[0].epilogue[0]", "steps[0].epilogue[2]"], got
    assert "'r' is never above 'a': max always yields 'a'" in got["steps[0].epilogue[2]"].message
    relu = got["steps[0].epilogue[0]"].message
    assert "never" not in relu.split(":", 1)[1] and "relu deleted" in relu, relu


def test_unreachable_branch_names_its_inputs():
    [(path, d)] = _gaps(
        ["{exp: acc, as: e}", "{relu: e, as: y}", "{store: y}"], "relu(exp(x @ w.T))"
    ).items()
    assert path == "steps[0].epilogue[1]"
    assert "'e' is never negative" in d.message and "relu is the identity" in d.message
    assert "it depends on 'w', 'x', but no range: tried on them" in d.hint, d.hint


def test_deletion_rerun_finds_an_item_masked_downstream():
    # relu changes acc (both sides are taken), but max(., 5) hides it: acc never passes 5
    got = _gaps(
        ["{relu: acc, as: r}", "{max: [r, 5.0], as: y}", "{store: y}"], "clamp(x @ w.T, min=5.0)"
    )
    relu, top = got["steps[0].epilogue[0]"], got["steps[0].epilogue[1]"]
    assert "negative" not in relu.message  # not a branch gap ...
    assert "still passes with this relu deleted (its result replaced by 'acc')" in relu.message
    assert "'r' is never above '5': max always yields '5'" in top.message
    assert "'acc' depends on 'w', 'x'" in relu.hint, relu.hint


def test_an_identity_item_is_a_deletion_that_passes():
    got = _gaps(["{scale: acc, by: 1.0, as: y}", "{store: y}"], "x @ w.T")
    assert "still passes with this scale deleted" in got["steps[0].epilogue[0]"].message


def _op(prim, arg, **params):
    return Op(prim, ((prim, arg), *params.items()), ("y",), Loc(0, 0, ()))


@pytest.mark.parametrize(
    ("op", "x", "want"),
    [
        (_op("relu", "v"), [0.5, 2.0], "'v' is never negative"),
        (_op("relu", "v"), [-0.5, 0.0], "'v' is never positive"),
        (_op("abs", "v"), [-0.5, -2.0], "abs is a negation"),
        (_op("clamp", "v", max=1.0), [0.5, 1.0], "never goes above the max bound 1"),
        (_op("clamp", "v", min=0.0, max=1.0), [-3.0, 2.0], "always saturated"),
        (_op("relu", "v"), [-1.0, 1.0], None),
        (_op("clamp", "v", min=0.0, max=1.0), [-3.0, 0.5, 2.0], None),
    ],
)
def test_one_sided_branches_are_counted_exactly(op, x, want):
    from coda_spec.prove.coverage import _missed

    got = _missed(op, torch.tensor(x, dtype=torch.float64))
    assert (got is None) if want is None else (want in got[0]), got


def test_max_min_one_side_always_wins():
    from coda_spec.prove.coverage import _missed

    a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert "max always yields 'a'" in _missed(_op("max", ["a", 0.0]), [a, 0.0])[0]
    assert _missed(_op("max", ["a", 2.0]), [a, 2.0]) is None  # 2 wins over 1, a over 2 at 3
    assert "'b' is never below 'a'" in _missed(_op("min", ["a", "b"]), [a, a + 1])[0]


RANGED = ROOT / "tests" / "math_specs" / "relu2_mlp_ranged.yaml"


def test_a_range_that_covers_its_tile_at_the_proofs_dims_is_a_gap():
    """Issue 31: at F = 2048, n18's cols: [0, 2048] covers the whole tile, so a proof there
    never runs the pass-through half. The rule locates it at the item; the proof's own dims
    (mathcheck.small) keep the range inside the tile."""
    from coda_spec.check.frontend import check_file, with_dims
    from coda_spec.prove.coverage import range_relations, uncut_ranges
    from coda_spec.prove.mathcheck import small

    checked = check_file(RANGED)
    shrunk = with_dims(checked, {"D": 512, "F": 2048})  # the first dims the shape rules allow
    (gap,) = uncut_ranges(checked, shrunk)
    line = (
        RANGED.read_text().splitlines().index("      - {squared_relu: z, cols: [0, 2048], as: h}")
    )
    assert gap.site == ("steps", 0, 2) and gap.op.loc.line == line + 1
    assert "covers the whole 2048-column tile" in gap.message and "[0, 2048) of 4096" in gap.message
    case = small(checked)
    assert uncut_ranges(checked, case) == () and case.spec.dim_sizes()["F"] == 4096
    assert range_relations(case) == range_relations(checked)


def test_the_proof_warns_at_a_range_its_dims_do_not_cut(monkeypatch):
    """The rule in the proof itself: dims chosen any other way than small()'s are reported."""
    from coda_spec.check.frontend import check_file, with_dims
    from coda_spec.prove import mathcheck

    checked = check_file(RANGED)
    monkeypatch.setattr(mathcheck, "small", lambda c: with_dims(c, {"D": 512, "F": 2048}))
    report = mathcheck.prove(checked)
    (diag,) = mathcheck.coverage_diagnostics(checked, report)
    assert diag.severity == "warning" and diag.path == "steps[0].epilogue[2]"
    assert "never exercise this squared_relu" in diag.message
