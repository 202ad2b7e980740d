"""Exact (erf) GELU on the GPU (marker ``gpu``): ``tests/specs_extra/gelu_erf_mlp.yaml`` (an
erf-GELU MLP, ``gelu`` with ``approximate: none`` in the up projection's epilogue, and the
backward ``coda grad`` derives, ``dgelu`` of the same form in a dgrad epilogue) built, ``coda
verify`` of every output against the fp64 reference, and the forward against torch's own
``gelu(approximate='none')``. The conformance files (``prim_gelu``, ``prim_dgelu``, ``prim_erf``)
verify in ``test_primitive_conformance_gpu.py``.

Build the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/gelu_erf_mlp.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu

SPEC = "tests/specs_extra/gelu_erf_mlp.yaml"


def test_verify_passes():
    need_build("gelu_erf_mlp", SPEC)
    res = coda_cli("verify", SPEC, "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_forward_is_torch_s_exact_gelu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    chain = coda_spec.load(str(need_build("gelu_erf_mlp", SPEC)))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 256, device="cuda", generator=g).bfloat16()
    w_up = (torch.randn(1024, 256, device="cuda", generator=g) / 8).bfloat16()
    b_up = torch.randn(1024, device="cuda", generator=g).bfloat16()
    w_down = (torch.randn(256, 1024, device="cuda", generator=g) / 32).bfloat16()
    out = chain(x=x, w_up=w_up, b_up=b_up, w_down=w_down)
    z = x.float() @ w_up.float().T + b_up.float()
    want = torch.nn.functional.gelu(z, approximate="none")
    err = (out["h"].float() - want).abs().max().item()
    assert err < 1e-2 * want.abs().max().item(), err
