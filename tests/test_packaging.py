"""Packaging cannot drift: pre-commit hooks name real commands, the license is declared where it is
written, the changelog records every manifest format (docs/ci.md's exit codes:
tests/test_exit_codes.py).

No network: everything here reads files in the checkout and runs ``coda ... --help`` in-process.
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml
from click.testing import CliRunner

from coda_spec import artifact
from coda_spec.cli import main
from tests.conftest import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _hooks() -> dict:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert isinstance(hooks, list)
    return {h["id"]: h for h in hooks}


def _help(*words) -> str:
    res = CliRunner().invoke(main, [*words, "--help"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


# -- .pre-commit-hooks.yaml ---------------------------------------------------------------------


def test_hooks_are_the_two_documented_ones():
    assert set(_hooks()) == {"coda-check", "coda-check-math"}


@pytest.mark.parametrize("hook_id", ["coda-check", "coda-check-math"])
def test_hook_entry_names_a_real_subcommand_and_options(hook_id):
    hook = _hooks()[hook_id]
    assert hook["language"] == "python"
    assert hook.get("pass_filenames", True) is True
    files = re.compile(hook["files"])
    assert files.search("specs/a.yaml") and files.search("b.yml")
    assert not files.search("c.json") and not files.search("yaml.txt")
    exe, sub, *options = shlex.split(hook["entry"])
    assert exe in _pyproject()["project"]["scripts"]
    assert sub in main.commands, f"{hook_id}: no 'coda {sub}'"
    text = _help(sub)
    for opt in options:
        assert opt.startswith("-"), f"{hook_id}: entry passes {opt!r}, not an option"
        assert re.search(rf"(^|[\s,]){re.escape(opt)}\b", text), f"coda {sub} has no {opt}"


def test_no_hook_and_no_base_dependency_pulls_pypi_torch():
    """PyPI's Linux torch wheels bring about 3 GB of CUDA libraries: torch only from the CPU
    wheel index, and never a base dependency (``coda check`` imports no torch)."""
    base = _pyproject()["project"]["dependencies"]
    assert not [d for d in base if re.match(r"torch\b", d)], base
    for hook_id, hook in _hooks().items():
        deps = hook.get("additional_dependencies", [])
        if any(re.match(r"torch\b", d) for d in deps):
            assert any("download.pytorch.org/whl/cpu" in d for d in deps), hook_id
    assert not _hooks()["coda-check"].get("additional_dependencies")


# -- license ------------------------------------------------------------------------------------


def test_license_file_matches_pyproject():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


# -- CHANGELOG ----------------------------------------------------------------------------------


def test_changelog_records_every_manifest_format():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(r"^## Unreleased", text, re.M)
    missing = [
        n
        for n in range(1, artifact.FORMAT_VERSION + 1)
        if not re.search(rf"manifest format {n}\b", text, re.I)
    ]
    assert not missing, f"CHANGELOG.md: add 'manifest format N' for N in {missing}"


def test_the_format_history_has_a_line_per_manifest_format():
    # the one record of what each manifest format added: coda_spec/artifact/__init__.py's docstring
    missing = [
        n
        for n in range(1, artifact.FORMAT_VERSION + 1)
        if not re.search(rf"^\* {n}: \S", artifact.__doc__, re.M)
    ]
    assert not missing, (
        f"coda_spec/artifact/__init__.py 'Format history': add a '* N: ...' line for {missing}"
    )
    assert f"* {artifact.FORMAT_VERSION + 1}:" not in artifact.__doc__
    for doc in ("build.md", "runtime.md"):  # the docs point to it instead of repeating it
        text = (ROOT / "docs" / doc).read_text()
        assert "Format history" in text and "coda_spec/artifact/__init__.py" in text, doc
