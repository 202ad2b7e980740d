"""benchmarks/device_run.sh: every phase runs what exists, fails when a part fails, packs its logs.

Issue 34 folded the one-off device scripts (``issueNN_device.sh``, ``grad_device.sh``, ...) into
one driver with named phases over one budget helper (benchmarks/device_status.sh). Here, with no
GPU: the phase table and the phase functions agree; every script, test file and example a phase
runs exists; no other ``benchmarks/*.sh`` carries its own budget helper; and the driver runs in a
sandbox (a symlinked checkout, an empty ``.device/setup.sh``) with ``python3``, ``torchrun``,
``nvidia-smi`` and ``ncu`` stubbed: when they fail, every phase says so, has packed a .tar.gz,
and the run exits non-zero; when they pass, a run whose other commands all succeed exits 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

DRIVER = ROOT / "benchmarks" / "device_run.sh"
# the scripts the driver calls as phases (the current tools, kept as scripts)
TOOLS = {"device_run.sh", "device_status.sh", "step_device.sh", "tune_cap_device.sh"}

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("bash") is None, reason="bash scripts"
)


def _listed() -> list[str]:
    res = subprocess.run(["bash", str(DRIVER), "--list"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    phases = res.stdout.split("\nRecipes")[0]
    return re.findall(r"^  ([a-z0-9-]+) +\d", phases, re.M)


PHASES = _listed()


def test_every_phase_is_a_function_and_names_what_exists():
    text = DRIVER.read_text()
    defined = set(re.findall(r"^phase_([a-z0-9_]+)\(\)", text, re.M))
    assert len(PHASES) > 20 and {p.replace("-", "_") for p in PHASES} == defined
    # every file the driver runs (scripts, test files, examples) is in the repository
    named = r"\b((?:benchmarks|examples|tests)/[a-z0-9_/.-]+\.(?:py|sh|yaml))"
    paths = set(re.findall(named, text))
    assert "benchmarks/step_device.sh" in paths and "benchmarks/train_step.py" in paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"device_run.sh names files that do not exist: {missing}"
    # each recipe runs only listed phases
    for line in re.findall(r"device_run\.sh ([a-z0-9][a-z0-9 -]*)", text):
        assert set(line.split()) <= {*PHASES, "PHASE"}, line


def test_one_budget_helper_and_no_retired_script():
    """``left`` and ``pack`` live in device_status.sh; the other scripts source it (or are
    host-side tools with no budget)."""
    helper = re.compile(r"^\s*(left|budget|pack)\s*\(\)", re.M)
    for sh in sorted((ROOT / "benchmarks").glob("*.sh")):
        if sh.name in ("device_status.sh",):
            continue
        assert not helper.search(sh.read_text()), f"{sh.name} defines its own budget helper"
    names = {sh.name for sh in (ROOT / "benchmarks").glob("*.sh")}
    assert not {n for n in names if re.match(r"issue\d+_device\.sh", n)}
    assert {n for n in names if n.endswith("_device.sh")} <= TOOLS


def test_an_unknown_phase_is_refused_and_runs_nothing(tmp_path):
    res = subprocess.run(
        ["bash", str(DRIVER), "gates", "nope"], capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == 2 and "unknown phase 'nope'" in res.stderr
    assert not list(tmp_path.iterdir())


def _run(tmp_path, rc: int, phases: list[str]) -> subprocess.CompletedProcess:
    for name in ("benchmarks", "specs", "tests", "examples", "coda_spec"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".device").mkdir()
    (tmp_path / ".device" / "setup.sh").write_text("")
    for d in ("build/x-latest", "build-fresh/fresh1-latest", "build/stage/x-0123abcd"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "build/explore/b2_dgrad_dswiglu-0123abcd").mkdir(parents=True)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for tool, code in (("python3", rc), ("torchrun", rc), ("nvidia-smi", 0), ("ncu", rc)):
        (stubs / tool).write_text(f"#!/bin/sh\necho {tool} stub\nexit {code}\n")
        (stubs / tool).chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "OUT": str(out),
        "BUDGET_S": "60",
        "TUNED_OLD": str(ROOT / "coda_spec" / "tuned" / "h200.json"),
        # compile-warm packs this folder; torch sets the variable in a process that has compiled
        # (this test's worker, maybe), to its whole cache
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    return subprocess.run(
        ["bash", "benchmarks/device_run.sh", *phases],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_every_phase_fails_when_a_part_fails_and_packs_its_logs(tmp_path):
    res = _run(tmp_path, 3, PHASES)
    said = dict(re.findall(r"^== ([a-z0-9-]+): exit (\d+)", res.stdout, re.M))
    assert res.returncode != 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert set(said) == set(PHASES), res.stderr[-2000:]
    clean = [p for p, code in said.items() if code == "0"]
    assert not clean, f"phases that hid a failure: {clean}"
    packed = {p.name for p in (tmp_path / "out").glob("*.tar.gz")}
    own = {"step": "step.tar.gz", "memory": "step.tar.gz", "tune-cap": "tune.tar.gz"}
    assert {own.get(p, f"{p}.tar.gz") for p in PHASES} <= packed


def test_a_run_that_ran_clean_exits_0(tmp_path):
    res = _run(tmp_path, 0, ["ops", "llama-mask"])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "== ops: exit 0" in res.stdout and (tmp_path / "out" / "ops.tar.gz").exists()
