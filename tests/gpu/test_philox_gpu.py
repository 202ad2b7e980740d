"""Masks and Philox dropout on the GPU (marker ``gpu``; skipped cleanly without CUDA).

* ``philox_exact`` (tests/specs_extra): the philox numbers a GEMM epilogue and a host step store
  in fp32 equal ``coda_spec.philox.uniform`` bit for bit (the reference's int64 torch
  arithmetic), at a ragged M and N, with an offset that crosses 2^32; a new seed or offset on the
  same loaded chain gives other numbers (device scalars: no rebuild), the same ones give the same.
* ``coda verify`` of the specs that use them: ``dropout_residual`` (forward and its backward,
  whose host step regenerates the mask), ``masked_residual`` (uint8 and bool tile, row and
  column masks) and ``philox_exact``.

Build first (no GPU needed) and carry ``build`` to the GPU machine::

    coda build tests/specs_extra/philox_exact.yaml tests/specs_extra/dropout_residual.yaml \
        tests/specs_extra/masked_residual.yaml
"""

from __future__ import annotations

import pytest

from tests.conftest import coda_cli, need_build

pytestmark = pytest.mark.gpu
EXTRA = "tests/specs_extra"
SPECS = ("philox_exact", "dropout_residual", "masked_residual")


def _inputs(torch, m: int, seed: int, offset: int) -> dict:
    dev = torch.device("cuda")
    gen = torch.Generator(device="cpu").manual_seed(0)
    return {
        "h": torch.randn(m, 64, generator=gen).to(dev, torch.bfloat16),
        "w": torch.randn(136, 64, generator=gen).to(dev, torch.bfloat16),
        "x": torch.randn(m, 136, generator=gen).to(dev),
        "seed": torch.tensor(seed, dtype=torch.int64, device=dev),
        "offset": torch.tensor(offset, dtype=torch.int64, device=dev),
    }


@pytest.mark.parametrize("m", [1000, 257])
def test_philox_numbers_are_the_reference_bit_for_bit(m):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import coda_spec
    from coda_spec import philox

    chain = coda_spec.load(need_build("philox_exact", f"{EXTRA}/philox_exact.yaml"))
    seen = []
    for seed, offset in ((123456789012, 2**32 - 5000), (7, 0), (123456789012, 2**32 - 5000)):
        out = chain(**_inputs(torch, m, seed, offset))
        want = philox.uniform(seed, offset, m, 136, dtype=torch.float64).float().cuda()
        for name in ("ug", "v"):
            got = out[name]
            bad = (got != want).sum().item()
            assert bad == 0, f"{name}: {bad} of {got.numel()} numbers differ (seed {seed})"
        seen.append(out["ug"].clone())
    assert not torch.equal(seen[0], seen[1])  # a new (seed, offset): new numbers, no rebuild
    assert torch.equal(seen[0], seen[2])  # the same ones: the same numbers (the backward's mask)


@pytest.mark.parametrize("name", SPECS)
def test_spec_verifies_on_the_gpu(name):
    spec = f"{EXTRA}/{name}.yaml"
    need_build(name, spec)
    res = coda_cli("verify", spec, "--seed", "1")
    assert res.returncode == 0, res.stdout + res.stderr
