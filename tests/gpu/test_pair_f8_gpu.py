"""An acc_pair kernel's fp8 half-width output on the GPU (marker ``gpu``):
``tests/specs_extra/swiglu_fp8_delayed.yaml`` quantizes the SwiGLU output with a per-tensor
scale, saturated to e4m3 and stored through coda's ``PairF8Store`` (QuACK's gated store with an
8-bit element on sm90, ``coda_spec/lower/quack_ops/pair_f8.py``), beside the pre-activation and
the per-tensor amax of the unscaled activation. ``coda verify`` checks every output against the
fp64 reference; the second test compares the fp8 bytes with ``round_to`` of the same values
computed by torch in fp32: the GEMMs differ only in summation order, so nearly every byte is the
same, and a misplaced value (a swapped pair, a permuted quad, a column off by one) cannot pass.

Build the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/swiglu_fp8_delayed.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu

NAME, SPEC = "swiglu_fp8_delayed", "tests/specs_extra/swiglu_fp8_delayed.yaml"


def test_verify_passes():
    need_build(NAME, SPEC)
    res = coda_cli("verify", f"build/{NAME}-latest")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "out" in res.stdout and "amax" in res.stdout


@pytest.mark.parametrize("m", [4096, 1000])  # a ragged last tile too
def test_fp8_output_is_round_to_of_the_scaled_activation(m):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec
    from coda_spec.dtypes import round_to

    chain = coda_spec.load(str(need_build(NAME, SPEC)))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, 256, device="cuda", generator=g).bfloat16()
    w = (torch.randn(1024, 256, device="cuda", generator=g) / 16).bfloat16()
    scale = torch.tensor(140.0, device="cuda")
    res = chain(x=x, w_gu=w, scale=scale)
    out = res["out"]
    assert out.dtype == torch.float8_e4m3fn and out.shape == (m, 512)
    acc = x.float() @ w.float().T
    h = torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2]
    want = round_to((h * scale).clamp(-448.0, 448.0), "fp8_e4m3").to(out.dtype)
    same = (out.view(torch.uint8) == want.view(torch.uint8)).float().mean().item()
    assert same > 0.99, same
    f = out.float()
    assert not f.isnan().any() and f.abs().max() == 448.0  # saturated, never past it
    # a differing byte is one rounding step away (the fp32 values differ in the last bits)
    step = torch.maximum(want.float().abs() * 2.0**-3, torch.full_like(f, 2.0**-9))
    assert ((f - want.float()).abs() <= step).all()
    torch.testing.assert_close(res["amax"], h.abs().amax(), rtol=1e-4, atol=0.0)
    torch.testing.assert_close(res["z"].float(), acc, rtol=1e-2, atol=1e-2)
