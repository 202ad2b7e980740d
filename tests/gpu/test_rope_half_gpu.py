"""Rotate-half RoPE in a GEMM epilogue on the GPU (marker ``gpu``): Qwen3's QK-norm + RoPE in
transformers' layout (``qk_norm_rope_half.yaml``) and ``rope_bwd``'s rotate-half kernel
(``tests/primitives/rope_bwd.yaml``) verified against the fp64 reference.

Builds the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/qk_norm_rope_half.yaml tests/primitives/rope_bwd.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "name, path, out",
    [
        ("qk_norm_rope_half", "tests/specs_extra/qk_norm_rope_half.yaml", "qkv"),
        ("prim_rope_bwd", "tests/primitives/rope_bwd.yaml", "y"),
    ],
)
def test_verify_passes(name, path, out):
    need_build(name, path)
    res = coda_cli("verify", f"build/{name}-latest", "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out in res.stdout, res.stdout
