"""A row softmax / log-sum-exp in the GEMM epilogue on the GPU (marker ``gpu``):
``moe_router_softmax.yaml`` (``softmax_row``) and ``log_softmax_row.yaml`` (``prepass:
logsumexp``) verified against the fp64 reference, and the router's probabilities checked
directly: at a ragged M, at large logits (the log-add-exp fold never overflows), and on rows
whose 128 experts share one tile of 128 columns.

Builds the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/moe_router_softmax.yaml \
        tests/specs_extra/log_softmax_row.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "name, out", [("moe_router_softmax", "probs"), ("log_softmax_row", "logp")]
)
def test_verify_passes(name, out):
    need_build(name, f"tests/specs_extra/{name}.yaml")
    res = coda_cli("verify", f"build/{name}-latest", "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert out in res.stdout, res.stdout


@pytest.mark.parametrize("m, scale", [(1000, 1.0), (257, 40.0), (0, 1.0)])
def test_router_probabilities_are_a_softmax(m, scale):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    k = coda_spec.load(
        str(need_build("moe_router_softmax", "tests/specs_extra/moe_router_softmax.yaml"))
    )
    g = torch.Generator(device="cuda").manual_seed(0)
    h = (torch.randn(m, 2048, device="cuda", generator=g) * scale).to(torch.bfloat16)
    w = (torch.randn(128, 2048, device="cuda", generator=g) / 45).to(torch.bfloat16)
    p = k(h=h, w_router=w)["probs"]
    assert p.shape == (m, 128) and p.dtype == torch.bfloat16
    want = torch.softmax(h.double() @ w.double().T, -1)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p.double(), want, rtol=1.6e-2, atol=2e-3)
    if m:
        torch.testing.assert_close(
            p.double().sum(-1), torch.ones(m, dtype=torch.float64, device="cuda"), rtol=0, atol=2e-2
        )
