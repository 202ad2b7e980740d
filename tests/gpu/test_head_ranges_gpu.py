"""H15 with native inputs on a GPU (marker ``gpu``; skipped cleanly without CUDA):
``tests/specs_extra/gqa_qknorm_rope.yaml`` (per-head vectors read repeated, column ranges,
per-head RoPE frequencies) built, then checked by ``coda verify`` against its fp64 reference and
its ``equivalent_to``. The build is ``build/gqa_qknorm_rope-latest``; where the ``[build]`` extra
is installed the test builds it first (a cache hit when current), elsewhere a missing build
fails, naming the command."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu
SPEC = "tests/specs_extra/gqa_qknorm_rope.yaml"


def test_gqa_qknorm_rope_verifies_on_the_gpu():
    if all(importlib.util.find_spec(m) for m in ("quack", "cutlass")):
        res = coda_cli("build", SPEC, "-j", "1")
        assert res.returncode == 0, res.stdout + res.stderr
    need_build("gqa_qknorm_rope", SPEC)
    res = coda_cli("verify", SPEC, "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
