"""Per-tensor finalizes (``over: rows``) and ``finalize: var`` on the GPU (marker ``gpu``):
``fp8_out_amax.yaml`` (its ``amax`` []) and ``layer_norm_var.yaml`` (mean and var of a GEMM's
output) built and verified against the fp64 reference, and the per-tensor amax reproducible
bit for bit and equal to the max of ``row_amax``.

Builds the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/fp8_out_amax.yaml tests/specs_extra/layer_norm_var.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "name, outs", [("fp8_out_amax", ("amax", "row_amax")), ("layer_norm_var", ("mu", "sigma2"))]
)
def test_verify_passes(name, outs):
    need_build(name, f"tests/specs_extra/{name}.yaml")
    res = coda_cli("verify", f"build/{name}-latest", "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(o in res.stdout for o in outs), res.stdout


def _inputs(torch, m):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, 256, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(512, 256, device="cuda", generator=g).to(torch.bfloat16)
    return x, w


def test_per_tensor_amax_is_reproducible_and_the_max_of_row_amax():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    k = coda_spec.load(str(need_build("fp8_out_amax", "tests/specs_extra/fp8_out_amax.yaml")))
    for m in (1000, 0):
        x, w = _inputs(torch, m)
        scale = torch.tensor(160.0, device="cuda")
        a = k(x=x, w=w, scale=scale)
        b = k(x=x, w=w, scale=scale)
        assert a["amax"].shape == () and a["amax"].dtype == torch.float32
        assert torch.equal(a["amax"], b["amax"])  # one program, a fixed order: the same bits
        want = a["row_amax"].max() if m else torch.tensor(float("-inf"), device="cuda")
        assert torch.equal(a["amax"], want)


def test_var_matches_torch_var_of_the_output():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    k = coda_spec.load(str(need_build("layer_norm_var", "tests/specs_extra/layer_norm_var.yaml")))
    x, w = _inputs(torch, 777)
    b = (torch.rand(512, device="cuda") * 4 - 2).to(torch.bfloat16)
    r = k(x=x, w=w, b=b)
    h = x.double() @ w.double().T + b.double()
    torch.testing.assert_close(r["mu"].double(), h.mean(-1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(r["sigma2"].double(), h.var(-1, correction=0), rtol=1e-3, atol=1e-2)
    assert (r["sigma2"] >= 0).all()
