"""The one stage table (``coda_spec.stages``) and ``coda build --stop-after``.

Every stage stops there: the build prints the stage it stopped after, and its directory holds the
files of the stages so far (``keeps``) and nothing a later stage writes. The check and lower
stages run without the ``[build]`` extra (nothing is compiled); compile, link and manifest
compile a one-kernel spec with a Triton finalize and skip without quack.
"""

from __future__ import annotations

import fnmatch
import re

import pytest
from click.testing import CliRunner

from coda_spec import stages
from coda_spec.check.frontend import CHECK_STAGES, Checked, Normalized, run_stages
from coda_spec.check.source import Source
from coda_spec.cli import build as build_command
from coda_spec.cli import main
from coda_spec.errors import EXIT_INVALID_SPEC, EXIT_OK
from tests.conftest import ROOT

# One GEMM kernel and one finalize compiled by Triton: every stage has something to write.
SPEC = "specs/f1_residual_rmsnorm.yaml"
CHECK_NAMES = stages.NAMES[: stages.index(stages.LAST_CHECK) + 1]
BUILD_NAMES = stages.NAMES[len(CHECK_NAMES) :]


@pytest.fixture(autouse=True)
def _chdir_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_the_table_is_what_the_frontend_and_the_cli_run():
    assert (
        tuple(n for n, _ in CHECK_STAGES)
        == CHECK_NAMES
        == ("load", "validate", "normalize", "analyze")
    )
    assert BUILD_NAMES == ("lower", "compile", "link", "manifest")
    opt = next(p for p in build_command.params if p.name == "stop_after")
    assert tuple(opt.type.choices) == stages.NAMES
    assert opt.default == stages.NAMES[-1]
    for s in stages.STAGES:
        assert f"{s.name}: {s.produces}" in opt.help


def test_docs_pipeline_table_lists_the_stages_in_order():
    text = (ROOT / "docs" / "build.md").read_text()
    section = text.split("## The pipeline", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+) \|", section, re.M)
    assert tuple(r for r in rows if r != "stage") == stages.NAMES


def test_an_unknown_stage_is_named():
    with pytest.raises(ValueError, match="the stages are load, validate"):
        stages.stage("export")
    with pytest.raises(ValueError, match="unknown stage 'lowr'"):
        run_stages(SPEC, "lowr")


@pytest.mark.parametrize(
    "stop, kind",
    [("load", Source), ("validate", Source), ("normalize", Normalized), ("analyze", Checked)],
)
def test_run_stages_returns_the_value_of_the_stage_it_stopped_after(stop, kind):
    assert isinstance(run_stages(SPEC, stop), kind)


def _build(tmp_path, stop):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main,
        ["build", SPEC, "-o", str(out), "-j", "1", "--stop-after", stop],
        catch_exceptions=False,
    )
    return res, out


def _files(directory) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


@pytest.mark.parametrize("stop", CHECK_NAMES)
def test_a_check_stage_stops_there_and_writes_nothing(stop, tmp_path):
    res, out = _build(tmp_path, stop)
    assert res.exit_code == EXIT_OK, res.output
    produces = stages.stage(stop).produces
    assert f"{SPEC}: stopped after {stop} ({produces}; nothing written" in res.output
    assert not out.exists() or not any(out.iterdir())


def test_a_later_stages_error_is_not_reported_before_it():
    """normalize stops before analyze: an analyze error is reached only by analyze."""
    bad = "tests/bad_specs/bwd_save_unknown.yaml"
    run_stages(bad, "normalize")
    res = CliRunner().invoke(main, ["build", bad, "--stop-after", "analyze"])
    assert res.exit_code == EXIT_INVALID_SPEC, res.output


def _check_kept(out, stop):
    """The build directory holds every file of the stages up to ``stop`` and nothing else."""
    (directory,) = [
        d for d in out.iterdir() if d.is_dir() and not d.is_symlink() and d.name[0] != "."
    ]
    files = _files(directory)
    allowed = stages.kept(stop)
    later = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in allowed)]
    assert not later, f"--stop-after {stop} wrote files of later stages: {later}"
    for s in stages.STAGES[: stages.index(stop) + 1]:
        for glob in s.keeps:
            assert any(fnmatch.fnmatch(f, glob) for f in files), (s.name, glob, files)
    return directory


def test_lower_stops_there_and_keeps_the_lowered_text(tmp_path):
    res, out = _build(tmp_path, "lower")
    assert res.exit_code == EXIT_OK, res.output
    directory = _check_kept(out, "lower")
    assert f"stopped after lower ({stages.stage('lower').produces}): {directory}" in res.output
    assert not (out / "f1_residual_rmsnorm-latest").exists()


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["compile", "link", "manifest"])
def test_a_compile_stage_stops_there_and_keeps_what_it_wrote(stop, tmp_path):
    pytest.importorskip("quack", reason="needs the [build] extra (quack-kernels, cutlass-dsl)")
    res, out = _build(tmp_path, stop)
    assert res.exit_code == EXIT_OK, res.output
    directory = _check_kept(out, stop)
    if stop == stages.NAMES[-1]:
        assert f"built: {directory}" in res.output
        assert (out / "f1_residual_rmsnorm-latest").is_symlink()
    else:
        assert f"stopped after {stop} ({stages.stage(stop).produces}): {directory}" in res.output
        assert not (out / "f1_residual_rmsnorm-latest").exists()
