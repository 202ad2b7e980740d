"""The device scripts (benchmarks/*_device.sh) fail when a part fails, and still pack the logs.

Before issue 31 each script's status was its last command's, a ``tar``: a run whose verify or
tests failed exited 0. Now every script sources benchmarks/device_status.sh (pipefail, errtrace,
an ERR trap that records the first failure) and ends with ``finish``. Each script runs here in a
sandbox (a symlinked checkout, an empty ``.device/setup.sh``) with ``python3``, ``torchrun`` and
``nvidia-smi`` stubbed: when they fail, the script exits non-zero and has packed a .tar.gz;
when they pass, a script whose other commands all succeed here exits 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted((ROOT / "benchmarks").glob("*_device.sh"))
# the arguments and environment each script needs to pick a part (the cheapest one)
HOW = {
    "issue11_device.sh": (["gates"], {}),
    "issue18_device.sh": (["gates"], {}),
    "runtime_device.sh": (["gates"], {}),
    "issue21_device.sh": ([], {"PHASE": "compile"}),
    "issue22_device.sh": ([], {"PHASE": "verify"}),
}

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("bash") is None, reason="bash scripts"
)


def _sandbox(tmp_path, rc: int) -> dict:
    for name in ("benchmarks", "specs", "tests", "examples", "coda_spec"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".device").mkdir()
    (tmp_path / ".device" / "setup.sh").write_text("")
    (tmp_path / "build" / "x-latest").mkdir(parents=True)
    (tmp_path / "build-fresh" / "fresh1-latest").mkdir(parents=True)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for tool, code in (("python3", rc), ("torchrun", rc), ("nvidia-smi", 0)):
        (stubs / tool).write_text(f"#!/bin/sh\necho {tool} stub\nexit {code}\n")
        (stubs / tool).chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    return {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "OUT": str(out),
        "BUDGET_S": "30",
    }


def _run(tmp_path, script, rc: int) -> subprocess.CompletedProcess:
    env = _sandbox(tmp_path, rc)
    args, extra = HOW.get(script.name, ([], {}))
    return subprocess.run(
        ["bash", f"benchmarks/{script.name}", *args],
        cwd=tmp_path,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_a_device_script_fails_when_a_part_fails_and_packs_its_logs(tmp_path, script):
    res = _run(tmp_path, script, rc=3)
    assert res.returncode != 0, res.stdout[-2000:] + res.stderr[-2000:]
    packed = list((tmp_path / "out").rglob("*.tar.gz"))
    assert packed, f"no logs packed: {res.stderr[-1000:]}"


def test_a_device_script_that_ran_clean_exits_0(tmp_path):
    res = _run(tmp_path, ROOT / "benchmarks" / "issue19_device.sh", rc=0)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert (tmp_path / "out" / "issue19.tar.gz").exists()
