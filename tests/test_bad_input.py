"""Bad input is a located error, never an internal one (issue 31, item 4).

* ``equivalent_to`` and ``derive`` expressions that parse but are ill-formed or ill-typed --
  a reversed slice, a function used as a value, a float dim, shapes that do not broadcast, a
  ``derive`` of the wrong shape -- are refused at the expression's line and column, exit 2
  (before: ``coda check --math`` exited 1 with torch's exception). Those the checker can see
  are refused by plain ``coda check`` too; the others by the proof, which names its dims.
* An empty ``range:`` is refused at check (before: an internal error drawing the inputs).
* A folder run reports every file, even when one file's proof fails unexpectedly.
* ``coda grad -o`` refuses a folder and a missing folder before deriving anything.

The audit's fuzz (delete a line, swap tokens, change a number) is tests/test_fuzz.py, family d.
"""

from __future__ import annotations

import pytest

from coda_spec.errors import EXIT_INVALID_SPEC, EXIT_OK, EXIT_TOOL_FAILURE
from tests.conftest import ROOT, coda_check, invoke

SWIGLU = ROOT / "specs" / "f6_swiglu.yaml"
RMS_BWD = ROOT / "specs" / "b1_dgrad_rmsnorm_bwd.yaml"
ROPE = ROOT / "specs" / "f6_rope.yaml"
CE = ROOT / "specs" / "b4_ce_fwd_bwd.yaml"


def _mutant(tmp_path, spec, old: str, new: str, name: str = "m.yaml"):
    text = spec.read_text(encoding="utf-8")
    assert old in text, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


# (spec, old text, new text, where: "line:col", message start, refused without --math)
CASES = [
    (SWIGLU, "w_gu[0::2]", "w_gu[0::-1]", "24:22", "slice step -1 is not positive", True),
    (SWIGLU, "silu(gate)", "silu[1::2]", "26:9", "'silu' is a function, not a value", True),
    (RMS_BWD, "square(x), -1)", "square(x), -1.5)", "22:36", "dim -1.5 is not an integer", True),
    (
        SWIGLU,
        "out = silu(gate) * up",
        "out = silu(gate) * x",
        "26:9",
        "cannot evaluate this expression: The size of tensor a (688) must match",
        False,
    ),
    (
        RMS_BWD,
        "* dz, -1) / D",
        "* gamma, -1) / D",
        "27:18",
        "cannot evaluate this expression: The size of tensor a",
        False,
    ),
    (
        CE,
        'derive: "logsumexp(logits, -1)"',
        'derive: "logsumexp(logits, -2)"',
        "20:14",
        "derive gives shape [32768], but the declared shape [M] is [48] here",
        False,
    ),
    (ROPE, "range: [0, 8192]", "range: [0, -1.5]", "16:44", "range [0, -1.5] is empty", True),
]


@pytest.mark.parametrize("spec,old,new,where,message,static", CASES, ids=range(len(CASES)))
def test_a_malformed_expression_is_a_located_error(
    tmp_path, spec, old, new, where, message, static
):
    path = _mutant(tmp_path, spec, old, new)
    res = coda_check("--math", path, cwd=tmp_path)  # no traceback, no internal error
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert f"m.yaml:{where}: error: " in res.output, res.output
    assert message in res.output, res.output
    assert coda_check(path, cwd=tmp_path).exit_code == (EXIT_INVALID_SPEC if static else EXIT_OK)


def test_a_folder_run_reports_every_file(tmp_path, monkeypatch):
    """A file whose proof fails unexpectedly is reported and the run goes on (exit 1)."""
    from coda_spec import cli

    for spec in (SWIGLU, ROPE):
        (tmp_path / spec.name).write_text(spec.read_text(encoding="utf-8"), encoding="utf-8")
    _mutant(tmp_path, SWIGLU, "out = silu(gate) * up", "out = silu(gate) * x", "bad.yaml")
    real = cli.prove

    def prove(checked, **kw):
        if checked.spec.name == "f6_rope":
            raise RuntimeError("boom")
        return real(checked, coverage=False)

    monkeypatch.setattr(cli, "prove", prove)
    res = invoke("check", "--math", tmp_path)
    assert res.exit_code == EXIT_TOOL_FAILURE, res.output
    assert "Traceback" not in res.output
    assert "f6_rope.yaml: error: <file>: internal error while proving: RuntimeError: boom" in (
        res.output
    )
    assert "bad.yaml:26:9: error: equivalent_to: cannot evaluate" in res.output
    assert f"ok: {tmp_path / 'f6_swiglu.yaml'}" in res.output
    assert "3 spec(s): 1 valid and proven, 1 invalid" in res.output


@pytest.mark.parametrize("where", ["dir", "dir/", "missing/parent/x.yaml", "file/x.yaml"])
def test_grad_refuses_an_unwritable_out_before_deriving(tmp_path, where):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    res = invoke("grad", SWIGLU, "-o", f"{tmp_path}/{where}")
    assert res.exit_code == EXIT_INVALID_SPEC, res.output
    assert "Invalid value for '-o' / '--out'" in res.output
    assert ("is a folder; give a file name" in res.output) == where.startswith("dir")
    assert "derived:" not in res.output and not (tmp_path / "missing").exists()


def test_out_of_memory_in_an_expression_is_not_blamed_on_the_expression(monkeypatch):
    """An OOM while evaluating is the machine's limit, not a malformed expression: it passes
    through as torch's error (verify turns it into its own message), not as an ExprError."""
    import torch

    from coda_spec.expr import evaluate, parse

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 15.66 GiB")

    monkeypatch.setitem(evaluate.FUNCS, "silu", oom)
    with pytest.raises(torch.OutOfMemoryError):
        evaluate.evaluate(parse("y = silu(x)"), {"x": torch.ones(2)})
