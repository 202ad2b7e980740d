"""``coda bench`` without a GPU (CI): the timing method, the roofline arithmetic and the driver.

* Timing runs with a scripted :class:`FakeClock`: each candidate's samples are known, so the
  rounds, their rotation, the statistics and the handling of a failing candidate are checked
  exactly.
* Roofline: flops and minimum bytes of real manifests (``tests.test_verify_cpu.fake_manifest``
  at small dims), worked out by hand in the tests.
* The driver runs end to end on the CPU: a real ``coda_spec.runtime.Chain`` whose kernel steps
  all take the runtime's no-launch path (the epilogue in torch), the eager baselines, and the fake
  clock; the cases, candidates, kernels and SoL it reports are checked, and so is the agreement
  check that catches a baseline computing something else.
* The CLI: no GPU -> exit 4; results files re-render, compare and plot without one.

Report formatting (table, CSV, compare, PNG) has its own tests in tests/test_bench_report.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from coda_spec import artifact, cli, runtime
from coda_spec.bench import driver as D
from coda_spec.bench import model as Mo
from coda_spec.bench import roofline as R
from coda_spec.bench import timing as T
from coda_spec.check.frontend import check_file
from tests.conftest import ROOT
from tests.emulate import emulate
from tests.test_runtime_cpu import make_build
from tests.test_verify_cpu import fake_manifest


class FakeClock:
    """A clock whose samples are scripted per candidate: ``script[name]`` is a list of ms values
    (one per round). Candidates announce themselves through :meth:`calling`."""

    def __init__(self, script: dict | None = None):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.current = None
        self.calls: list[str] = []
        self.flushes = 0
        self.resolves = 0

    def calling(self, name):
        self.current = name
        self.calls.append(name)

    def flush(self):
        self.flushes += 1

    def start(self):
        return None

    def stop(self, mark):
        name = self.current
        return self.script[name].pop(0) if name in self.script else 1.0

    def resolve(self, marks):
        self.resolves += 1
        return list(marks)


def _cand(clock, name, fail=False):
    def fn():
        clock.calling(name)
        if fail:
            raise RuntimeError("boom: no such kernel\nsecond line")

    return fn


# -- timing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "xs, q, want",
    [
        ([1, 2, 3, 4, 5], 50, 3),
        ([1, 2, 3, 4, 5], 20, 1.8),
        ([1, 2, 3, 4, 5], 80, 4.2),
        ([7], 20, 7),
        ([1, 3], 50, 2),
    ],
    ids=["median", "p20", "p80", "single", "interpolated"],
)
def test_percentile_is_linear_between_order_statistics(xs, q, want):
    assert T.percentile(sorted(xs), q) == pytest.approx(want)


def test_rounds_rotate_so_no_candidate_always_goes_first():
    assert [T.order(["a", "b", "c"], r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_interleaved_stats_come_from_each_candidates_own_samples():
    clock = FakeClock({"a": [5, 1, 3, 2, 4], "b": [10, 30, 20, 50, 40]})
    stats, failed, first = T.time_interleaved(
        {"a": _cand(clock, "a"), "b": _cand(clock, "b")}, clock, rounds=5, warmup=2
    )
    assert failed == {}
    assert stats["a"] == Mo.Stats(3, 1.8, 4.2, 5)
    assert stats["b"] == Mo.Stats(30, 18, 42, 5)
    assert set(first) == {"a", "b"}
    timed = clock.calls[4:]  # after 2 warm-up calls each
    assert timed == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    assert clock.flushes == 10  # an L2 flush before every sample
    assert clock.resolves >= 5  # events resolved once per round (plus warm-up syncs)


def test_a_failing_candidate_is_reported_not_fatal():
    clock = FakeClock()
    stats, failed, _ = T.time_interleaved(
        {"ok": _cand(clock, "ok"), "bad": _cand(clock, "bad", fail=True)}, clock, rounds=3
    )
    assert set(stats) == {"ok"} and stats["ok"].n == 3
    assert failed == {"bad": "RuntimeError: boom: no such kernel"}
    assert clock.calls == ["ok", "ok", "bad", "ok", "ok", "ok"]  # bad: no rounds


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds"):
        T.time_interleaved({}, FakeClock(), rounds=0)


# -- roofline ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_manifests():
    out = {}
    for name, dims in (("rmsnorm_chain", {"D": 256, "F": 512}), ("b3_rope_bwd", {"D": 256})):
        from coda_spec.check.frontend import with_dims

        checked = with_dims(check_file(ROOT / "specs" / f"{name}.yaml"), dims)
        out[name] = artifact.Manifest.from_data(fake_manifest(checked))
    return out


def test_gemm_flops_and_minimum_bytes_of_a_two_gemm_chain(small_manifests):
    """rmsnorm_chain at M=64, D=256, F=512: reads y, w_o, x, gamma, w_up once (h and r are
    intermediates); writes x1, r, out once."""
    m = small_manifests["rmsnorm_chain"]
    sizes = {"M": 64, "D": 256, "F": 512}
    steps = R.section_steps(m, "fwd")
    flops = sum(R.gemm_flops(m, s, sizes) for s in steps if s.kind == "kernel")
    assert flops == 2 * 64 * 256 * 256 + 2 * 64 * 512 * 256
    reads = 64 * 256 * 2 + 256 * 256 * 2 + 64 * 256 * 2 + 256 * 2 + 512 * 256 * 2
    writes = 64 * 256 * 2 + 64 * 4 + 64 * 512 * 2
    assert R.min_bytes(m, steps, R.section_outputs(m, "fwd"), sizes) == reads + writes
    assert R.sol_kind(steps) == "gemm"
    # GEMM chains: SoL is the measured cuBLAS time (no host step to add)
    assert R.sol_ms(m, steps, R.section_outputs(m, "fwd"), sizes, 2.5, 4000.0) == 2.5


def test_memory_roofline_of_a_chain_without_gemm(small_manifests):
    """b3 at M=64, D=256: reads dy, y (M x 3D bf16), pos, freqs; writes dz and zdz."""
    m = small_manifests["b3_rope_bwd"]
    sizes = {"M": 64, "D": 256}
    steps = R.section_steps(m, "fwd")
    nbytes = 3 * (64 * 768 * 2) + 64 * 4 + 384 * 4 + 64 * 4
    assert R.min_bytes(m, steps, R.section_outputs(m, "fwd"), sizes) == nbytes
    assert R.sol_kind(steps) == "memory"
    assert R.sol_ms(m, steps, R.section_outputs(m, "fwd"), sizes, None, 2000.0) == pytest.approx(
        nbytes / 2e9  # 2000 GB/s = 2e9 bytes per ms
    )


def test_derived_figures():
    case = Mo.Case("c", {"M": 1}, "fwd", "gemm", flops=2e12, bytes=4e9, sol_ms=4.0)
    dev = Mo.Device("H", peak_tflops=800.0, copy_gbps=4000.0)
    got = Mo.derived(case, dev, Mo.Stats(5.0, 4.9, 5.1, 9))
    assert got["tflops"] == pytest.approx(400.0)
    assert got["gbps"] == pytest.approx(800.0)
    assert got["x_sol"] == pytest.approx(1.25)
    assert got["pct_peak_flops"] == pytest.approx(50.0)
    assert got["pct_peak_bw"] == pytest.approx(20.0)


# -- dims --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, width, want",
    [
        ("rmsnorm_chain", 2048, {"D": 2048, "F": 5632}),
        ("f7_qk_norm_rope", 8192, {"D": 8192, "KV": 2048}),
        ("f5_norm_lmhead_lse", 2048, {"D": 2048}),
        ("b3_rope_bwd", 4096, {"D": 4096}),
    ],
    ids=["F-rounded", "KV-heads", "V-unchanged", "D-only"],
)
def test_catalogue_width_rule(spec, width, want):
    assert D.width_dims(check_file(ROOT / "specs" / f"{spec}.yaml").spec, width) == want


def test_shapes_cross_widths_and_m():
    spec = check_file(ROOT / "specs" / "rmsnorm_chain.yaml").spec
    got = D.shapes(spec, D.Options(ms=(16384, 4096), widths=(2048,), dims={"V": 7}))
    assert got == [{"M": 16384, "D": 2048, "F": 5632}, {"M": 4096, "D": 2048, "F": 5632}]


def test_dims_a_build_cannot_take_name_the_rebuild():
    checked = check_file(ROOT / "specs" / "rmsnorm_chain.yaml")
    with pytest.raises(D.ToolError, match=r"cannot run at \{'D': 1001\}.*coda build"):
        D.at_dims(None, checked, {"M": 64, "D": 1001, "F": 11008})


# -- the driver, end to end on the CPU ---------------------------------------------------------


@pytest.fixture
def cpu_chain(monkeypatch):
    """Every kernel and host step runs in torch on the CPU (tests/emulate.py)."""
    monkeypatch.setattr(runtime.checks, "current_device", lambda: torch.device("cpu"))
    emulate(monkeypatch)


def _bench(tmp_path, name, **kw):
    d, checked = make_build(tmp_path, name)
    chain = runtime.load(d)
    sizes = {**{k: v for k, v in checked.spec.dim_sizes().items() if v}, "M": 32}
    opts = D.Options(
        ms=(32,), baselines=("eager",), rounds=3, warmup=1, device="cpu", ruler="isolated", **kw
    )
    return D.bench_shape(
        chain, chain.checked(), sizes, opts, FakeClock(), 1000.0, {}, lambda msg: None
    )


def test_driver_times_a_forward_chain(tmp_path, cpu_chain):
    (case,) = _bench(tmp_path, "rmsnorm_chain")
    assert case.direction == "fwd" and case.sol_kind == "gemm"
    assert [c.name for c in case.candidates] == ["coda", "eager"]
    assert all(c.stats is not None and c.stats.n == 3 for c in case.candidates)
    assert [k.name for k in case.kernels] == ["out_proj", "up_proj"]
    assert case.sol is not None and case.sol_ms == case.sol.median_ms
    assert case.flops == 2 * 32 * 512 * 512 + 2 * 32 * 512 * 512
    assert len(case.notes) == 1 and case.notes[0].startswith("coda = eager on 3 output(s)")


@pytest.mark.slow
def test_driver_gives_backward_rows(tmp_path, cpu_chain):
    cases = _bench(tmp_path, "llama_block")
    assert [c.direction for c in cases] == ["fwd", "bwd", "fwd+bwd"]
    fwd, bwd, both = cases
    assert len(fwd.kernels) == 4 and len(bwd.kernels) == 8 and both.kernels == ()
    assert both.flops == fwd.flops + bwd.flops
    assert bwd.sol_kind == "gemm+memory"  # the RoPE-backward host step at the roofline
    assert bwd.sol_ms > bwd.sol.median_ms
    for c in cases:
        assert c.candidate("eager").stats is not None, c.candidate("eager").note


def test_driver_flags_a_baseline_that_computes_something_else(tmp_path, cpu_chain, monkeypatch):
    from coda_spec.bench import baselines as B

    real = B.eager

    def wrong(checked, sizes):
        base = real(checked, sizes)
        return replace(base, fn=lambda t: {k: v * 1.5 for k, v in base.fn(t).items()})

    monkeypatch.setattr(B, "eager", wrong)
    (case,) = _bench(tmp_path, "rmsnorm_chain")
    assert any("MISMATCH" in n for n in case.notes), case.notes


def test_memory_chain_has_roofline_sol(tmp_path, cpu_chain):
    (case,) = _bench(tmp_path, "b3_rope_bwd", kernels=False)
    assert case.sol_kind == "memory" and case.sol is None and case.kernels == ()
    assert case.sol_ms == pytest.approx(case.bytes / 1e9)  # 1000 GB/s -> bytes / 1e9 ms


# -- the CLI -----------------------------------------------------------------------------------


def test_bench_without_gpu_exits_4(monkeypatch, tmp_path):
    from tests.test_cli import _fake_build

    spec = ROOT / "specs" / "f8_scale.yaml"
    _fake_build(tmp_path, spec)
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    res = CliRunner().invoke(cli.main, ["bench", str(spec), "--builds", str(tmp_path)])
    assert res.exit_code == 4, res.output
    assert "--plot results.json" in res.output


def _results(tmp_path):
    case = Mo.Case(
        "rmsnorm_chain",
        {"M": 16384, "D": 4096},
        "fwd",
        "gemm",
        1e12,
        1e9,
        2.0,
        candidates=(
            Mo.Timed("coda", Mo.Stats(2.2, 2.1, 2.3, 5)),
            Mo.Timed("eager", Mo.Stats(3.3, 3.2, 3.4, 5)),
        ),
        sol=Mo.Stats(2.0, 1.9, 2.1, 5),
    )
    run = Mo.BenchRun("2026-12-01 03:00 UTC", "coda bench x", Mo.Device("NVIDIA H200"), 5, (case,))
    path = tmp_path / "bench.json"
    path.write_text(Mo.dumps(run))
    return run, path


def test_results_rerender_and_compare_without_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    run, path = _results(tmp_path)
    old = tmp_path / "old.json"
    data = json.loads(path.read_text())
    data["cases"][0]["candidates"][0]["stats"]["median_ms"] = 4.4
    old.write_text(json.dumps(data))
    res = CliRunner().invoke(cli.main, ["bench", str(path), "--compare", str(old)])
    assert res.exit_code == 0, res.output
    assert "rmsnorm_chain" in res.output and "-50" in res.output  # 4.4 -> 2.2 ms


def test_plot_from_json(tmp_path):
    pytest.importorskip("matplotlib")
    _, path = _results(tmp_path)
    res = CliRunner().invoke(cli.main, ["bench", "--plot", str(path)])
    assert res.exit_code == 0, res.output
    png = tmp_path / "rmsnorm_chain.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--baselines", "eager,jax", "x"], "unknown ['jax']"),
        (["--m", "16k", "x"], "--m '16k'"),
        (["--dims", "D:2048", "x"], "NAME=INT"),
        ([], "give build directories"),
    ],
    ids=["baseline", "m", "dims", "nothing"],
)
def test_bad_arguments_exit_2(argv, msg):
    res = CliRunner().invoke(cli.main, ["bench", *argv])
    assert res.exit_code == 2 and msg in res.output, res.output


def test_unknown_target_is_a_bad_argument(monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = CliRunner().invoke(cli.main, ["bench", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such build directory" in res.output, res.output
    res = CliRunner().invoke(cli.main, ["bench", str(tmp_path)])
    assert res.exit_code == 2 and "not a build directory" in res.output, res.output


def test_several_results_merge_into_one_run(tmp_path, monkeypatch):
    """One device call per width: the results files read as one run, written to --out."""
    monkeypatch.setattr(cli, "_has_gpu", lambda: False)
    run, path = _results(tmp_path)
    other = tmp_path / "w8192.json"
    wide = replace(run.cases[0], dims={"M": 16384, "D": 8192})
    other.write_text(Mo.dumps(replace(run, cases=(wide,), command="coda bench y")))
    res = CliRunner().invoke(
        cli.main, ["bench", str(path), str(other), "--markdown", "--out", str(tmp_path / "m")]
    )
    assert res.exit_code == 0, res.output
    head, rule, row = [line for line in res.output.splitlines() if line.startswith("|")][:3]
    assert head == "| chain | dir | M=16384 D=4096 | M=16384 D=8192 |"
    assert row.startswith("| rmsnorm_chain | fwd | **1.10x SoL, 1.50x eager** |")  # 2.2 vs 2.0
    merged = Mo.loads((tmp_path / "m" / "bench.json").read_text())
    assert len(merged.cases) == 2 and merged.command == "coda bench x ; coda bench y"


def test_merge_refuses_runs_of_other_devices(tmp_path):
    run, _ = _results(tmp_path)
    with pytest.raises(ValueError, match="different devices"):
        Mo.merge([run, replace(run, device=Mo.Device("NVIDIA A100"))])


def test_best_baseline_must_produce_every_output():
    """A baseline that leaves outputs out is shown, never the one coda is judged against."""
    case = Mo.Case(
        "b2",
        {"M": 1},
        "fwd",
        "gemm",
        1.0,
        1.0,
        1.0,
        candidates=(
            Mo.Timed("coda", Mo.Stats(2.0, 2.0, 2.0, 3)),
            Mo.Timed("compile", Mo.Stats(2.5, 2.5, 2.5, 3)),
            Mo.Timed("liger", Mo.Stats(1.0, 1.0, 1.0, 3), "no h, no zdz", complete=False),
        ),
    )
    assert Mo.best_baseline(case).name == "compile"
    assert Mo.speedups(case) == {"compile": 1.25, "liger": 0.5}


@pytest.mark.slow
def test_bench_imports_no_compiler_and_no_optional_package():
    """bench runs where kernels deploy: no cutlass or quack; Liger and matplotlib only when
    used. And the runtime does not import bench."""
    import subprocess
    import sys

    code = (
        "import sys; import coda_spec.bench.command, coda_spec.bench.driver, "
        "coda_spec.bench.report, coda_spec.bench.baselines, coda_spec.runtime; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('quack', 'cutlass', 'liger_kernel', 'matplotlib', 'triton')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    code = "import sys, coda_spec.runtime; assert 'coda_spec.bench' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_agreement_sees_add_to_inputs_before_coda_accumulates_into_them(tmp_path, cpu_chain):
    """b1 writes dx into its dres input in place (add_to): the eager baseline must get the
    input as it was, or a correct chain would read as a MISMATCH."""
    (case,) = _bench(tmp_path, "b1_dgrad_rmsnorm_bwd")
    assert case.notes and case.notes[0].startswith("coda = eager on"), case.notes


@pytest.mark.slow
def test_backward_rows_are_checked_against_autograd(tmp_path, cpu_chain):
    """llama_block: the eager baseline's autograd agrees with coda's 8 backward outputs."""
    _, bwd, both = _bench(tmp_path, "llama_block")
    assert bwd.notes and bwd.notes[0].startswith("coda = eager autograd on 8 output(s)"), bwd.notes
    assert both.notes == ()


def test_dims_no_target_has_are_refused():
    class Loaded:
        def checked(self):
            return check_file(ROOT / "specs" / "rmsnorm_chain.yaml")

    with pytest.raises(ValueError, match=r"--dims V: no target has such a static dim"):
        D.plan([(None, Loaded())], D.Options(dims={"V": 1024}))
    jobs = D.plan([(None, Loaded())], D.Options(dims={"F": 5632}, ms=(4096,)))
    assert [sizes for _, _, sizes in jobs] == [{"M": 4096, "D": 4096, "F": 5632}]


def test_a_spec_without_a_build_says_run_coda_build(monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = CliRunner().invoke(
        cli.main, ["bench", str(ROOT / "specs" / "f8_scale.yaml"), "--builds", str(tmp_path)]
    )
    assert res.exit_code == 2, res.output
    assert "no build of 'f8_scale'" in res.output and "(bench never compiles)" in res.output


def test_cases_record_the_build_config(tmp_path, cpu_chain):
    (case,) = _bench(tmp_path, "rmsnorm_chain")
    assert case.config == "128x256,cluster=2x1,cooperative"
    (host,) = _bench(tmp_path, "b3_rope_bwd", kernels=False)
    assert host.config == ""  # no kernel, no tile config


def test_compare_across_configs_names_the_change(tmp_path):
    """Tuned vs untuned: the same chain, dims and direction match whatever the config."""
    from coda_spec.bench.report import render_compare

    run, _ = _results(tmp_path)
    tuned = replace(run, cases=(replace(run.cases[0], config="128x128,cluster=1x1,pingpong"),))
    text = render_compare(run, tuned)
    assert "config - -> 128x128,cluster=1x1,pingpong" in text
