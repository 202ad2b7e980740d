"""verify's ragged case and ``derive``d inputs, on CPU (fake kernel runner, no GPU).

The failure this guards against: ``coda verify`` aborted a whole chain (exit 1) with "input 'wn'
dim 0 is 768 but QKV is 640 elsewhere". The ragged case nudged the static dim QKV off the tile
grid (768 -> 640); make_inputs recomputes derived inputs from the case's other inputs, but wn's
``derive`` (``cat([q_norm] * 4 + [k_norm] * 2)``: a literal head count) does not follow QKV, so wn
stayed [768] and the runtime rightly refused the call. Now the ragged case leaves such a dim on
the grid (noting why), and a case that still cannot be made consistent (``--dims QKV=640``) is
skipped with a note in the report instead of aborting the chain.

The fake runner validates its inputs with the real ``coda_spec.runtime`` (device check patched to
the CPU), so it refuses inconsistent inputs exactly as a GPU run would.
"""

from __future__ import annotations

import pytest
import torch

from coda_spec import runtime
from coda_spec.check.frontend import check_file, with_dims
from coda_spec.prove.inputs import derive_mismatches, derived_shapes, make_inputs
from coda_spec.runtime import CodaRuntimeError
from coda_spec.verify import run as V
from coda_spec.verify.report import render_table
from tests.conftest import ROOT
from tests.test_verify_cpu import FakeChain

SPEC = ROOT / "tests" / "specs_extra" / "ragged_fixed_derive.yaml"
B1 = ROOT / "specs" / "b1_dgrad_rmsnorm_bwd.yaml"


class ValidatingChain(FakeChain):
    """FakeChain whose run first binds the inputs through the real runtime's validation."""

    def with_manifest(self, manifest, checked=None):
        other = ValidatingChain(checked or self._checked, self.directory, self.fault, manifest)
        other.log = self.log
        return other

    def run(self, inputs: dict, poison: bool = False) -> dict:
        runtime.Chain(self.directory, self.manifest).bind(inputs)
        return super().run(inputs, poison)


@pytest.fixture(autouse=True)
def _cpu_device(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(runtime.checks, "current_device", lambda: torch.device("cpu"))
    # The CPU algebra proof (``coda check --math``) is a stage of its own, at its own shrunk
    # dims, where this spec's literal head count cannot follow either; not under test here.
    monkeypatch.setattr(V, "math_proof", lambda *a, **k: (), raising=False)


@pytest.fixture(scope="module")
def checked():
    return check_file(SPEC.relative_to(ROOT))


def test_the_old_ragged_case_is_refused_by_the_runtime(checked, tmp_path):
    """The failure, reproduced: the old ragged dims (QKV 768 -> 640) with inputs from
    make_inputs give a derived wn of the old width, which the runtime refuses."""
    sizes = {"M": 1000, "D": 128, "QKV": 640, "head_dim": 128}
    case = with_dims(checked, {"QKV": 640})
    low, _ = make_inputs(case.spec, sizes, seed=1)
    assert tuple(low["wn"].shape) == (768,) and tuple(low["w_qk"].shape) == (640, 128)
    fake = ValidatingChain(checked, tmp_path)
    resized = fake.with_manifest(V.resized_manifest(fake, case))
    # (the message, "dim 0 is 768 but QKV is 640 elsewhere", came from the runtime
    # binding a static dim by name; it now folds declared shapes to ints first)
    with pytest.raises(CodaRuntimeError, match="input 'wn' dim 0 is 768; expected 640"):
        resized.run(low)


def test_derived_shapes_on_meta(checked):
    sizes = {"M": 1000, "D": 128, "QKV": 640, "head_dim": 128}
    assert derived_shapes(checked.spec, sizes) == {"wn": (768,)}
    (msg,) = derive_mismatches(checked.spec, sizes)
    assert "input 'wn' is derived with shape [768]" in msg and "[640] here (QKV=640)" in msg
    assert derive_mismatches(checked.spec, {**sizes, "QKV": 768}) == []


def test_ragged_case_keeps_the_pinned_dim_on_the_grid(checked):
    notes: list = []
    cases = dict(V.cases(checked, None, notes=notes))
    assert cases["ragged"] == {"M": 1000}  # QKV is not nudged; M is still ragged
    (note,) = notes
    assert note.startswith("ragged case: QKV stays 768 (not nudged to 640): input 'wn'")


def test_ragged_dims_unchanged_where_derives_follow_the_dims():
    """b1's derived r and zdz follow M and D: its dims are nudged as before, with no note."""
    notes: list = []
    assert V.ragged_dims(check_file(B1.relative_to(ROOT)), notes=notes) == {
        "D": 4072,
        "F": 10984,
    }
    assert notes == []


@pytest.mark.slow
def test_verify_chain_runs_every_case_with_a_note(checked, tmp_path):
    """The whole chain verifies (real, ragged at M = 1000, small) and the report says why the
    ragged case kept QKV; nothing aborts."""
    fake = ValidatingChain(checked, tmp_path)
    report = V.verify_chain(fake, seed=3)
    assert report.passed, render_table(report)
    assert {c.case for c in report.checks} == {"real", "ragged", "small"}
    ragged = [c for c in report.checks if c.case == "ragged"]
    assert ragged and all(c.dims["M"] == 1000 and c.dims["QKV"] == 768 for c in ragged)
    (note,) = report.extra["notes"]
    assert "QKV stays 768" in note
    assert f"note: {note}" in render_table(report)


def test_a_case_that_cannot_be_made_consistent_is_skipped(checked, tmp_path):
    """``--dims QKV=640`` asks for exactly the inconsistent case: it is skipped with a note in
    the report (no exception, the runner never called), never an aborted chain."""
    fake = ValidatingChain(checked, tmp_path)
    report = V.verify_chain(fake, seed=3, dims={"QKV": 640})
    assert report.checks == ()
    assert fake.log == []
    (note,) = report.extra["notes"]
    assert note.startswith("dims case (M=16384, QKV=640) skipped: input 'wn' is derived")
    assert "note: dims case" in render_table(report)


def test_verify_case_skips_on_actual_shapes_too(checked, tmp_path, monkeypatch):
    """When the meta evaluation cannot size a derive (None), the shapes make_inputs actually
    produced are checked before the run."""
    import coda_spec.prove.inputs as I

    monkeypatch.setattr(I, "derived_shapes", lambda spec, sizes: {"wn": None})
    fake = ValidatingChain(checked, tmp_path)
    sizes = {"M": 64, "QKV": 640}
    with pytest.raises(V.CaseSkipped, match="input 'wn' is derived with shape \\[768\\]"):
        V.verify_case(fake, checked, "dims", sizes, seed=1)
    assert fake.log == []
