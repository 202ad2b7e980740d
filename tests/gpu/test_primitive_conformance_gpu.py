"""The primitive conformance suite on a GPU (marker ``gpu``; skipped cleanly without CUDA): every
``tests/primitives/<name>.yaml`` (one spec per registered primitive; the CPU half is
``tests/test_primitive_conformance.py``) built, then checked by ``coda verify`` against its fp64
reference and its ``equivalent_to``.

Builds are the usual ``build/prim_<name>-latest``. Where the ``[build]`` extra is installed the
module builds the whole folder once first (``coda build tests/primitives``: a cache hit when
already built); elsewhere build it on a machine that has the extra and carry ``build`` to the
GPU machine, as for the catalogue. A missing build fails, naming that command.
"""

from __future__ import annotations

import importlib.util

import pytest

from coda_spec.primitives import registry
from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu
FOLDER = "tests/primitives"
NAMES = list(registry())


@pytest.fixture(scope="module")
def built() -> str:
    """What ``coda build tests/primitives`` printed ('' without the [build] extra)."""
    if not all(importlib.util.find_spec(m) for m in ("quack", "cutlass")):
        return ""
    res = coda_cli("build", FOLDER, "-j", "4")
    return res.stdout + res.stderr


@pytest.mark.parametrize("name", NAMES)
def test_primitive_spec_verifies_on_the_gpu(name, built):
    spec = f"{FOLDER}/{name}.yaml"
    try:
        need_build(f"prim_{name}", spec)
    except pytest.fail.Exception:
        if built:
            pytest.fail(f"`coda build {FOLDER}` built no prim_{name}:\n{built[-3000:]}")
        raise
    res = coda_cli("verify", spec, "--seed", "1")  # the spec: its build must be current
    assert res.returncode == 0, res.stdout + res.stderr
