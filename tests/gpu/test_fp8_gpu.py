"""fp8 stores on the GPU (marker ``gpu``): ``tests/specs_extra/fp8_out_amax.yaml`` built and
verified (every case against the fp64 reference, the pass rule's bound being one fp8 rounding at
the top of the output's range), and the epilogue's fp8 output equal to ``round_to`` of the same
fp32 values bit for bit where the accumulators agree.

Builds the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/fp8_out_amax.yaml tests/specs_extra/fp8_out_amax_host.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["fp8_out_amax", "fp8_out_amax_host"])
def test_verify_passes_on_fp8_outputs(name):
    need_build(name, f"tests/specs_extra/{name}.yaml")
    res = coda_cli("verify", f"build/{name}-latest", "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "out" in res.stdout and "row_amax" in res.stdout


def test_fp8_epilogue_saturates_and_rounds_like_round_to():
    """The kernel's e4m3 ``out`` against round_to(clamp(fp32 acc * scale)): the fp32 GEMMs
    differ only in summation order, so nearly every element has the same bits, none is NaN or
    past 448, and both bounds are reached."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec
    from coda_spec.dtypes import round_to

    d = need_build("fp8_out_amax", "tests/specs_extra/fp8_out_amax.yaml")
    k = coda_spec.load(str(d))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 256, device="cuda", generator=g).bfloat16()
    w = (torch.randn(512, 256, device="cuda", generator=g) / 16).bfloat16()
    scale = torch.tensor(165.0, device="cuda")
    res = k(x=x, w=w, scale=scale)
    out = res["out"]
    assert out.dtype == torch.float8_e4m3fn
    acc = x.float() @ w.float().T
    want = round_to((acc * scale).clamp(-448.0, 448.0), "fp8_e4m3").to(out.dtype)
    same = (out.view(torch.uint8) == want.view(torch.uint8)).float().mean().item()
    assert same > 0.99, same
    f = out.float()
    assert not f.isnan().any() and f.abs().max() == 448.0
    assert (f == 448.0).any() and (f == -448.0).any()
    torch.testing.assert_close(res["row_amax"], acc.abs().amax(-1), rtol=1e-5, atol=1e-5)
