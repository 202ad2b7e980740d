"""fp32 half-width outputs of ``acc_pair`` kernels (issue 31, "accepted, then refused").

QuACK 0.6.5's gated (half-width) store is 16-bit on sm90, so ``coda build`` used to fail on an
acc_pair kernel storing an fp32 tile (``TypeError: acc_pair auxiliary output must be 16-bit (or
fp8/fp4)``) after ``coda check --math`` called it valid and proven. coda now stores it through
``PairF32Store`` (``coda_spec/lower/quack_ops/pair_f32.py``): the fp32 bits as the full-width
16-bit tile they are. Here: the lowering's choice and field, the sm_90a compile (slow tier), and
pins of the QuACK ``TileStore`` methods the op re-states. The GPU numerics (the fp32 values
rounded to bf16 equal QuACK's own bf16 output bit for bit) are tests/gpu/test_pair_f32_gpu.py.
An fp8 half-width tile stays refused at the store by ``coda check`` (test_fp8_pair_refused).
"""

from __future__ import annotations

import hashlib
import inspect

import pytest

from coda_spec.artifact import F32_BITS
from coda_spec.build import BuildOptions, build_spec
from coda_spec.check.frontend import check_file
from coda_spec.config import DEFAULT
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, coda_check, needs_build

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


def test_fp8_pair_refused_at_the_store(tmp_path):
    """QuACK 0.6.5 asserts 16-bit for an sm90 gated store and has no sm90 narrow path; an fp8
    byte is a quarter of the pair's register, so unlike fp32 it is no re-reading of the bytes.
    ``check`` refuses it where ``build`` would fail."""
    path = tmp_path / "fp8_pair.yaml"
    path.write_text(SPEC.read_text().replace("out: fp32, out_bf", "out: fp8_e4m3, out_bf"))
    res = coda_check(str(path))
    assert res.exit_code == 2
    assert "fp8_pair.yaml:19:9: error: steps[0].epilogue[2]: cannot lower 'store'" in res.output
    assert "store it in bf16 here" in res.output


@pytest.mark.slow
@needs_build
def test_builds_for_sm90a(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = build_spec(SPEC.relative_to(ROOT), BuildOptions(out=tmp_path, explicit=True))
    assert (res.directory / "kernel.py").is_file()


# TileStore methods PairF32Store re-states or relies on (sha256 prefix of their source, QuACK
# 0.6.5): a QuACK upgrade that changes one fails here; re-check pair_f32.py, then re-pin.
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
    got = hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    assert got == TILE_STORE_PINS[method], f"QuACK changed TileStore.{method}"
