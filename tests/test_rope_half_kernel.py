"""Rotate-half RoPE (``pairs: half``, Hugging Face's layout) in GEMM epilogues (issue 35).

``tests/specs_extra/qk_norm_rope_half.yaml`` (Qwen3's QK-norm then rotate-half RoPE in the QKV
projection's epilogue, transformers' weights unpermuted) is proven by ``coda check --math`` and
lowers to a ``HalfPartner`` operand the prepass fills with the rotated value (golden text). A
config whose tiles split a head, or whose epilogue subtile straddles half a head, is refused at
the item with the reason; a packed kernel is refused by ``coda check``. The runtime's per-column
frequency tables put each head's frequencies at columns j and j + hd/2. ``rope_bwd``'s kernel:
``tests/primitives/rope_bwd.yaml`` (conformance). GPU: ``tests/gpu/test_rope_half_gpu.py``.
"""

from __future__ import annotations

import math

import pytest

from coda_spec.check.frontend import check_file
from coda_spec.config import BuildConfig, KernelSizes, parse_config
from coda_spec.errors import EXIT_OK, SpecError, render_text
from coda_spec.lower.module import lower_spec
from coda_spec.primitives._pairs import half_supports
from tests.conftest import ROOT, assert_golden, coda_check

SPEC = ROOT / "tests" / "specs_extra" / "qk_norm_rope_half.yaml"
BWD = ROOT / "tests" / "primitives" / "rope_bwd.yaml"
GOLDEN = ROOT / "tests" / "golden" / "kernels" / "qk_norm_rope_half.py"


def test_the_spec_is_proven():
    run = coda_check("--math", str(SPEC.relative_to(ROOT)))
    assert run.exit_code == EXIT_OK, run.output
    assert "1/1 forward outputs equal equivalent_to" in run.output


def test_the_kernel_text_is_golden(at_root):
    checked = check_file(SPEC.relative_to(ROOT))
    module = lower_spec(checked, parse_config(checked.spec.configs[0]))
    assert_golden(GOLDEN, module.source)
    # the rotated value is re-computed in the prepass fn, ranges and all, and stashed there
    assert '"qk_rot_all_half": qk_rot_all_half_in' in module.source
    assert "select(columns < 2560.0" in module.source.split("@gemm_epilogue")[0]


class _Op:
    def __init__(self, **kw):
        self.kw = kw

    def get(self, key, default=None):
        return self.kw.get(key, default)


@pytest.mark.parametrize(
    "hd, tile_n, epi_n, why",
    [
        (128, 128, 0, None),
        (128, 256, 0, None),
        (64, 128, 0, None),
        (64, 192, 0, None),
        (128, 192, 0, "tile_N = 192 is not a multiple of head_dim = 128"),
        (64, 128, 64, "its 64 columns do not divide head_dim / 2 = 32"),
        (32, 128, 0, "its 32 columns do not divide head_dim / 2 = 16"),
    ],
)
def test_configs_that_split_a_head_are_refused(hd, tile_n, epi_n, why):
    op = _Op(pairs="half", head_dim="hd")
    got = half_supports(BuildConfig(tile_n=tile_n, epi_n=epi_n), KernelSizes((("hd", hd),)), op)
    assert got == why if why is None else why in got
    assert half_supports(BuildConfig(tile_n=96), KernelSizes(), _Op()) is None  # adjacent


def test_a_build_at_such_a_config_is_refused_at_the_item():
    with pytest.raises(SpecError) as e:
        lower_spec(check_file(BWD), parse_config("128x96,cluster=2x1,cooperative"))
    [d] = e.value.diagnostics
    text = render_text(d, None)
    assert "rope_bwd.yaml:22:" in text and "cannot lower 'rope_bwd'" in text
    assert "tile_N = 96 is not a multiple of head_dim = 64" in text


def test_runtime_tables_follow_the_rotate_half_layout():
    torch = pytest.importorskip("torch")
    from coda_spec.runtime.launch import row_table

    inv = torch.tensor([1.0, 0.25], dtype=torch.float32)  # head_dim 4, 3 heads: W = 12
    hi = row_table(inv, "repeat+halves=4+turns_hi", 12)
    lo = row_table(inv, "repeat+halves=4+turns_lo", 12)
    assert hi.shape == lo.shape == (1, 12)
    want = torch.tensor([1.0, 0.25, 1.0, 0.25] * 3, dtype=torch.float64) / (2 * math.pi)
    assert (hi[0].double() + lo[0].double() - want).abs().max() < 1e-15
    assert torch.equal(hi[0], want.float())
