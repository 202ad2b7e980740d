"""``coda_spec.bench.report`` on a hand-built run (CPU, no torch): table, CSV, JSON, compare, plot.

The run: ``f3_norm_swiglu`` (GEMM SoL) in fwd / bwd / fwd+bwd with two kernels in fwd, and
``f6_rope`` (no GEMM: memory-roofline SoL). compile failed in f3 fwd (stats None, a note); liger
is an ``equivalent_to`` fallback (a note). The numbers are picked so that the figures are round:
f3 fwd is 5 ms against a 4 ms SoL (1.25x, flagged), bwd is within 1.05x SoL and beats every
baseline (not flagged), fwd+bwd loses to liger (flagged).
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import replace

import pytest

from coda_spec.bench import model
from coda_spec.bench.model import BenchRun, Case, Device, KernelTimed, Stats, Timed
from coda_spec.bench.report import (
    csv_text,
    plot,
    render_compare,
    render_markdown,
    render_table,
    write_outputs,
)
from coda_spec.errors import ToolError

F3 = {"M": 16384, "D": 4096, "F": 11008}
ROPE = {"M": 8192, "H": 32, "D": 128}
LIGER_NOTE = "equivalent_to fallback: leaves out dgamma"
COMPILE_NOTE = "torch.compile failed: out of shared memory"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def st(ms: float) -> Stats:
    return Stats(ms, ms * 0.98, ms * 1.04, 20)


def gemm_case(direction: str, coda: float, sol: float, eager: float, liger: float, **kw) -> Case:
    return Case(
        chain="f3_norm_swiglu",
        dims=dict(F3),
        direction=direction,
        sol_kind="gemm",
        flops=2e12,
        bytes=1e9,
        sol_ms=sol,
        candidates=(
            Timed("coda", st(coda)),
            Timed("eager", st(eager)),
            *kw.pop("extra", ()),
            Timed("liger", st(liger), LIGER_NOTE),
        ),
        sol=st(sol),
        **kw,
    )


def make_run(**over) -> BenchRun:
    fwd = gemm_case(
        "fwd",
        coda=5.0,
        sol=4.0,
        eager=7.1,
        liger=5.5,
        extra=(Timed("compile", None, COMPILE_NOTE),),
        kernels=(
            KernelTimed("gemm_rmsnorm_swiglu", Stats(3.0, 2.9, 3.1, 20), st(2.5), 1.5e12, 6e8),
            KernelTimed("gemm_down", Stats(2.0, 1.9, 2.1, 20), st(1.6), 5e11, 4e8),
        ),
    )
    bwd = gemm_case("bwd", coda=8.2, sol=8.0, eager=12.3, liger=9.0)
    both = gemm_case("fwd+bwd", coda=12.4, sol=12.0, eager=19.0, liger=12.0)
    rope = Case(
        chain="f6_rope",
        dims=dict(ROPE),
        direction="fwd",
        sol_kind="memory",
        flops=0.0,
        bytes=2e9,
        sol_ms=0.5,  # 2e9 bytes at 4000 GB/s
        candidates=(Timed("coda", st(0.52)), Timed("eager", st(1.3))),
        kernels=(KernelTimed("rope", st(0.52), None, 0.0, 2e9),),
    )
    device = Device(
        name="NVIDIA H200",
        capability="sm_90",
        driver="570.86.15",
        torch="2.7.1",
        cuda="12.8",
        sms=132,
        peak_tflops=800.0,
        copy_gbps=4000.0,
    )
    fields = dict(
        date="2025-07-01T12:00:00Z",
        command="coda bench specs/f3_norm_swiglu.yaml specs/f6_rope.yaml",
        device=device,
        rounds=20,
        cases=(fwd, bwd, both, rope),
    )
    return BenchRun(**{**fields, **over})


@pytest.fixture
def run() -> BenchRun:
    return make_run()


def row_of(table: str, chain: str, direction: str) -> str:
    """The table line of ``direction`` under the group headed by ``chain``."""
    group = None
    for line in table.splitlines():
        if line.startswith(chain + "  "):
            group = chain
        elif line and not line.startswith(" ") and not line.startswith("!"):
            group = None
        elif group and line[2:].split()[:1] == [direction]:
            return line
    raise AssertionError(f"no line for {chain} {direction} in\n{table}")


def kernel_line(table: str, name: str) -> str:
    return next(ln for ln in table.splitlines() if ln.split()[:1] == [name])


# -- table ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "part",
    [
        "2025-07-01T12:00:00Z",
        "NVIDIA H200 (sm_90, 132 SMs)",
        "driver 570.86.15",
        "800.0 TFLOP/s",
        "4000 GB/s",
        "rounds 20",
        "flush l2",
    ],
    ids=["date", "device", "driver", "peak-flops", "peak-copy", "rounds", "flush"],
)
def test_table_header(run, part):
    assert part in "\n".join(render_table(run).splitlines()[:4])


@pytest.mark.parametrize(
    "chain, direction, cells",
    [
        # 2e12 FLOP in 5 ms = 400 TFLOP/s = 50% of 800; 1e9 B in 5 ms = 200 GB/s
        (
            "f3_norm_swiglu",
            "fwd",
            ["5.000", "4.900-5.200", "4.000", "gemm", "1.25x", "400.0", "200", "50.0%", "1.42x"],
        ),
        ("f3_norm_swiglu", "bwd", ["8.200", "8.000", "1.02x", "1.50x"]),
        # 2e9 B in 0.52 ms = 3846 GB/s = 96.2% of the 4000 GB/s copy; no FLOPs
        ("f6_rope", "fwd", ["0.5200", "0.5000", "memory", "1.04x", "3846", "96.2%", "2.50x"]),
    ],
    ids=["gemm-fwd", "gemm-bwd", "memory-fwd"],
)
def test_table_case_figures(run, chain, direction, cells):
    line = row_of(render_table(run), chain, direction)
    for cell in cells:
        assert f" {cell}" in line, (cell, line)


@pytest.mark.parametrize(
    "chain, direction, flagged",
    [
        ("f3_norm_swiglu", "fwd", True),  # 1.25x SoL
        ("f3_norm_swiglu", "bwd", False),  # 1.025x SoL, faster than every baseline
        ("f3_norm_swiglu", "fwd+bwd", True),  # liger 12.0 ms beats coda 12.4 ms
        ("f6_rope", "fwd", False),  # 1.04x SoL
    ],
    ids=["above-sol", "clean", "lost-to-baseline", "memory-clean"],
)
def test_table_flag(run, chain, direction, flagged):
    assert row_of(render_table(run), chain, direction).startswith("!") is flagged


def test_table_columns_and_speedups(run):
    table = render_table(run)
    head = next(ln for ln in table.splitlines() if "coda ms" in ln).split()
    assert head[-3:] == ["eager", "compile", "liger"]
    assert head[:4] == ["dir", "coda", "ms", "p20-p80"]
    line = row_of(table, "f3_norm_swiglu", "fwd+bwd")
    assert " 0.97x" in line  # 12.0 / 12.4: coda slower than liger
    assert line.rstrip().endswith("0.97x[2]")  # liger's note is footnote 2


def test_table_footnotes(run):
    table = render_table(run)
    fwd = row_of(table, "f3_norm_swiglu", "fwd")
    assert " -[1] " in fwd  # compile did not run: no speedup, its note
    assert fwd.rstrip().endswith("1.10x[2]")  # liger 5.5 / 5.0, equivalent_to fallback
    notes = table.split("\nnotes:\n")[1].splitlines()
    assert notes == [f"  [1] compile: {COMPILE_NOTE}", f"  [2] liger: {LIGER_NOTE}"]


@pytest.mark.parametrize(
    "name, cells",
    [
        # 3.0 ms vs 2.5 ms cuBLAS; 1.5e12 FLOP in 3 ms = 500 TFLOP/s = 62.5%
        ("gemm_rmsnorm_swiglu", ["3.000", "2.500", "cuBLAS", "1.20x", "500.0", "62.5%"]),
        ("gemm_down", ["2.000", "1.600", "1.25x"]),
        ("rope", ["0.5200", "-", "3846", "96.2%"]),  # no GEMM: no cuBLAS time, no ratio
    ],
    ids=["kernel-1", "kernel-2", "kernel-no-gemm"],
)
def test_table_kernel_lines(run, name, cells):
    line = kernel_line(render_table(run), name)
    assert line.startswith("    ")
    for cell in cells:
        assert f" {cell}" in line, (cell, line)


def test_table_fits_and_aligns(run):
    table = render_table(run)
    assert "\x1b[" not in table
    grid = table.split("\n\n")[1].splitlines()
    assert max(map(len, table.splitlines())) <= 120
    head = grid[0]
    for line in grid[1:]:  # every right-aligned column ends where its header ends
        if line.startswith(("  ", "!")) and "x" in line.split()[-1]:
            assert len(line) == len(head), line


def test_table_coda_failed(run):
    bwd = run.cases[1]
    failed = replace(bwd, candidates=(Timed("coda", None, "launch failed"), *bwd.candidates[1:]))
    table = render_table(replace(run, cases=(failed,)))
    line = row_of(table, "f3_norm_swiglu", "bwd[1]")
    assert line.startswith("! bwd[1]") and " failed " in line
    assert "  [1] coda: launch failed" in table.splitlines()


def test_table_color(run):
    assert "\x1b[31m" in render_table(run, color=True)


# -- CSV -----------------------------------------------------------------------------------------
def csv_rows(run: BenchRun) -> list[dict]:
    return list(csv.DictReader(io.StringIO(csv_text(run))))


def test_csv_header(run):
    header = csv_text(run).splitlines()[0].split(",")
    for col in (
        "chain",
        "dims",
        "direction",
        "candidate",
        "median_ms",
        "p20_ms",
        "p80_ms",
        "n",
        "tflops",
        "gbps",
        "pct_peak_flops",
        "pct_peak_bw",
        "x_sol",
        "speedup_vs",
        "note",
    ):
        assert col in header


def test_csv_row_count(run):
    # per case: its candidates, one sol row, one per kernel
    expected = sum(len(c.candidates) + 1 + len(c.kernels) for c in run.cases)
    assert len(csv_rows(run)) == expected


def test_csv_candidates_agree_with_model(run):
    rows = {(r["chain"], r["dims"], r["direction"], r["candidate"]): r for r in csv_rows(run)}
    for case in run.cases:
        up = model.speedups(case)
        for cand in case.candidates:
            row = rows[(*case.key, cand.name)]
            fig = model.derived(case, run.device, cand.stats)
            for col in ("tflops", "gbps", "pct_peak_flops", "pct_peak_bw", "x_sol"):
                want = fig.get(col)
                got = None if row[col] == "" else float(row[col])
                assert got == (None if want is None else pytest.approx(want)), (case.key, col)
            if cand.name in up:
                assert float(row["speedup_vs"]) == pytest.approx(up[cand.name])
            assert row["note"] == cand.note


@pytest.mark.parametrize(
    "candidate, col, value",
    [
        ("coda", "median_ms", 5.0),
        ("coda", "x_sol", 1.25),
        ("eager", "speedup_vs", 1.42),
        ("compile", "median_ms", ""),
        ("compile", "note", COMPILE_NOTE),
        ("sol", "median_ms", 4.0),
        ("kernel:gemm_rmsnorm_swiglu", "x_sol", 1.2),
        ("kernel:gemm_rmsnorm_swiglu", "sol_ms", 2.5),
        ("kernel:gemm_rmsnorm_swiglu", "tflops", 500.0),
    ],
    ids=[
        "coda-ms",
        "coda-x-sol",
        "eager-speedup",
        "failed-ms",
        "failed-note",
        "sol-ms",
        "kernel-ratio",
        "kernel-cublas",
        "kernel-tflops",
    ],
)
def test_csv_f3_fwd_values(run, candidate, col, value):
    rows = [r for r in csv_rows(run) if r["chain"] == "f3_norm_swiglu" and r["direction"] == "fwd"]
    row = next(r for r in rows if r["candidate"] == candidate)
    assert row["dims"] == "M=16384,D=4096,F=11008"
    if isinstance(value, float):
        assert float(row[col]) == pytest.approx(value)
    else:
        assert row[col] == value


def test_csv_gemm_plus_memory_sol(run):
    """SoL = GEMMs measured (8 ms) + host bytes at copy bandwidth: a ``sol:gemm`` row too."""
    case = replace(run.cases[1], sol_kind="gemm+memory", sol_ms=9.0)
    rows = {r["candidate"]: r for r in csv_rows(replace(run, cases=(case,)))}
    assert (rows["sol"]["median_ms"], rows["sol"]["p20_ms"], rows["sol"]["x_sol"]) == (
        "9.0",
        "",
        "1.0",
    )
    assert float(rows["sol:gemm"]["median_ms"]) == 8.0
    assert float(rows["sol:gemm"]["x_sol"]) == pytest.approx(8 / 9)


# -- JSON ----------------------------------------------------------------------------------------
def test_json_round_trip(run, tmp_path):
    json_path, csv_path = write_outputs(run, tmp_path / "out", stem="r1")
    assert (json_path.name, csv_path.name) == ("r1.json", "r1.csv")
    assert json_path.read_text() == model.dumps(run)
    assert model.loads(json_path.read_text()) == run
    assert csv_path.read_text() == csv_text(run)
    back = model.loads(json_path.read_text())
    assert render_table(back) == render_table(run)


# -- compare -------------------------------------------------------------------------------------
def faster_run() -> BenchRun:
    """f3 fwd coda 5.0 -> 4.5 ms, f6_rope dropped, f3 at new dims added, on another device."""
    old = make_run()
    fwd, bwd, both, _ = old.cases
    fwd = replace(fwd, candidates=(Timed("coda", st(4.5)), *fwd.candidates[1:]))
    new_dims = replace(bwd, dims={"M": 4096, "D": 4096, "F": 11008})
    return replace(
        old,
        date="2025-07-08T12:00:00Z",
        device=replace(old.device, name="NVIDIA H100 80GB HBM3"),
        cases=(fwd, bwd, both, new_dims),
    )


def compare_line(text: str, direction: str, name: str) -> list[str]:
    for line in text.splitlines():
        cells = line.split()
        if cells[:2] == [direction, name]:
            return cells
    raise AssertionError(f"no {direction} {name} line in\n{text}")


@pytest.mark.parametrize(
    "direction, name, cells",
    [
        ("fwd", "coda", ["5.000", "4.500", "-10.0%"]),
        ("bwd", "coda", ["8.200", "8.200", "+0.0%"]),
    ],
    ids=["faster", "unchanged"],
)
def test_compare_change(run, direction, name, cells):
    assert compare_line(render_compare(run, faster_run()), direction, name)[2:] == cells


def test_compare_candidates_and_kernels(run):
    text = render_compare(run, faster_run())
    fwd_block = text.split("  fwd ")[1].split("  bwd ")[0]
    for name in ("eager", "compile", "liger", "sol", "kernel:gemm_down"):
        assert f" {name} " in fwd_block


def test_compare_only_in_one(run):
    text = render_compare(run, faster_run())
    assert "only in old:\n  f6_rope  M=8192 H=32 D=128  fwd\n" in text
    assert "only in new:\n  f3_norm_swiglu  M=4096 D=4096 F=11008  bwd\n" in text


def test_compare_header(run):
    text = render_compare(run, faster_run())
    head = text.splitlines()[:4]
    assert "2025-07-01T12:00:00Z" in head[1] and "NVIDIA H200" in head[1]
    assert "2025-07-08T12:00:00Z" in head[2] and "NVIDIA H100 80GB HBM3" in head[2]
    assert head[3].startswith("warning: the runs are on different devices")
    assert "warning" not in render_compare(run, run)


# -- plot ----------------------------------------------------------------------------------------
def test_plot_one_png_per_chain(run, tmp_path):
    pytest.importorskip("matplotlib")
    back = model.loads(model.dumps(run))
    paths = plot(back, tmp_path / "charts")
    assert [p.name for p in paths] == ["f3_norm_swiglu.png", "f6_rope.png"]
    assert sorted(paths) == sorted((tmp_path / "charts").iterdir())
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == PNG_SIGNATURE
        assert len(data) > 10_000  # a drawn chart, not an empty canvas


def test_plot_without_matplotlib(run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(ToolError, match=r"pip install 'coda-spec\[bench\]'"):
        plot(run, tmp_path)


def _md_rows(run: BenchRun) -> list[str]:
    return [line for line in render_markdown(run).splitlines() if line.startswith("| f3")]


def test_markdown_a_tuned_run_is_one_row_per_chain_and_direction(run):
    """Tuned: each shape ran its own config; the summary still has one row per chain."""
    fwd = run.cases[0]
    wide = replace(fwd, dims={**F3, "D": 8192}, config="128x128,cluster=2x1,pingpong")
    rows = _md_rows(
        replace(run, cases=(replace(fwd, config="128x256,cluster=2x1,cooperative"), wide))
    )
    assert len(rows) == 1 and rows[0].startswith("| f3_norm_swiglu | fwd | ")


def test_markdown_a_config_sweep_keeps_a_row_per_config(run):
    fwd = run.cases[0]
    a = replace(fwd, config="128x256,cluster=2x1,cooperative")
    b = replace(fwd, config="128x128,cluster=2x1,pingpong")
    rows = _md_rows(replace(run, cases=(a, b)))
    assert [r.split(" | ")[0] for r in rows] == [
        "| f3_norm_swiglu [128x256,cluster=2x1,cooperative]",
        "| f3_norm_swiglu [128x128,cluster=2x1,pingpong]",
    ]
