"""``coda verify`` on CPU (CI): the protocol run with a FAKE kernel runner, proving it can fail.

No GPU and no compile: a manifest is made from the lowered spec with fabricated compile records,
and ``FakeChain`` stands in for ``coda_spec.runtime.Chain``. Its ``run`` emulates the kernels with
the reference interpreter in ``lowp`` precision (what a correct kernel computes, within the
error budget), writes every partial buffer the manifest declares, then injects one fault. A clean
run must pass; an injected error, a NaN slot, an unwritten partial and a wrong ``add_to``
accumulate must each fail the report and make ``coda verify`` exit 3 (driven through the CLI's
``_load_chain`` / ``_has_gpu`` seam). Also: no GPU -> exit 4 (0 with ``--allow-no-gpu``), a
spec without a build -> exit 1, and the JUnit report.

Static dims are shrunk (M=64, D=256, F=512) so each case runs in well under a second; that also
exercises verify's re-sized manifest (``with_manifest``).
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import pytest
import torch
from click.testing import CliRunner

from coda_spec import artifact, cli
from coda_spec.artifact.manifest import make_manifest
from coda_spec.build import aot_kernels, lowered_json
from coda_spec.check.frontend import check_file, with_dims
from coda_spec.config import BuildConfig
from coda_spec.dtypes import TORCH_DTYPES
from coda_spec.errors import EXIT_MISMATCH, EXIT_NO_GPU
from coda_spec.lower.module import lower_spec
from coda_spec.prove.reference import infer_sizes
from coda_spec.prove.reference import run as ref_run
from coda_spec.verify import report as R
from coda_spec.verify import run as V
from tests.conftest import ROOT

RMSNORM = ROOT / "specs" / "rmsnorm_chain.yaml"
B1 = ROOT / "specs" / "b1_dgrad_rmsnorm_bwd.yaml"
F8 = ROOT / "specs" / "f8_scale.yaml"  # no partials, cheap at its full D: the --small path
SMALL = {
    RMSNORM: {"M": 64, "D": 256, "F": 512},
    B1: {"M": 64, "D": 256, "F": 256},
}
FAULTS = ("none", "error", "nan", "unwritten_partial", "accumulate")


def fake_launch(kernel) -> dict:
    """The ``launch`` entry ``triton_aot.compile_kernel`` would return for a host step's or a
    finalize's Triton kernel, without compiling it (no cubin is ever loaded on the CPU)."""
    return {
        "source": f"kernels/{kernel.step}.py",
        "cubin": f"kernels/{kernel.step}.cubin",
        "name": kernel.entry,
        "num_warps": kernel.num_warps,
        "shared": 0,
        "grid": list(kernel.grid),
        "args": [dict(a) for a in kernel.args],
        "types": [t for _, t in kernel.signature],
        "outputs": [dict(o) for o in kernel.outputs],
        "hidden": 0,
        "folds": list(kernel.folds),
        "pointer_align": 16,
    }


def fake_manifest(checked) -> dict:
    """The manifest ``coda build`` would write, without compiling: fabricated compile records
    and launch entries (the Triton kernels of host steps and finalizes are generated, as text)."""
    cfg = BuildConfig()
    lowered = lower_spec(checked, cfg)
    meta = lowered_json(checked, lowered, cfg)
    launches = {k.step: fake_launch(k) for k in aot_kernels(checked, meta)}
    accumulate = {a["function"]: a["symbol"] for a in meta["accumulate"].values()}
    records = [
        {
            "symbol": symbol,
            "fields": [f.name for f in k.fields] + ["split_k_semaphore", "split_k_workspace"],
            "majors": {"A": "row", "B": "col"},
            "max_swizzle_size": 8,
            "compile_s": 0,
            "object_bytes": 0,
        }
        for k in lowered.kernels
        for symbol in (k.symbol, accumulate.get(k.symbol))
        if symbol is not None
    ]
    return make_manifest(checked, meta, records, None, launches)


class FakeChain:
    """The chain protocol ``coda_spec.verify`` uses (name, directory, manifest, checked(),
    with_manifest(), run()), computing with the reference interpreter plus one injected fault."""

    def __init__(self, checked, directory, fault="none", manifest=None):
        assert fault in FAULTS, fault
        self._checked = checked
        self.directory = directory
        self.fault = fault
        if manifest is None:
            manifest = fake_manifest(checked)
        if isinstance(manifest, dict):  # as written (a test may edit it first)
            manifest = artifact.Manifest.from_data(manifest)
        self.manifest = manifest
        self.name = self.manifest.name
        self.log = []  # (manifest dims, poison) per run, shared with re-sized copies

    def checked(self):
        return self._checked

    def with_manifest(self, manifest, checked=None) -> FakeChain:
        other = FakeChain(checked or self._checked, self.directory, self.fault, manifest)
        other.log = self.log
        return other

    def run(self, inputs: dict, poison: bool = False) -> dict:
        m = self.manifest
        self.log.append((dict(m.dims), poison))
        static = m.static
        declared = self._checked.spec.dim_sizes()
        changed = {k: v for k, v in static.items() if declared.get(k) != v}
        case = with_dims(self._checked, changed) if changed else self._checked
        sizes = infer_sizes(case.analysis, inputs)
        kernels = [s for s in m.steps if s.kind == "kernel"]
        add_to = {s.d.tensor: s.add_to for s in kernels if s.add_to}
        feed = dict(inputs)
        if self.fault == "accumulate":  # the kernel forgets the tensor it accumulates into
            assert add_to, f"{self.name} has no add_to output"
            for into in add_to.values():
                feed[into] = torch.zeros_like(inputs[into])
        env = ref_run(case.analysis, feed, "lowp", sizes)
        out = dict(inputs)
        for o in m.outputs:
            want = TORCH_DTYPES[o.dtype]
            buf = torch.full_like(env[o.name], float("nan") if poison else 0.0, dtype=want)
            buf.copy_(env[o.name])
            out[o.name] = buf
        partials = []
        for s in kernels:
            for f in s.fields:
                if f.partial:
                    shape = artifact.eval_shape(f.shape, sizes)
                    out[f.tensor] = torch.rand(shape, dtype=TORCH_DTYPES[f.dtype]) + 0.5
                    partials.append(f.tensor)
        first = m.outputs[0].name
        if self.fault == "error":
            x = out[first].view(-1)
            x[0] = x[0] + 1e3 * (1 + float(x.abs().max()))
        elif self.fault == "nan":
            out[first].view(-1)[1] = float("nan")
        elif self.fault == "unwritten_partial":
            assert partials, f"{self.name} has no partial buffer"
            out[partials[0]].view(-1)[-1] = float("nan")
        return out


def _checked(path):
    return check_file(path.relative_to(ROOT))


pytestmark = pytest.mark.usefixtures("at_root")


@pytest.fixture(scope="module")
def checked_specs():
    return {p: _checked(p) for p in (RMSNORM, B1)}


def _dims(path) -> dict:
    return dict(SMALL[path])


def _failing(report):
    return [c for c in report.checks if not c.passed]


# -- the protocol, API level -----------------------------------------------------------------


@pytest.mark.parametrize("spec", [RMSNORM, B1], ids=lambda p: p.stem)
def test_clean_fake_run_passes(spec, checked_specs, tmp_path):
    """A kernel that computes what the low-precision pipeline computes passes every check, the
    partial buffers (at the re-sized tile shape) are all written and equivalent_to agrees."""
    fake = FakeChain(checked_specs[spec], tmp_path)
    report = V.verify_chain(fake, seed=7, dims=_dims(spec))
    assert report.passed, R.render_table(report)
    outputs = {c.output for c in report.checks}
    assert {o.name for o in fake.manifest.outputs} <= outputs
    assert any(o.endswith("(partials)") for o in outputs)
    assert all(c.dims["M"] == 64 and c.dims["D"] == 256 for c in report.checks)
    assert report.algebra and all(a[3] for a in report.algebra)


def test_partial_shape_follows_resized_dims(checked_specs, tmp_path):
    """The shrunk static dims reach the runner: partial buffers get their re-sized shapes."""
    report = V.verify_chain(FakeChain(checked_specs[B1], tmp_path), seed=1, dims=_dims(B1))
    (part,) = [c for c in report.checks if c.output == "dgamma_part (partials)"]
    assert part.shape == (1, 256)  # cdiv(64, 128) M-tiles x D


FAULT_CASES = [  # (spec, fault, the one check that must fail, its note)
    (RMSNORM, "error", "x1", ""),
    (RMSNORM, "nan", "x1", "1 element(s) unwritten or non-finite"),
    (RMSNORM, "unwritten_partial", "ss (partials)", "1 partial slot(s) unwritten"),
    (B1, "error", "dx", ""),
    (B1, "nan", "dx", "1 element(s) unwritten or non-finite"),
    (B1, "unwritten_partial", "dgamma_part (partials)", "1 partial slot(s) unwritten"),
    (B1, "accumulate", "dx", ""),
]


@pytest.mark.parametrize(
    "spec, fault, output, note", FAULT_CASES, ids=[f"{c[0].stem}-{c[1]}" for c in FAULT_CASES]
)
def test_fault_fails_the_right_check(spec, fault, output, note, checked_specs, tmp_path):
    """Each injected fault fails exactly the check that guards against it."""
    report = V.verify_chain(FakeChain(checked_specs[spec], tmp_path, fault), 3, dims=_dims(spec))
    assert not report.passed
    bad = _failing(report)
    assert [c.output for c in bad] == [output], R.render_table(report)
    (c,) = bad
    assert c.note == note
    if fault == "error":
        assert c.max_abs_err > c.bound and c.unwritten == 0
    if fault in ("nan", "unwritten_partial"):
        assert c.unwritten == 1
    if fault == "accumulate":  # off by dres: far outside the budget, everything written
        assert c.unwritten == 0 and c.max_abs_err > 10 * c.bound
    assert "=> FAIL" in R.render_table(report)


def test_resized_manifest_reaches_the_runner(checked_specs, tmp_path):
    """Shrunk static dims: verify runs the chain under a re-sized manifest (with_manifest) and
    leaves the build's own manifest alone; the one run is poisoned."""
    fake = FakeChain(checked_specs[RMSNORM], tmp_path)
    report = V.verify_chain(fake, seed=5, dims=_dims(RMSNORM))
    assert report.passed
    assert fake.log == [({"M": None, "D": 256, "F": 512}, True)]
    assert dict(fake.manifest.dims) == {"M": None, "D": 4096, "F": 11008}


@pytest.mark.slow
def test_small_case_runs_the_build_manifest(tmp_path):
    """``--small`` (only M given, static dims as built): the chain runs under its own manifest,
    the static dims are filled in from the spec, and a fault still fails the right output."""
    checked = _checked(F8)
    fake = FakeChain(checked, tmp_path, "error")
    report = V.verify_chain(fake, seed=9, only_small=True)
    assert fake.log == [({"M": None, "D": 4096}, True)]
    assert {c.case for c in report.checks} == {"small"}
    assert all(c.dims == {"M": 64, "D": 4096} for c in report.checks)
    assert [c.output for c in _failing(report)] == ["y_imm"]


# -- the CLI: report -> exit status ----------------------------------------------------------


def _build_dir(tmp_path, spec, checked) -> str:
    """A build directory as ``coda build`` leaves it, minus the library (never loaded here)."""
    d = tmp_path / f"{checked.spec.name}-000000000000"
    d.mkdir()
    shutil.copy(spec, d / "spec.yaml")
    artifact.write_manifest(d, fake_manifest(checked))
    return str(d)


def _verify(args):
    return CliRunner().invoke(cli.main, ["verify", *args], catch_exceptions=False)


@pytest.mark.parametrize(
    "spec, fault, status",
    [
        (RMSNORM, "none", 0),
        (RMSNORM, "error", EXIT_MISMATCH),
        (RMSNORM, "nan", EXIT_MISMATCH),
        (RMSNORM, "unwritten_partial", EXIT_MISMATCH),
        (B1, "none", 0),
        (B1, "accumulate", EXIT_MISMATCH),
    ],
    ids=lambda x: getattr(x, "stem", str(x)),
)
def test_cli_exit_status(spec, fault, status, checked_specs, tmp_path, monkeypatch):
    """``coda verify BUILD_DIR`` with the fake runner behind the CLI's seam: exit 3 on any
    failing check, 0 when all pass; the JSON report says the same."""
    checked = checked_specs[spec]
    directory = _build_dir(tmp_path, spec, checked)
    loaded = []

    def load(d):
        loaded.append(str(d))
        return FakeChain(checked, d, fault)

    monkeypatch.setattr(cli, "_load_chain", load)
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    dims = ",".join(f"{k}={v}" for k, v in _dims(spec).items())
    junit_path = tmp_path / "verify.xml"
    res = _verify([directory, "--seed", "11", "--dims", dims, "--junit", str(junit_path)])
    assert res.exit_code == status, res.output
    assert loaded == [directory]
    assert ("=> PASS" if status == 0 else "=> FAIL") in res.output
    suite = ET.parse(junit_path).getroot()
    assert int(suite.get("failures")) == (0 if status == 0 else 1)


def test_cli_json_format_and_seed(checked_specs, tmp_path, monkeypatch):
    import json

    checked = checked_specs[RMSNORM]
    directory = _build_dir(tmp_path, RMSNORM, checked)
    monkeypatch.setattr(cli, "_load_chain", lambda d: FakeChain(checked, d, "error"))
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = _verify([directory, "--seed", "5", "--dims", "M=64,D=256,F=512", "--format", "json"])
    assert res.exit_code == EXIT_MISMATCH
    (rep,) = json.loads(res.stdout)
    assert rep["seed"] == 5 and rep["chain"] == "rmsnorm_chain"
    assert [c["output"] for c in rep["checks"] if not c["passed"]] == ["x1"]


@pytest.mark.parametrize("allow", [False, True], ids=["exit4", "allow-no-gpu"])
def test_cli_without_gpu(allow, checked_specs, tmp_path, monkeypatch):
    """No GPU: the real loader reads the manifest (no library), only the reference-side checks
    run, and the exit is 4 unless --allow-no-gpu; either way it says kernels were not run."""
    directory = _build_dir(tmp_path, RMSNORM, checked_specs[RMSNORM])
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _verify([directory, "--seed", "2", *(["--allow-no-gpu"] if allow else [])])
    assert res.exit_code == (0 if allow else EXIT_NO_GPU), res.output
    assert "kernel numerics were not run" in res.stderr
    assert "kernel numerics were NOT run" in res.stdout
    assert "=> REFERENCE ONLY" in res.stdout
    assert ("exit 4" in res.stderr) is not allow


@pytest.mark.parametrize("flag", [False, True], ids=["default", "sanitize"])
def test_cli_runs_the_sanitizer_only_when_asked(flag, checked_specs, tmp_path, monkeypatch):
    """compute-sanitizer (a child process, minutes on a GPU) runs with --sanitize and only
    then; its verdict lands in the report."""
    import coda_spec.verify.sanitize

    directory = _build_dir(tmp_path, RMSNORM, checked_specs[RMSNORM])
    runs = []

    def fake(d, seed):
        runs.append((str(d), seed))
        return {"result": "clean", "errors": 0, "detail": ""}

    monkeypatch.setattr(coda_spec.verify.sanitize, "sanitize", fake)
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = _verify([directory, "--seed", "2", "--allow-no-gpu", *(["--sanitize"] * flag)])
    assert res.exit_code == 0, res.output
    assert runs == ([(str(directory), 2)] if flag else [])
    assert ("sanitizer (memcheck, small case): clean" in res.stdout) is flag


def test_cli_spec_without_build(tmp_path):
    """A spec with no build under --builds is a bad target (exit 2): verify never compiles."""
    res = _verify(["specs/f8_scale.yaml", "--builds", str(tmp_path / "nothing")])
    assert res.exit_code == 2
    assert "run coda build first" in res.stderr


def test_cli_not_a_build(tmp_path):
    res = _verify([str(tmp_path)])
    assert res.exit_code == 2
    assert "not a build directory" in res.stderr


# -- JUnit -----------------------------------------------------------------------------------


def test_junit_is_wellformed_with_failures(checked_specs, tmp_path):
    bad = V.verify_chain(FakeChain(checked_specs[RMSNORM], tmp_path, "nan"), 4, _dims(RMSNORM))
    good = V.verify_chain(FakeChain(checked_specs[RMSNORM], tmp_path), 4, _dims(RMSNORM))
    no_gpu = R.Report("f8_scale", "", 4, "cpu", skipped='no CUDA GPU: <kernels> & "not" run')
    suite = ET.fromstring(R.junit([bad, good, no_gpu]))
    assert suite.tag == "testsuite"
    cases = suite.findall("testcase")
    rows = len(bad.checks) + len(good.checks) + len(bad.algebra) + len(good.algebra) + 1
    assert int(suite.get("tests")) == len(cases) == rows
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("failures")) == len(failed) == 1
    assert failed[0].get("name") == "rmsnorm_chain.dims.x1"
    assert "unwritten or non-finite" in failed[0].find("failure").get("message")
    (skip,) = [c for c in cases if c.find("skipped") is not None]
    assert skip.find("skipped").get("message") == 'no CUDA GPU: <kernels> & "not" run'


def test_junit_lists_failed_algebra(checked_specs, tmp_path):
    """An equivalent_to mismatch is a failed JUnit test case, not a silent pass."""
    rep = V.verify_chain(FakeChain(checked_specs[RMSNORM], tmp_path), 4, _dims(RMSNORM))
    case, out, _, _ = rep.algebra[-1]
    wrong = R.with_replaced(rep, algebra=rep.algebra[:-1] + ((case, out, 0.5, False),))
    suite = ET.fromstring(R.junit([wrong]))
    failed = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == [f"rmsnorm_chain.equivalent_to.{case}.{out}"]
    assert "MISMATCH" in failed[0].find("failure").get("message")
    assert not wrong.passed


@pytest.mark.parametrize("allow", [False, True], ids=["exit3", "allow-no-gpu-still-3"])
def test_cli_without_gpu_wrong_math_fails(allow, checked_specs, tmp_path, monkeypatch):
    """No GPU and the CPU algebra proof fails: exit 3 with or without --allow-no-gpu, and the
    JUnit report carries the failure."""
    directory = _build_dir(tmp_path, RMSNORM, checked_specs[RMSNORM])
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    junit_path = tmp_path / "v.xml"
    res = _verify(
        [
            directory,
            "--seed",
            "2",
            "--junit",
            str(junit_path),
            "--reference-spec",
            str(ROOT / "tests" / "math_specs" / "wrong_equivalent_swapped.yaml"),
            *(["--allow-no-gpu"] if allow else []),
        ]
    )
    assert res.exit_code == EXIT_MISMATCH, res.output
    assert "=> FAIL" in res.stdout
    assert int(ET.parse(junit_path).getroot().get("failures")) >= 1


def test_junit_lists_an_unclean_sanitizer_run(checked_specs, tmp_path):
    rep = V.verify_chain(FakeChain(checked_specs[RMSNORM], tmp_path), 4, _dims(RMSNORM))
    san = {"result": "unclean", "errors": 2, "detail": "Invalid __global__ write"}
    suite = ET.fromstring(R.junit([R.with_replaced(rep, extra={"sanitizer": san})]))
    failed = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["rmsnorm_chain.sanitizer"]


@pytest.mark.parametrize(
    "rel, ok, shown",
    [
        (3e-16, True, "rel_err 3.0e-16 ok"),
        (0.5, False, "rel_err 5.0e-01 MISMATCH"),
        (float("inf"), False, "UNPROVEN (equivalent_to does not give it"),
    ],
    ids=["proven", "mismatch", "unproven"],
)
def test_equivalent_to_rows_say_unproven_not_inf(rel, ok, shown):
    """A spec without equivalent_to (or one that does not assign an output) reads as unproven
    in the table and in JUnit, not as an infinite error."""
    rep = R.Report("c", "", 1, "cpu", algebra=(("math", "y", rel, ok),))
    assert f"equivalent_to [math] y: {shown}" in R.render_table(rep)
    assert ("rel_err inf" in R.render_table(rep)) is False
    suite = ET.fromstring(R.junit([rep]))
    failure = suite.find("testcase/failure")
    assert (failure is None) is ok
    if failure is not None:
        assert shown in failure.get("message")


# -- memory: a case that does not fit runs smaller, a --dims case that does not is refused ----


def _oom_above(monkeypatch, m_max: int) -> list:
    """Every case above ``M = m_max`` runs out of GPU memory when its inputs are drawn (as the
    fp64 references of llama3_last did at M = 16384 on a 141 GB H200); the tried Ms are kept."""
    tried = []
    real = V.make_inputs

    def make_inputs(spec, sizes, seed):
        tried.append(sizes["M"])
        if sizes["M"] > m_max:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 15.66 GiB")
        return real(spec, sizes, seed)

    monkeypatch.setattr(V, "make_inputs", make_inputs)
    return tried


def test_case_that_does_not_fit_runs_at_half_m(checked_specs, tmp_path, monkeypatch):
    """The real case (M = 16384) runs out of memory until M = 64: it runs there, the report
    shows the M it ran at and a note says why; the ragged case (M = 1000) halves the same way."""
    tried = _oom_above(monkeypatch, 64)
    monkeypatch.setattr(V, "cases", lambda *a, **k: [("real", {**SMALL[RMSNORM], "M": 16384})])
    report = V.verify_chain(FakeChain(checked_specs[RMSNORM], tmp_path), seed=4)
    assert report.passed, R.render_table(report)
    assert tried == [16384, 8192, 4096, 2048, 1024, 512, 256, 128, 64]
    assert {c.dims["M"] for c in report.checks} == {64}
    notes = report.extra["notes"]
    assert notes[0] == (
        "real case: the fp64 references at M=16384 did not fit in GPU memory (no GPU free); "
        "it ran at M=8192"
    )
    assert "it ran at M=64" in notes[-1]


def test_dims_case_that_does_not_fit_names_the_flags(checked_specs, tmp_path, monkeypatch):
    """``--dims`` is what the user asked for: never shrunk; out of memory is exit 1 with a
    message naming --dims and --small, and no traceback."""
    _oom_above(monkeypatch, 64)
    checked = checked_specs[RMSNORM]
    directory = _build_dir(tmp_path, RMSNORM, checked)
    monkeypatch.setattr(cli, "_load_chain", lambda d: FakeChain(checked, d))
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = _verify([directory, "--seed", "5", "--dims", "M=4096,D=256,F=512"])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert "dims case (M=4096, D=256, F=512): the kernels and the fp64 references do not fit" in (
        res.stderr
    )
    assert "--dims M=1024, or --small" in res.stderr
