"""fp8 GEMM operands on the GPU (marker ``gpu``): ``tests/specs_extra/fp8_gemm.yaml`` built and
verified against the fp64 reference (fp8 inputs upcast exactly), and its outputs against
``torch._scaled_mm`` (the e4m3 x e4m3 kernel, per-tensor scales) and an upcast fp32 reference
(the mixed e4m3 x e5m2 kernel, which ``_scaled_mm`` does not take on every torch).

Builds the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/fp8_gemm.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu

SPEC = "tests/specs_extra/fp8_gemm.yaml"


def test_verify_passes_on_fp8_operands():
    need_build("fp8_gemm", SPEC)
    res = coda_cli("verify", "build/fp8_gemm-latest", "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("y", "q", "row_amax", "out"):
        assert name in res.stdout


def _inputs(torch, m: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, 256, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(512, 256, device="cuda", generator=g).to(torch.float8_e4m3fn)
    e5 = torch.randn(512, 256, device="cuda", generator=g).to(torch.float8_e5m2)
    scalars = {n: torch.tensor(v, device="cuda") for n, v in (("sx", 0.5), ("sw", 0.25))}
    return {"x": x, "w": w, "g": e5, "sg": torch.tensor(1.5, device="cuda"), **scalars}


def test_fp8_gemm_matches_scaled_mm_and_the_upcast_reference():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    k = coda_spec.load(str(need_build("fp8_gemm", SPEC)))
    ins = _inputs(torch, 4096)
    res = k(**ins)
    assert res["y"].dtype == torch.bfloat16 and res["q"].dtype == torch.float8_e4m3fn
    x, w = ins["x"], ins["w"]
    want = torch._scaled_mm(x, w.T, scale_a=ins["sx"], scale_b=ins["sw"], out_dtype=torch.float32)
    torch.testing.assert_close(res["y"].float(), want, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(res["row_amax"], want.abs().amax(-1), rtol=1e-2, atol=1e-2)
    upcast = (x.float() @ w.float().T) * (ins["sx"] * ins["sw"])
    q = res["q"].float()
    assert not q.isnan().any()
    torch.testing.assert_close(q, upcast.clamp(-448.0, 448.0), rtol=0.07, atol=0.02)
    # The mixed kernel against the exact upcast product. Hopper's fp8 WGMMA adds its products at
    # reduced precision (about 14 significant bits: DeepSeek-V3's report, section 3.3.2; QuACK
    # promotes to fp32 once per K tile), so an element near cancellation is off by a fraction of
    # the mass of its terms, not of its value (measured on the H200, 2026-12-02: 15 of 2M
    # elements past 1e-2 absolute, the largest 0.023, against a mass near 250).
    g = ins["g"].float()
    mixed = (x.float() @ g.T) * ins["sg"]
    mass = (x.float().abs() @ g.abs().T) * ins["sg"]
    err = (res["out"].float() - mixed).abs()
    bound = 2.0**-12 * mass + 2.0**-8 * mixed.abs()  # accumulation, then the bf16 store
    assert (err <= bound).all(), float((err / bound).max())


def test_fp8_gemm_rejects_a_bf16_operand():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec
    from coda_spec.runtime import CodaRuntimeError

    k = coda_spec.load(str(need_build("fp8_gemm", SPEC)))
    ins = _inputs(torch, 256)
    ins["x"] = ins["x"].bfloat16()
    with pytest.raises(CodaRuntimeError, match="expected fp8_e4m3"):
        k(**ins)
