"""The sustained ruler (``coda_spec.bench.timing.time_sustained``) and the ``--isolated`` flag,
without a GPU.

* :class:`DeviceClock` simulates a device: every call of a candidate advances device time by the
  candidate's cost, and CUDA events read that time. So the tests know exactly how long a stream
  lasts and how many calls it holds: the stream length (>= ``sustain_s``), the division by the
  calls, the re-sizing from the previous stream's rate and the round-robin order are checked
  exactly.
* :class:`ScriptedSampler` returns the telemetry samples scripted for the candidate whose stream
  just ran, so the clock / power / energy statistics (lead-in samples dropped, median clock,
  mean power, J/call) are checked against hand-worked values.
* The flag: ``coda bench`` / ``coda tune`` parse to the sustained ruler by default and to the
  isolated one with ``--isolated``, each with its default rounds.
* The report's sustained columns (table, CSV, JSON, compare) on a hand-built run.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from coda_spec import cli, runtime
from coda_spec import tune as TU
from coda_spec.artifact import tune_table as TT
from coda_spec.bench import driver as D
from coda_spec.bench import model as Mo
from coda_spec.bench import report as Rp
from coda_spec.bench import timing as T
from tests.emulate import emulate
from tests.test_bench_cpu import FakeClock, _cand
from tests.test_bench_report import make_run
from tests.test_runtime_cpu import make_build
from tests.test_tune_cpu import GPU, V0, V1, V2, cpu, variant_build  # noqa: F401 - cpu: fixture


class DeviceClock:
    """A simulated device. ``cost[name]``: ms per call, or ``f(i)`` of the candidate's call
    index ``i`` (from 0); every call advances ``now``. Events read ``now``; ``batches`` records
    every timed batch as (candidate, calls, ms)."""

    def __init__(self, cost: dict):
        self.cost = cost
        self.now = 0.0
        self.current = None
        self.count: dict = {}
        self.batches: list = []
        self.flushes = 0

    def calling(self, name):
        i = self.count.get(name, 0)
        self.count[name] = i + 1
        c = self.cost.get(name, 1.0)
        self.now += c(i) if callable(c) else c
        self.current = name

    def flush(self):
        self.flushes += 1

    def start(self):
        return (self.now, sum(self.count.values()))

    def stop(self, mark):
        return (mark, self.now, sum(self.count.values()))

    def resolve(self, marks):
        out = []
        for (t0, n0), t1, n1 in marks:
            self.batches.append((self.current, n1 - n0, t1 - t0))
            out.append(t1 - t0)
        return out


class ScriptedSampler:
    """``script[name]``: the samples (t, MHz, W) one stream of ``name`` returns."""

    source = "scripted"

    def __init__(self, clock: DeviceClock, script: dict):
        self.clock, self.script = clock, script

    def start(self):
        pass

    def stop(self):
        return list(self.script.get(self.clock.current, []))

    def close(self):
        pass


def _timed(clock, sustain_s=0.5) -> list:
    """The streams' batches: those of more calls than calibration's last or with a lead-in
    (each candidate's calibration batches double from 1; a stream is after them)."""
    return [b for b in clock.batches if b[2] >= sustain_s * 1000]


def _run(costs: dict, rounds=3, sustain_s=0.5, script=None, fail=()):
    clock = DeviceClock(costs)
    cands = {n: _cand(clock, n, fail=n in fail) for n in costs}
    sampler = ScriptedSampler(clock, script or {})
    got = T.time_sustained(cands, clock, sampler, rounds, warmup=1, sustain_s=sustain_s)
    return clock, got


# -- streams -------------------------------------------------------------------------------------


def test_a_stream_fills_sustain_s_and_its_time_is_divided_by_its_calls():
    clock, (stats, failed, _) = _run({"a": 0.3, "b": 1.7})
    assert failed == {}
    streams = _timed(clock)
    a = ("a", math.ceil(500 / 0.3))  # 1667 calls of 0.3 ms: 500.1 ms
    b = ("b", math.ceil(500 / 1.7))  # 295 calls of 1.7 ms: 501.5 ms
    assert [(name, n) for name, n, _ in streams] == [a, b, b, a, a, b]
    assert all(ms >= 500 for _, _, ms in streams)
    assert stats["a"].median_ms == pytest.approx(0.3) and stats["b"].median_ms == pytest.approx(1.7)
    assert stats["a"].n == 3 and stats["a"].calls == 3 * 1667
    assert clock.flushes == 0  # a step does not flush its L2; neither does the stream
    # the lead-in: 0.1 s of untimed calls before every timed stream (1 warm-up, the calibration
    # batches 1..128 = 255 calls of 0.3 ms (128 calls: 38.4 ms >= 20), then per round 334 + 1667)
    assert clock.count["a"] == 1 + 255 + 3 * (334 + 1667)


def test_each_stream_is_sized_from_the_rate_the_last_one_ran_at():
    """At the cap the clock drops: a candidate calibrated at 0.25 ms per call (boost) runs at
    0.5 ms after 400 calls. The first stream, sized at 0.25, lasts 1 s; its sample is still the
    per-call time it ran at (0.5); the next streams are sized at 0.5 ms: 1000 calls."""
    clock, (stats, _, _) = _run({"a": lambda i: 0.25 if i < 400 else 0.5})
    streams = _timed(clock)
    assert [n for _, n, _ in streams] == [2000, 1000, 1000]
    assert [ms for _, _, ms in streams] == pytest.approx([1000.0, 500.0, 500.0])
    assert stats["a"].median_ms == pytest.approx(0.5)


def test_rounds_interleave_round_robin():
    clock, _ = _run({"a": 1.0, "b": 2.0, "c": 4.0})
    order = [name for name, _, _ in _timed(clock)]
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_a_failing_candidate_is_reported_and_the_rest_are_timed():
    _, (stats, failed, _) = _run({"ok": 1.0, "bad": 1.0}, rounds=1, fail=("bad",))
    assert set(stats) == {"ok"} and failed == {"bad": "RuntimeError: boom: no such kernel"}


@pytest.mark.parametrize("sustain_s", [0, -1.0])
def test_sustain_s_must_be_positive(sustain_s):
    with pytest.raises(ValueError, match="sustain_s"):
        _run({"a": 1.0}, sustain_s=sustain_s)
    with pytest.raises(ValueError, match="--sustain-s"):
        D.Options(sustain_s=sustain_s)


def test_stream_calls_are_bounded():
    assert T.stream_calls(0.3, 0.5) == 1667
    assert T.stream_calls(900.0, 0.5) == 1  # a call longer than the stream: one call
    assert T.stream_calls(0.0, 0.5) == T.MAX_CALLS  # no measurable time: the cap
    assert T.stream_calls(1e-6, 0.5) == T.MAX_CALLS


# -- telemetry -----------------------------------------------------------------------------------


def test_clock_power_and_energy_statistics():
    """Per stream: one lead-in sample (t < 0.1 s, the previous load's clock: dropped) and three
    of its own. Over 3 rounds: median clock of 9 samples, mean power, J = W x ms per call."""
    script = {
        "a": [
            (0.05, 1980.0, 300.0),
            (0.2, 1500.0, 690.0),
            (0.3, 1520.0, 700.0),
            (0.5, 1510.0, 680.0),
        ],
        "b": [(0.05, 1200.0, 100.0), (0.2, 1700.0, None), (0.3, 1750.0, None)],
    }
    _, (stats, _, _) = _run({"a": 2.0, "b": 1.0}, script=script)
    a, b = stats["a"], stats["b"]
    assert a.clock_mhz == 1510.0 and a.watts == pytest.approx(690.0)
    assert Mo.joules(a) == pytest.approx(690.0 * 2.0 / 1000)  # 1.38 J per call
    assert b.clock_mhz == 1725.0  # median of 1700, 1750 (x3)
    assert b.watts is None  # only the lead-in (the previous load) reported power: not used
    assert T.telemetry([(0.05, 1980.0, None), (0.2, 1500.0, None)]) == (1500.0, None)
    assert T.telemetry([]) == (None, None)
    assert Mo.joules(Mo.Stats(2.0, 2.0, 2.0, 1, 1500.0, None)) is None  # no power: no energy


def test_no_telemetry_source_leaves_clock_and_power_unknown():
    clock = DeviceClock({"a": 1.0})
    stats, _, _ = T.time_with("sustained", {"a": _cand(clock, "a")}, clock, None, rounds=1)
    assert (stats["a"].clock_mhz, stats["a"].watts, stats["a"].calls) == (None, None, 500)


@pytest.mark.parametrize(
    "line, want",
    [
        ("1485, 689.12", (1485.0, 689.12)),
        ("1410, [N/A]", (1410.0, None)),
        ("[Not Supported], [Not Supported]", None),
        ("clocks.current.sm [MHz], power.draw [W]", None),
        ("garbage", None),
    ],
)
def test_nvidia_smi_lines(line, want):
    assert T.parse_smi_line(line) == want


def test_samplers_record_only_between_start_and_stop():
    """The two threaded samplers on fake sources: a polled reader, and a line-printing
    subprocess standing in for nvidia-smi."""
    polled = T.PollingSampler(lambda: (1500.0, 690.0), "fake", period_s=0.005)
    script = "import time\nwhile True:\n print('1410, 687.5', flush=True); time.sleep(0.005)"
    smi = T.SmiSampler([sys.executable, "-c", script], "fake smi")
    try:
        time.sleep(0.2)
        for s in (polled, smi):
            s.start()
        time.sleep(0.1)
        got = [s.stop() for s in (polled, smi)]
    finally:
        polled.close()
        smi.close()
    for samples, reading in zip(got, [(1500.0, 690.0), (1410.0, 687.5)], strict=True):
        assert samples and all(0 <= t < 0.5 and (m, w) == reading for t, m, w in samples)
        assert len(samples) < 60  # not the samples from before start()


class FakeNvml:
    """The few pynvml calls the NVML sampler makes; ``instant``: the driver has the
    instantaneous power field."""

    NVML_SUCCESS, NVML_CLOCK_SM, NVML_FI_DEV_POWER_INSTANT = 0, 1, 186

    class NVMLError(Exception):
        pass

    def __init__(self, instant: bool):
        self.instant = instant

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        raise self.NVMLError("not found")  # the index is the fallback

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetFieldValues(self, handle, fields):
        value = type("V", (), {"uiVal": 688000})()
        return [type("F", (), {"nvmlReturn": 0 if self.instant else 3, "value": value})()]

    def nvmlDeviceGetPowerUsage(self, handle):
        return 690500

    def nvmlDeviceGetClockInfo(self, handle, which):
        assert which == self.NVML_CLOCK_SM
        return 1485


@pytest.mark.parametrize(
    "instant, source, watts", [(True, "instant", 688.0), (False, "average", 690.5)]
)
def test_the_nvml_sampler_prefers_instantaneous_power(monkeypatch, instant, source, watts):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(instant))
    sampler = T.nvml_sampler(0, "GPU-x")
    try:
        assert sampler.source.startswith(f"NVML (power {source}")
        assert sampler._read() == (1485.0, watts)
    finally:
        sampler.close()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: nvidia-smi is next
    assert T.nvml_sampler() is None


# -- the driver, end to end on the CPU -----------------------------------------------------------


class WallClock:
    """Events as host wall time (the CPU chain runs synchronously)."""

    def flush(self):
        raise AssertionError("the sustained ruler does not flush")

    def start(self):
        return time.perf_counter()

    def stop(self, mark):
        return (mark, time.perf_counter())

    def resolve(self, marks):
        return [1000 * (b - a) for a, b in marks]


class ConstantSampler(T.NullSampler):
    source = "constant"

    def stop(self):
        return [(0.5, 1500.0, 690.0)]


def test_driver_records_the_sustained_ruler_on_every_candidate(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.checks, "current_device", lambda: torch.device("cpu"))
    emulate(monkeypatch)
    monkeypatch.setattr(T, "CALIBRATE_MS", 1.0)
    d, checked = make_build(tmp_path, "rmsnorm_chain")
    chain = runtime.load(d)
    sizes = {**{k: v for k, v in checked.spec.dim_sizes().items() if v}, "M": 32}
    opts = D.Options(ms=(32,), baselines=("eager",), warmup=1, device="cpu")
    assert (opts.ruler, opts.rounds, opts.sustain_s) == ("sustained", 3, 0.5)  # the defaults
    opts = replace(opts, rounds=1, sustain_s=0.005)
    (case,) = D.bench_shape(
        chain, chain.checked(), sizes, opts, WallClock(), 1000.0, {}, lambda m: None,
        ConstantSampler(),
    )  # fmt: skip
    timed = [c.stats for c in case.candidates] + [case.sol]
    timed += [s for k in case.kernels for s in (k.coda, k.sol)]
    assert len(timed) == 7 and all(s.calls >= 1 for s in timed)
    assert {(s.clock_mhz, s.watts) for s in timed} == {(1500.0, 690.0)}


# -- the flag ------------------------------------------------------------------------------------


@pytest.fixture
def bench_cli(monkeypatch, tmp_path):
    """``coda bench`` through the CLI with a GPU pretended; run_bench records its options."""
    from coda_spec.bench import driver
    from tests.conftest import ROOT
    from tests.test_cli import _fake_build

    spec = ROOT / "specs" / "f8_scale.yaml"
    _fake_build(tmp_path, spec)
    seen = []

    def run_bench(targets, opts, command):
        seen.append(opts)
        return make_run(cases=(), ruler=opts.ruler)

    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    monkeypatch.setattr(cli, "_load_chain", lambda d: None)
    monkeypatch.setattr(driver, "run_bench", run_bench)

    def invoke(*argv):
        out = tmp_path / "out"
        args = ["bench", str(spec), "--builds", str(tmp_path), "--out", str(out), *argv]
        return CliRunner().invoke(cli.main, args), seen

    return invoke


@pytest.mark.parametrize(
    "argv, want",
    [
        ([], ("sustained", 3, 0.5)),
        (["--isolated"], ("isolated", 20, 0.5)),
        (["--sustain-s", "0.8", "--rounds", "4"], ("sustained", 4, 0.8)),
    ],
    ids=["default-sustained", "isolated", "options"],
)
def test_bench_flag_selects_the_ruler(bench_cli, argv, want):
    res, seen = bench_cli(*argv, "--baselines", "none")
    assert res.exit_code == 1, res.output  # the pretend run has no cases
    (opts,) = seen
    assert (opts.ruler, opts.rounds, opts.sustain_s) == want


def test_time_with_dispatches_by_ruler():
    iso = FakeClock()
    stats, _, _ = T.time_with("isolated", {"a": _cand(iso, "a")}, iso, None, rounds=2, warmup=1)
    assert iso.flushes == 2 and stats["a"].calls == 0  # one flushed call per sample
    with pytest.raises(ValueError, match="ruler 'hot'"):
        T.time_with("hot", {}, iso, None, rounds=1)


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--isolated", "--sustain-s", "1"], "--isolated times one call per sample"),
        (["--sustain-s", "0"], "--sustain-s 0.0: must be a positive number of seconds"),
    ],
)
@pytest.mark.parametrize("command", ["bench", "tune"])
def test_conflicting_ruler_options_exit_2(command, argv, msg, monkeypatch):
    monkeypatch.setattr(cli, "_has_gpu", lambda: True)
    res = CliRunner().invoke(cli.main, [command, "x", *argv])
    assert res.exit_code == 2 and msg in res.output, res.output


# -- the report ----------------------------------------------------------------------------------


def _st(ms, mhz, watts, calls=3000):
    return Mo.Stats(ms, ms * 0.99, ms * 1.01, 3, mhz, watts, calls)


@pytest.fixture
def hot():
    """test_bench_report's run, timed by the sustained ruler: coda's fwd at 1485 MHz and 689 W,
    its cuBLAS SoL at 1545 MHz; the first kernel at 1410 MHz, its cuBLAS at 1545."""
    run = make_run(ruler="sustained", sustain_s=0.5, flush="none", telemetry="nvidia-smi")
    fwd = run.cases[0]
    k0 = fwd.kernels[0]
    k0 = replace(k0, coda=_st(3.0, 1410.0, 688.0), sol=_st(2.5, 1545.0, 690.0))
    fwd = replace(
        fwd,
        candidates=(Mo.Timed("coda", _st(5.0, 1485.0, 689.0)), *fwd.candidates[1:]),
        sol=_st(4.0, 1545.0, 690.0),
        kernels=(k0, *fwd.kernels[1:]),
    )
    return replace(run, cases=(fwd, *run.cases[1:]))


def test_table_shows_clock_power_and_energy_columns(hot):
    table = Rp.render_table(hot)
    lines = table.splitlines()
    assert "ruler sustained 0.5 s streams" in lines[2] and lines[3] == "telemetry: nvidia-smi"
    head = next(ln for ln in lines if "coda ms" in ln).split()
    assert head[head.index("%peak") + 1 :][:5] == ["MHz", "SoL", "MHz", "W", "J/call"]
    fwd = next(ln for ln in lines if ln.startswith("! fwd"))
    assert "50.0%  1485     1545  689    3.44  1.42x" in fwd  # 689 W x 5 ms = 3.445 J
    kernel = next(ln for ln in lines if ln.split()[:1] == ["gemm_rmsnorm_swiglu"])
    assert kernel.rstrip().endswith("62.5%  1410     1545  688    2.06")  # 688 W x 3 ms
    bwd = next(ln for ln in lines if ln.startswith("  bwd"))
    assert " -  " in bwd  # no telemetry on that case: unknown, not zero
    assert max(map(len, lines)) <= 150  # 120 and the four columns
    assert "MHz" not in Rp.render_table(make_run())  # the isolated ruler: no such columns


def test_csv_and_json_carry_the_telemetry(hot, tmp_path):
    rows = list(csv.DictReader(io.StringIO(Rp.csv_text(hot))))
    coda = next(r for r in rows if r["candidate"] == "coda" and r["direction"] == "fwd")
    assert (coda["clock_mhz"], coda["watts"], coda["calls"]) == ("1485.0", "689.0", "3000")
    assert float(coda["j_per_call"]) == pytest.approx(3.445)
    kernel = next(r for r in rows if r["candidate"] == "kernel:gemm_rmsnorm_swiglu")
    assert float(kernel["j_per_call"]) == pytest.approx(2.064)
    data = json.loads(Mo.dumps(hot))
    assert (data["ruler"], data["sustain_s"], data["flush"]) == ("sustained", 0.5, "none")
    assert data["cases"][0]["derived"]["coda"]["j_per_call"] == pytest.approx(3.445)
    back = Mo.loads(Mo.dumps(hot))
    assert back == hot
    old = json.loads(Mo.dumps(make_run()))
    for key in ("ruler", "sustain_s", "telemetry"):
        old.pop(key)
    assert Mo.from_json(old).ruler == "isolated"  # a run from before the sustained ruler


def test_compare_and_merge_across_rulers(hot):
    text = Rp.render_compare(make_run(), hot)
    assert "warning: the runs time by different rulers (isolated vs sustained)" in text
    with pytest.raises(ValueError, match="different rulers"):
        Mo.merge([make_run(), hot])


# -- coda tune at the cap ------------------------------------------------------------------------


@pytest.fixture
def hot_tune(monkeypatch, cpu):  # noqa: F811 - cpu: the fixture imported above
    """Each kernel launch advances the simulated device by its variant's cost."""
    clock = DeviceClock({})

    def tell(chain, step, call):
        if step.kind == "kernel":
            clock.calling((step.name, chain._variant(step, call.sizes, call.device).name))

    emulate(monkeypatch, before=tell)
    monkeypatch.setattr(T, "CALIBRATE_MS", 2.0)
    return clock


def test_tune_picks_by_the_sustained_ruler_and_records_energy(tmp_path, hot_tune):
    d, _ = variant_build(tmp_path)
    hot_tune.cost = {("out_proj", V0): 1.0, ("out_proj", V1): 0.5, ("out_proj", V2): 0.8}
    mhz = {V0: 1410.0, V1: 1515.0, V2: 1500.0}
    sampler = ScriptedSampler(
        hot_tune, {("out_proj", v): [(0.02, m, 690.0)] for v, m in mhz.items()}
    )
    chain = runtime.load(d, tuned=False)
    opts = D.Options(ms=(64,), baselines=(), rounds=2, warmup=1, device="cpu", kernels=False)
    opts = replace(opts, sustain_s=0.02)
    run = TU.run_tune(
        [(d, chain)], opts, "coda tune x", lambda m: None, hot_tune, (GPU, "1"), sampler=sampler
    )
    assert (run.ruler, run.telemetry) == ("sustained", "scripted")
    out_proj = next(r for r in run.results if r.kernel == "out_proj")
    assert out_proj.winner == V1 and out_proj.ms[V1] == pytest.approx(0.5)
    entry = TU.merge(None, run)["builds"][d.name]["kernels"]["out_proj"][0]
    assert entry["ruler"] == "sustained" and entry["clock_mhz"] == mhz
    assert entry["joules"] == pytest.approx({V0: 0.69, V1: 0.345, V2: 0.552})
    assert entry["watts"] == {V0: 690.0, V1: 690.0, V2: 690.0}
    TT.validate(TU.merge(None, run))  # the tune file reader takes it
    text = TU.render_table(run)
    assert "ruler sustained" in text.splitlines()[1]
    assert "v1 1515 MHz 690 W 0.345 J" in text


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("ruler", "hot", "ruler must be one of sustained, isolated"),
        ("joules", {V0: "1 J"}, "joules must map config texts to numbers"),
        ("clock_mhz", [1500], "clock_mhz must map config texts to numbers"),
    ],
)
def test_malformed_telemetry_in_a_tune_file_is_refused(key, value, why):
    row = {"dims": {"D": 512}, "m_max": 64, "config": V0, key: value}
    data = {"format": 1, "builds": {"b": {"gpu": GPU, "kernels": {"k": [row]}}}}
    with pytest.raises(ValueError, match=why):
        TT.validate(data)
