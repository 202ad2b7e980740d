"""``coda build``'s host logic, without the compiler: these tests compile nothing, so they run
with or without the ``[build]`` extra (quack, cutlass) installed.

Config refusals (QuACK's schedule rules, a primitive's ``supports``) happen before anything is
compiled; a compile failure's traceback is mapped to a spec line from the files a worker leaves;
``--stop-after lower`` writes the lowered text only; and the runtime imports neither cutlass nor
quack. What imports quack/cutlass is the compile worker's functions only
(``coda_spec.lower.quack_adapter``), never the modules these tests exercise.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coda_spec.build import BuildOptions, build_spec
from coda_spec.check.frontend import check_file
from coda_spec.errors import EXIT_INVALID_SPEC
from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def _chdir_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_stop_after_lower_keeps_intermediates_and_is_not_complete(tmp_path):
    res = build_spec("specs/f2_deferred_norm.yaml", BuildOptions(out=tmp_path, stop_after="lower"))
    assert not res.complete
    assert (res.directory / "kernel.py").is_file()
    assert not (res.directory / "manifest.json").exists()
    assert not (tmp_path / "f2_deferred_norm-latest").exists()


@pytest.mark.parametrize(
    "config,fragment",
    [
        ("128x256,pingpong", "pingpong at tile_M=128 needs tile_N <= 208"),
        ("100x256", "cooperative needs tile_M"),
        ("128x256,cluster=4x2", "cluster size"),
    ],
)
def test_unsupported_config_is_refused_with_exit_2(tmp_path, config, fragment):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "coda_spec.cli",
            "build",
            "specs/f2_deferred_norm.yaml",
            "-o",
            str(tmp_path),
            "--config",
            config,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == EXIT_INVALID_SPEC, res.stdout + res.stderr
    assert fragment in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow  # a subprocess importing torch
def test_runtime_imports_neither_cutlass_nor_quack():
    code = (
        "import sys, coda_spec, coda_spec.runtime;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('quack', 'cutlass')];"
        "assert not bad, bad"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=dict(os.environ)
    )
    assert res.returncode == 0, res.stderr


def test_config_a_primitive_cannot_support_is_refused_at_its_line(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "coda_spec.cli",
            "build",
            "specs/f6_swiglu.yaml",
            "-o",
            str(tmp_path),
            "--config",
            "128x144",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == EXIT_INVALID_SPEC
    assert res.stderr.startswith(
        "specs/f6_swiglu.yaml:19:9: error: steps[0].epilogue[1]: "
        "cannot lower 'swiglu': a half-width (gated) output needs "
        "tile_N divisible by 32, not 144"
    )
    assert not any(tmp_path.iterdir()), "nothing is written for a refused config"


# the fallback's symbol, a variant's and an accumulating flavour's: all map to their step
@pytest.mark.parametrize(
    "symbol", ["coda_out_proj", "coda_out_proj__128x128", "coda_out_proj__accumulate"]
)
def test_compile_failure_is_mapped_to_the_spec_line_of_the_generated_statement(tmp_path, symbol):
    from coda_spec.build import _compile_diag
    from coda_spec.config import BuildConfig
    from coda_spec.lower.module import lower_spec

    checked = check_file("specs/rmsnorm_chain.yaml")
    source = lower_spec(checked, BuildConfig()).source
    work = tmp_path / ".tmp-rmsnorm_chain-0123456789ab-42"
    work.mkdir()
    (work / "kernel.py").write_text(source)
    target = next(
        i for i, ln in enumerate(source.splitlines(), 1) if ln.strip() == "h = x1 * gamma"
    )
    (work / f"{symbol}.error.txt").write_text(
        "Traceback (most recent call last):\n"
        f'  File "{work}/kernel.py", line {target}, in coda_out_proj\n'
        "    h = x1 * gamma\nValueError: something the DSL did not like\n"
    )
    d = _compile_diag(checked, work, symbol, tmp_path)
    assert (d.line, d.path) == (20, "out_proj")  # rmsnorm_chain.yaml:20 is the mul item
    assert "ValueError: something the DSL did not like" in d.message
    assert f"rmsnorm_chain-0123456789ab.failed/{symbol}.error.txt" in d.hint
