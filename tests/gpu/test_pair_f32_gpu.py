"""An acc_pair kernel's fp32 half-width output on the GPU (marker ``gpu``):
``tests/specs_extra/swiglu_fp32_aux.yaml`` stores the SwiGLU output twice, in fp32 (QuACK's
gated store is 16-bit on sm90, so coda's ``PairF32Store`` writes the fp32 bits as the full-width
16-bit tile they are) and in bf16 (QuACK's own gated store). The fp32 values, rounded to bf16,
must equal the bf16 output bit for bit: a wrong placement of the bytes (a swapped half, a column
off by one, a permuted quad) cannot pass. ``coda verify`` checks every output against the fp64
reference besides.

Build the lead makes first (GPU-blind, any machine):
    coda build -o build tests/specs_extra/swiglu_fp32_aux.yaml
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, need_build

pytestmark = pytest.mark.gpu

SPEC = "tests/specs_extra/swiglu_fp32_aux.yaml"


def test_verify_passes():
    need_build("swiglu_fp32_aux", SPEC)
    res = subprocess.run(
        [sys.executable, "-m", "coda_spec.cli", "verify", "build/swiglu_fp32_aux-latest"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("m", [4096, 1000])  # a ragged last tile too
def test_fp32_output_rounds_to_the_bf16_output(m):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec

    chain = coda_spec.load(str(need_build("swiglu_fp32_aux", SPEC)))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, 256, device="cuda", generator=g).bfloat16()
    w = (torch.randn(1024, 256, device="cuda", generator=g) / 16).bfloat16()
    out = chain(x=x, w_gu=w)
    assert out["out"].dtype == torch.float32 and out["out"].shape == (m, 512)
    assert torch.equal(out["out"].bfloat16(), out["out_bf"])
    ref = torch.nn.functional.silu(x.float() @ w[0::2].float().T) * (x.float() @ w[1::2].float().T)
    assert (out["out"] - ref).abs().max().item() < 1e-2 * ref.abs().max().item()
