"""fp8 half-width outputs of ``acc_pair`` kernels (issue 35: FP8 delayed scaling of a SwiGLU
output in the gate/up GEMM's epilogue).

``coda check`` used to refuse an fp8 half-width store in an acc_pair kernel ("QuACK 0.6.5 stores
fp8 from plain kernels on sm90"); coda now stores it through ``PairF8Store``
(``coda_spec/lower/quack_ops/pair_f8.py``: QuACK's gated store with an 8-bit element, whose sm90
narrow path QuACK asserts away). Here: ``tests/specs_extra/swiglu_fp8_delayed.yaml`` proven with
every mutant killed, the lowering's choice and field, a per-row reduction of the half-width
value (fed to QuACK's pair sink as a pair: a build failure before), the refusals that stay (an
fp8 D of an acc_pair kernel, a half-width fp8 row that is not 16 bytes), and the sm_90a compile
(slow tier). QuACK's TileStore methods the op relies on are pinned in tests/test_pair_f32.py.
The bytes on the GPU are tests/gpu/test_pair_f8_gpu.py.
"""

from __future__ import annotations

import importlib

import pytest

from coda_spec.build import BuildOptions, build_spec
from coda_spec.check.frontend import check_file
from coda_spec.config import DEFAULT
from coda_spec.errors import EXIT_OK
from coda_spec.lower.module import lower_spec
from tests.conftest import ROOT, checked_text, coda_check, needs_build, source_pin

SPEC = ROOT / "tests" / "specs_extra" / "swiglu_fp8_delayed.yaml"


def test_swiglu_fp8_delayed_is_proven_by_check_math():
    res = coda_check("--math", str(SPEC))
    assert res.exit_code == EXIT_OK, res.output
    assert "3/3 forward outputs equal equivalent_to" in res.output


def test_every_swiglu_fp8_delayed_mutant_is_caught():
    pytest.importorskip("torch")
    from tests.algebra import mutation_report, sizes_of, small

    checked = small(check_file(SPEC))
    killed, total, survivors = mutation_report(checked, sizes_of(checked))
    assert survivors == [] and killed == total >= 10


def test_fp8_half_width_output_lowers_to_pair_f8_store():
    [k] = lower_spec(check_file(SPEC), DEFAULT).kernels
    assert 'PairF8Store("out")' in k.decorator
    assert k.d[:2] == ("z", "bf16")
    fields = {f.name: f for f in k.fields}
    out = fields["out"]
    assert (out.dtype, out.shape, out.transform) == ("fp8_e4m3", ("M", 512), "")


@pytest.mark.parametrize(
    ("kind", "fold", "sink"), [("absmax", "max", "pack(h, h)"), ("sum", "sum", "pack(h, 0.0)")]
)
def test_a_row_reduction_of_a_half_width_value_feeds_the_pair_sink(kind, fold, sink):
    """QuACK's acc_pair sinks take both lanes of a pair; a reduce_row of the half-width h (one
    value per pair) used to hand it h alone, which ``coda check`` accepted and ``coda build``
    failed on (``TypeError: 'Float32' object is not subscriptable``, at trace). It goes in as a
    pair that folds to h: twice for a max, beside a zero for a sum."""
    text = SPEC.read_text().replace("reduce_row: absmax", f"reduce_row: {kind}")
    text = text.replace("finalize: max", f"finalize: {fold}")
    [k] = lower_spec(checked_text(text, "swiglu_reduce.yaml"), DEFAULT).kernels
    assert any(f'"amax_part": {sink}' in line for line in k.body)


def test_a_column_reduction_of_a_half_width_value_is_refused_by_check(tmp_path):
    """Its partials would be as wide as the GEMM (the pair sink folds into columns 2j, 2j + 1):
    ``coda check`` used to accept it and ``coda build`` failed at trace (the TypeError above)."""
    path = tmp_path / "half_col.yaml"
    text = SPEC.read_text().replace(
        "{reduce_row: absmax, of: h, as: amax_part}", "{reduce_col: max, of: h, as: amax_part}"
    )
    path.write_text(text.replace("over: rows, as: amax", "as: amax").replace("abs(h))", "h, 0)"))
    res = coda_check(str(path))
    assert res.exit_code == 2, res.output
    assert (
        "half_col.yaml:30:31: error: steps[0].epilogue[5].of: cannot lower 'reduce_col': a "
        "per-column reduction of a half-width value is not lowered in an acc_pair kernel"
    ) in res.output


def test_an_fp8_d_of_an_acc_pair_kernel_is_refused(tmp_path):
    """The full-width tile (D) of a pair kernel stays 16-bit: refused at the store, where the
    build would otherwise go."""
    path = tmp_path / "fp8_pair_d.yaml"
    path.write_text(SPEC.read_text().replace("z: bf16, out", "z: fp8_e4m3, out"))
    res = coda_check(str(path))
    assert res.exit_code == 2
    assert (
        "fp8_pair_d.yaml:25:9: error: steps[0].epilogue[0]: cannot lower 'store': an fp8_e4m3 "
        "full-width tile (D) cannot be stored from an acc_pair kernel" in res.output
    )
    assert "store it in bf16 here" in res.output


def test_a_half_width_fp8_row_must_be_16_bytes(tmp_path):
    path = tmp_path / "fp8_pair_row.yaml"
    path.write_text(SPEC.read_text().replace("F: 512", "F: 520"))
    res = coda_check(str(path))
    assert res.exit_code == 2
    assert "stored tile 'out' is 520 wide; fp8_e4m3 rows must be a multiple of 16" in res.output


@pytest.mark.slow
@needs_build
def test_builds_for_sm90a(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = build_spec(SPEC.relative_to(ROOT), BuildOptions(out=tmp_path, explicit=True))
    assert (res.directory / "kernel.py").is_file()


# The QuACK 0.6.5 functions PairF8Store's narrow gated path runs through besides TileStore's
# methods (pinned in tests/test_pair_f32.py), as sha256 prefixes of their source: the f32-grain
# register permute, the smem store atom (universal 16-bit for 8-bit elements) and the halved epi
# tile. A QuACK upgrade that changes one fails here; re-check pair_f8.py, then re-pin.
QUACK_PINS = {
    ("quack.layout_utils", "permute_gated_Cregs_f32"): "fd99ef7b778325eb",
    ("quack.copy_utils", "get_smem_store_atom"): "dd1d99bbb7262210",
    ("quack.epilogue.ops", "_gated_epi_tile_fn"): "b53aceacfd48a4e3",
}


@pytest.mark.slow  # imports quack and cutlass
@needs_build
@pytest.mark.parametrize(("module", "name"), sorted(QUACK_PINS))
def test_quack_narrow_gated_path_is_unchanged(module, name):
    fn = getattr(importlib.import_module(module), name)
    fn = getattr(fn, "__wrapped__", fn)
    got = source_pin(fn)
    assert got == QUACK_PINS[(module, name)], f"QuACK changed {module}.{name}"
