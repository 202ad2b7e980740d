"""``coda build`` without the ``[build]`` extra, and where a failed build's log is pointed at.

These tests compile nothing, so they run with or without quack/cutlass installed. The extra is
hidden by setting ``sys.modules['quack'] = None`` (and ``cutlass``): that is exactly how Python
marks a module as not importable, so ``importlib.util.find_spec`` returns None and an import
raises ImportError, whatever is installed. The compile workers are never started.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from coda_spec import build as build_mod
from coda_spec.build import BuildOptions, build_spec
from coda_spec.cli import main
from coda_spec.errors import EXIT_OK, EXIT_TOOL_FAILURE, ToolError
from tests.conftest import needs_triton

KERNEL_SPEC = "specs/f8_scale.yaml"
HOST_ONLY_SPEC = "specs/b3_rope_bwd.yaml"


pytestmark = pytest.mark.usefixtures("at_root")


def _hide(monkeypatch, *modules):
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


def _build(args) -> object:
    return CliRunner().invoke(main, ["build", *args], catch_exceptions=False)


def test_missing_build_extra_fails_before_compiling(monkeypatch, tmp_path):
    _hide(monkeypatch, "quack", "cutlass")
    out = tmp_path / "out"
    result = _build([KERNEL_SPEC, "-o", str(out)])
    assert result.exit_code == EXIT_TOOL_FAILURE, result.output
    text = result.output
    assert f"{KERNEL_SPEC}: compiling" not in text
    assert "Traceback" not in text
    assert text.startswith(f"{KERNEL_SPEC}: error: the [build] extra, needed to compile kernels")
    assert 'pip install "coda-spec[build]"' in text
    assert 'pip install -e ".[build]"' in text
    assert "quack-kernels (module 'quack')" in text
    assert "nvidia-cutlass-dsl (module 'cutlass')" in text
    assert not out.exists() or not any(out.iterdir()), "nothing is written"


def test_missing_one_package_names_only_that_one(monkeypatch):
    _hide(monkeypatch, "cutlass")
    monkeypatch.setattr(build_mod.importlib.util, "find_spec", _only_hidden(build_mod))
    with pytest.raises(ToolError) as e:
        build_mod.require_build_extra()
    assert "nvidia-cutlass-dsl (module 'cutlass')" in str(e.value)
    assert "quack" not in str(e.value)


def _only_hidden(mod):
    """find_spec that reports a module present unless it is hidden (None in sys.modules), so
    the test does not depend on quack being installed here."""
    real = mod.importlib.util.find_spec

    def find_spec(name, package=None):
        if sys.modules.get(name, 0) is None:
            return real(name, package)
        return object()

    return find_spec


def test_missing_build_extra_with_stop_after_lower_still_lowers(monkeypatch, tmp_path):
    _hide(monkeypatch, "quack", "cutlass")
    res = build_spec(KERNEL_SPEC, BuildOptions(out=tmp_path, stop_after="lower"))
    assert (res.directory / "kernel.py").is_file()


@needs_triton  # the host steps still compile, through Triton
def test_host_only_spec_builds_without_build_extra(monkeypatch, tmp_path):
    _hide(monkeypatch, "quack", "cutlass")
    result = _build([HOST_ONLY_SPEC, "-o", str(tmp_path)])
    assert result.exit_code == EXIT_OK, result.output
    assert "built:" in result.output
    assert list(tmp_path.glob("*/manifest.json"))


def test_workers_without_output_point_at_the_log_that_exists(monkeypatch, tmp_path):
    """The message names the build log where it is after the failed build is renamed."""
    monkeypatch.setattr(build_mod, "require_build_extra", lambda *modules: None)
    real_popen = subprocess.Popen

    def dying_worker(cmd, **kwargs):  # a compile worker that dies before writing anything
        return real_popen([sys.executable, "-c", "print('worker died')"], **kwargs)

    monkeypatch.setattr(build_mod.subprocess, "Popen", dying_worker)
    with pytest.raises(ToolError) as e:
        build_spec(KERNEL_SPEC, BuildOptions(out=tmp_path, jobs=1))
    message = str(e.value)
    assert "compile workers exited without output" in message
    log = Path(message.rsplit("see ", 1)[1])
    assert log.name == "build.log" and log.parent.name.endswith(".failed"), log
    assert log.is_file(), f"{log} does not exist"
    assert "worker died" in log.read_text()
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    "stop, spec, exit_code",
    [
        ("load", "tests/bad_specs/bwd_save_unknown.yaml", EXIT_OK),  # an analyze error
        ("normalize", "tests/bad_specs/bwd_save_unknown.yaml", EXIT_OK),
        ("analyze", "tests/bad_specs/bwd_save_unknown.yaml", 2),
        ("validate", "tests/bad_specs/add_to_read_after.yaml", EXIT_OK),
    ],
)
def test_stop_after_a_check_stage_runs_nothing_later(stop, spec, exit_code, tmp_path):
    """--stop-after load|validate|normalize stops there: a later stage's error is not reached;
    --stop-after analyze reports it (exit 2). Nothing is written either way."""
    result = _build([spec, "--stop-after", stop, "-o", str(tmp_path)])
    assert result.exit_code == exit_code, result.output
    if exit_code == EXIT_OK:
        assert f"stopped after {stop} (" in result.output
        assert "nothing written" in result.output
    assert not list(tmp_path.iterdir())
