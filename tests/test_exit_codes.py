"""The one exit-code table (``coda_spec.errors.EXIT_CODES``) is the only home of exit statuses.

docs/ci.md's table is checked against it row by row; no module of coda spells an exit status as
a number; ``coda --help`` quotes it; a Ctrl-C exits with its ``EXIT_INTERRUPTED``.
"""

from __future__ import annotations

import ast
import re

import pytest
from click.testing import CliRunner

from coda_spec import cli, errors
from tests.conftest import ROOT

EXIT_FUNCS = {"exit", "_exit"}  # sys.exit, os._exit, exit


def test_the_constants_are_the_table():
    constants = {n: getattr(errors, n) for n in dir(errors) if n.startswith("EXIT_")}
    constants.pop("EXIT_CODES")
    assert constants == {e.name: e.code for e in errors.EXIT_CODES}
    assert len({e.code for e in errors.EXIT_CODES}) == len(errors.EXIT_CODES)


def test_ci_doc_lists_the_table_row_by_row():
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text.split("## (c) Exit codes", 1)[1]
    rows = {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \|(.*)$", section, re.M)}
    assert set(rows) == {e.code for e in errors.EXIT_CODES}, rows
    for e in errors.EXIT_CODES:
        name, means = [c.strip() for c in rows[e.code].split("|")][:2]
        assert name == f"`{e.name}`", f"docs/ci.md: exit {e.code} row names {name}, not {e.name}"
        assert means.startswith(e.short + ":"), f"docs/ci.md: exit {e.code}: '{e.short}: ...'"
    mismatch = rows[errors.EXIT_MISMATCH]
    assert "equivalent_to" in mismatch and "autograd" in mismatch
    assert "--allow-no-gpu" in rows[errors.EXIT_NO_GPU]


def _literal_exits(tree: ast.AST) -> list[int]:
    """Lines that exit with a number: ``sys.exit(2)``, ``sys.exit(0 if ok else 1)``, or a
    ``main`` that returns one (a process's status: docgen, the compile worker)."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in EXIT_FUNCS and node.args and _has_int(node.args[0]):
                bad.append(node.lineno)
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return) and sub.value is not None and _has_int(sub.value):
                    bad.append(sub.lineno)
    return bad


def _has_int(node) -> bool:
    """An int literal that could be the status: ``3``, ``0 if ok else 1`` (not an index, not a
    call's argument: ``sys.exit(main(sys.argv[1:]))`` is fine)."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.IfExp):
        return _has_int(node.body) or _has_int(node.orelse)
    if isinstance(node, ast.BoolOp):
        return any(_has_int(v) for v in node.values)
    return False


def test_no_module_spells_an_exit_status_as_a_number():
    found = {}
    for path in sorted((ROOT / "coda_spec").rglob("*.py")):
        bad = _literal_exits(ast.parse(path.read_text()))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert not found, f"use coda_spec.errors' EXIT_* constants: {found}"


def test_the_scan_finds_a_literal_exit():
    code = "import sys\ndef main():\n    return 3\nsys.exit(0 if x else 1)\n"
    assert sorted(_literal_exits(ast.parse(code))) == [3, 4]


def test_help_quotes_the_table():
    res = CliRunner().invoke(cli.main, ["--help"])
    assert res.exit_code == errors.EXIT_OK
    flat = " ".join(res.output.split())
    assert f"Exit codes: {errors.exit_summary()}." in flat


def test_ctrl_c_exits_interrupted(monkeypatch, capsys):
    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.run()
    assert e.value.code == errors.EXIT_INTERRUPTED == 130
    assert "interrupted" in capsys.readouterr().err
