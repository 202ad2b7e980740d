"""``coda verify`` on real kernels (marker ``gpu``), including the must-fail test: a mutant
spec's build checked against the original spec's reference must fail (exit 3)."""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu


def test_verify_passes_on_a_correct_build():
    need_build("rmsnorm_chain")
    res = coda_cli("verify", "build/rmsnorm_chain-latest", "--seed", "1", "--small")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mutant_build_fails_against_the_original_reference():
    need_build("rmsnorm_chain_mutant", "tests/gpu/mutant_rmsnorm_chain.yaml")
    res = coda_cli(
        "verify",
        "build/rmsnorm_chain_mutant-latest",
        "--seed",
        "1",
        "--small",
        "--reference-spec",
        "specs/rmsnorm_chain.yaml",
    )
    assert res.returncode == 3, res.stdout + res.stderr
    assert "NO" in res.stdout


def test_verify_passes_on_the_lmhead_cross_entropy_backward():
    """``onehot`` in the logits GEMM's epilogue (its column table filled by the runtime): every
    case (M = 16384, the ragged M = 1000 with V and D off the tile grid, M = 64) against the
    fp64 reference, and the unfused math."""
    spec = "tests/specs_extra/lmhead_ce_bwd.yaml"
    need_build("lmhead_ce_bwd", spec)
    res = coda_cli("verify", "build/lmhead_ce_bwd-latest", "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "dlogits" in res.stdout and "zdz" in res.stdout
