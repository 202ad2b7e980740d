"""fp32 half-width outputs of ``acc_pair`` kernels (issue 31, "accepted, then refused").

QuACK 0.6.5's gated (half-width) store is 16-bit on sm90, so ``coda build`` used to fail on an
acc_pair kernel storing an fp32 tile (``TypeError: acc_pair auxiliary output must be 16-bit (or
fp8/fp4)``) after ``coda check --math`` called it valid and proven. coda now stores it through
``PairF32Store`` (``coda_spec/lower/quack_ops/pair_f32.py``): the fp32 bits as the full-width
16-bit tile they are. Here: the lowering's choice and field, the sm_90a compile (slow tier), and
pins of the QuACK ``TileStore`` methods the op re-states. The GPU numerics (the fp32 values
rounded to bf16 equal QuACK's own bf16 output bit for bit) are tests/gpu/test_pair_f32_gpu.py.
An fp8 half-width tile is ``PairF8Store``'s (tests/test_pair_f8.py).
"""

from __future__ import annotations

import inspect

import pytest

from coda_spec.artifact import F32_BITS
from coda_spec.build import BuildOptions, build_spec
from coda_spec.check.frontend import check_file
from coda_spec.config import DEFAULT
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, needs_build, source_pin

SPEC = ROOT / "tests" / "specs_extra" / "swiglu_fp32_aux.yaml"


def _kernel():
    lowered = lower_spec(check_file(SPEC), DEFAULT)
    (k,) = lowered.kernels
    return k


def test_fp32_half_width_output_lowers_to_pair_f32_store():
    k = _kernel()
    assert 'PairF32Store("out")' in k.decorator
    assert 'TileStore("out_bf", gated=True)' in k.decorator
    fields = {f.name: f for f in k.fields}
    assert (fields["out"].dtype, fields["out"].transform) == ("fp32", F32_BITS)
    assert fields["out_bf"].transform == ""


@pytest.mark.slow
@needs_build
def test_builds_for_sm90a(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = build_spec(SPEC.relative_to(ROOT), BuildOptions(out=tmp_path, explicit=True))
    assert (res.directory / "kernel.py").is_file()


# TileStore methods PairF32Store and PairF8Store re-state or rely on (sha256 prefix of their
# source, QuACK 0.6.5; PairF8Store relies on store_convert's narrow gated permute on sm90 and on
# _make_tiled_copy_r2s's sm90 geometry): a QuACK upgrade that changes one fails here; re-check
# pair_f32.py and pair_f8.py, then re-pin.
TILE_STORE_PINS = {
    "to_params": "a48347066af89677",
    "store_setup": "c435b388a6333b03",
    "store_convert": "bd7e4c9008a89911",
    "_make_tiled_copy_r2s": "05e0f2a2f6540641",
    "host_fake_arg": "54d90a9e601a81f5",
}


@pytest.mark.slow  # imports quack and cutlass
@needs_build
@pytest.mark.parametrize("method", sorted(TILE_STORE_PINS))
def test_tile_store_is_unchanged(method):
    from quack.epilogue.ops import TileStore

    fn = inspect.getattr_static(TileStore, method)
    fn = getattr(fn, "__wrapped__", fn)
    got = source_pin(fn)
    assert got == TILE_STORE_PINS[method], f"QuACK changed TileStore.{method}"
