"""What a bench run shows: the terminal table, the CSV, a comparison of two runs, PNG charts.

Every output reads a :class:`~coda_spec.bench.model.BenchRun` and nothing else, so a run read
back from its JSON renders exactly as the run that wrote it.

* :func:`render_table` is for the person at the terminal. A header names the run (date, device,
  driver, measured peaks, rounds, flush); then per chain and dims one line per direction: coda's
  median with p20-p80, the speed of light (SoL) and its kind, coda / SoL (``x_sol``), TFLOP/s,
  GB/s, percent of peak (FLOP/s for chains with GEMMs, copy bandwidth for memory chains) and
  coda's speedup over each baseline (baseline ms / coda ms). Under each direction, one line per
  coda kernel timed alone next to its own cuBLAS GEMM. A run of the sustained ruler adds four
  columns: the median SM clock (MHz) coda's streams held, the clock its cuBLAS SoL held (SoL
  MHz), the mean board power (W) and the energy per call (J/call); ``-`` where the board did not
  report them. ``!`` flags a direction where coda lost
  to its best baseline, ran above ``SOL_SLACK`` x SoL, or did not run. Candidate notes (a
  baseline that leaves outputs out, an ``equivalent_to`` fallback, a failure) become numbered
  footnotes. The chain and dims head a group of lines so that a line fits about 120 columns
  (150 with the sustained ruler's four columns).
* :func:`csv_text` / :func:`write_outputs` are for spreadsheets and scripts: one row per (case,
  candidate), one for the case's SoL and one per (case, kernel), every row self-contained.
  :func:`write_outputs` writes the CSV next to the JSON of :func:`model.dumps`, which stays the
  one file other tools read.
* :func:`render_compare` is for "did this change make it faster": two runs matched by
  :attr:`Case.key`, old ms -> new ms and the change in percent (negative = faster).
* :func:`plot` draws one PNG per chain (matplotlib, Agg, imported only there); in a run of the
  sustained ruler each bar is labelled with the SM clock (MHz) its streams held.

No figure of a run is computed here: TFLOP/s, GB/s, percent of peak and ``x_sol`` come from
:func:`model.derived`, speedups from :func:`model.speedups`, the baseline coda must beat from
:func:`model.best_baseline`. A kernel's figures come from the same :func:`model.derived`, applied
to a case holding the kernel's own work with its cuBLAS GEMM as the SoL (:func:`model.kernel_case`).
The one formula of this module is the compare's change between two runs, (new - old) / old.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from coda_spec.bench.model import (
    BASELINES,
    CODA,
    SOL_SLACK,
    BenchRun,
    Case,
    KernelTimed,
    Stats,
    best_baseline,
    derived,
    dims_text,
    dumps,
    flagged,
    joules,
    kernel_case,
    pct_peak,
    speedups,
)
from coda_spec.errors import ToolError

CSV_FIELDS = (
    "chain",
    "dims",
    "direction",
    "sol_kind",
    "candidate",
    "median_ms",
    "p20_ms",
    "p80_ms",
    "n",
    "sol_ms",
    "tflops",
    "gbps",
    "pct_peak_flops",
    "pct_peak_bw",
    "x_sol",
    "speedup_vs",
    "clock_mhz",
    "watts",
    "j_per_call",
    "calls",
    "note",
)
SUSTAINED = "sustained"  # BenchRun.ruler of a run with clocks and power (coda_spec.bench.timing)


# -- shared helpers ------------------------------------------------------------------------------
def _dims(dims: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())


def _ms(x: float | None) -> str:
    if x is None or not x > 0:
        return "-"
    return f"{x:.3f}" if x >= 1 else f"{x:.4f}"


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "-" if x is None else format(x, spec) + suffix


def _baseline_names(run: BenchRun) -> list[str]:
    """The baseline columns: every known baseline, then any other name the run holds."""
    names = list(BASELINES)
    for case in run.cases:
        names += [c.name for c in case.candidates if c.name != CODA and c.name not in names]
    return names


def _groups(cases) -> dict:
    """Cases grouped by (chain, dims, config) in first-seen order."""
    out: dict = {}
    for case in cases:
        out.setdefault((case.chain, dims_text(case.dims), case.config), []).append(case)
    return out


def _paint(text: str, style: str, color: bool) -> str:
    code = {"bad": "31", "good": "32", "warn": "33", "bold": "1"}.get(style)
    return f"\x1b[{code}m{text}\x1b[0m" if color and code else text


def _grid(rows: list, right: tuple, color: bool) -> list[str]:
    """Align ``rows``: a ``str`` is a whole line; a list holds cells, ``str`` or ``(str, style)``.
    ``right[i]`` right-aligns column ``i``. Styles are painted after padding, so colour never
    shifts a column."""
    cells = [
        [c if isinstance(c, tuple) else (c, "") for c in r] for r in rows if isinstance(r, list)
    ]
    widths = [
        max((len(r[i][0]) for r in cells if i < len(r)), default=0) for i in range(len(right))
    ]
    lines, it = [], iter(cells)
    for row in rows:
        if isinstance(row, str):
            lines.append(row)
            continue
        parts = [
            _paint(text.rjust(w) if r else text.ljust(w), style, color)
            for (text, style), w, r in zip(next(it), widths, right, strict=False)
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


class _Footnotes:
    """Numbered notes; the same text keeps its number."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if not text:
            return ""
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"  [{i}] {t}" for i, t in enumerate(self.texts, 1)]


# -- terminal table --------------------------------------------------------------------------
def _header(run: BenchRun) -> list[str]:
    d = run.device
    what = [d.capability] if d.capability else []
    what += [f"{d.sms} SMs"] if d.sms else []
    peak = _fmt(d.peak_tflops or None, ".1f", " TFLOP/s (bf16 mm)")
    copy = _fmt(d.copy_gbps or None, ".0f", " GB/s (copy)")
    ruler = f"sustained {run.sustain_s:g} s streams" if _sustained(run) else run.ruler
    lines = [
        f"coda bench  {run.date}  {d.name}" + (f" ({', '.join(what)})" if what else ""),
        f"driver {d.driver or '-'}  torch {d.torch or '-'}  CUDA {d.cuda or '-'}",
        f"peaks {peak}, {copy}  rounds {run.rounds}  flush {run.flush}  ruler {ruler}",
    ]
    if _sustained(run):
        lines.append(f"telemetry: {run.telemetry or 'none (clocks and power not read)'}")
    if run.command:
        lines.append(f"command: {run.command}")
    return lines + [f"note: {n}" for n in run.notes]


def _sustained(run: BenchRun) -> bool:
    return run.ruler == SUSTAINED


def _energy_cells(stats: Stats | None, sol: Stats | None) -> list[str]:
    """MHz, SoL MHz, W, J/call (the sustained ruler's columns)."""
    return [
        _fmt(stats.clock_mhz if stats else None, ".0f"),
        _fmt(sol.clock_mhz if sol else None, ".0f"),
        _fmt(stats.watts if stats else None, ".0f"),
        _fmt(joules(stats), ".3g"),
    ]


def _case_row(case: Case, run: BenchRun, names: list[str], notes: _Footnotes) -> list:
    coda = case.candidate(CODA)
    stats = coda.stats if coda is not None else None
    fig = derived(case, run.device, stats)
    pct = pct_peak(case, fig)
    marks = "".join(notes.mark(n) for n in case.notes)
    if coda is not None:
        marks += notes.mark(f"coda: {coda.note}" if coda.note else "")
    flag = flagged(case, run.device)
    x_sol = fig.get("x_sol")
    row = [
        (("! " if flag else "  ") + case.direction + marks, "bad" if flag else ""),
        _ms(stats.median_ms) if stats else ("failed" if coda else "-"),
        f"{_ms(stats.p20_ms)}-{_ms(stats.p80_ms)}" if stats else "",
        _ms(case.sol_ms),
        case.sol_kind,
        (_fmt(x_sol, ".2f", "x"), "warn" if x_sol and x_sol > SOL_SLACK else ""),
        _fmt(fig.get("tflops"), ".1f"),
        _fmt(fig.get("gbps"), ".0f"),
        _fmt(pct, ".1f", "%"),
    ]
    if _sustained(run):
        row += _energy_cells(stats, case.sol)
    up = speedups(case)
    for name in names:
        cand = case.candidate(name)
        mark = notes.mark(f"{name}: {cand.note}" if cand is not None and cand.note else "")
        s = up.get(name)
        row.append((_fmt(s, ".2f", "x") + mark, "" if s is None else "bad" if s < 1 else "good"))
    return row


def _kernel_row(case: Case, k: KernelTimed, run: BenchRun, notes: _Footnotes) -> list:
    kcase = kernel_case(case, k)
    fig = derived(kcase, run.device, k.coda)
    pct = pct_peak(kcase, fig)
    energy = _energy_cells(k.coda, k.sol) if _sustained(run) else []
    return [
        f"    {k.name}" + notes.mark(f"{k.name}: {k.note}" if k.note else ""),
        _ms(k.coda.median_ms) if k.coda else "failed",
        f"{_ms(k.coda.p20_ms)}-{_ms(k.coda.p80_ms)}" if k.coda else "",
        _ms(k.sol.median_ms) if k.sol else "-",
        "cuBLAS" if k.sol else "-",
        _fmt(fig.get("x_sol"), ".2f", "x"),
        _fmt(fig.get("tflops"), ".1f"),
        _fmt(fig.get("gbps"), ".0f"),
        _fmt(pct, ".1f", "%"),
        *energy,
    ]


def render_table(run: BenchRun, color: bool = False) -> str:
    """The run as a fixed-width table (about 120 columns, 150 with the sustained ruler's); ANSI
    colour only when ``color``."""
    names = _baseline_names(run)
    notes = _Footnotes()
    head = ["  dir", "coda ms", "p20-p80", "SoL ms", "SoL kind", "x_sol", "TFLOP/s", "GB/s"]
    energy = ENERGY_COLUMNS if _sustained(run) else []
    rows: list = [[(h, "bold") for h in [*head, "%peak", *energy, *names]]]
    for (chain, _, config), cases in _groups(run.cases).items():
        head = f"{chain}  {_dims(cases[0].dims)}" + (f"  [{config}]" if config else "")
        rows.append(_paint(head, "bold", color))
        for case in cases:
            rows.append(_case_row(case, run, names, notes))
            rows += [_kernel_row(case, k, run, notes) for k in case.kernels]
    right = (False, True, True, True, False, *[True] * (4 + len(energy) + len(names)))
    lines = _header(run) + [""] + _grid(rows, right, color)
    if not run.cases:
        lines.append("(no cases)")
    lines += [
        "",
        "x_sol = coda ms / SoL ms; kernel lines: the kernel alone / its cuBLAS GEMM.",
        f"{' / '.join(names)}: coda's speedup, baseline ms / coda ms (> 1: coda is faster).",
        "%peak: of the measured TFLOP/s for chains with GEMMs, of the copy GB/s for memory chains.",
        f"! coda lost to its best baseline, ran above {SOL_SLACK:.2f}x SoL, or did not run.",
    ]
    if _sustained(run):
        lines.insert(
            -1,
            "MHz / SoL MHz: median SM clock of coda's / the cuBLAS SoL's streams; W: mean board "
            "power; J/call = W x ms.",
        )
    if notes.texts:
        lines += ["", "notes:", *notes.lines()]
    return "\n".join(lines) + "\n"


ENERGY_COLUMNS = ["MHz", "SoL MHz", "W", "J/call"]


# -- CSV -------------------------------------------------------------------------------------
def _csv_row(case: Case, candidate: str, stats: Stats | None, fig: dict, **extra) -> dict:
    row = {
        "chain": case.chain,
        "dims": dims_text(case.dims),
        "direction": case.direction,
        "sol_kind": case.sol_kind,
        "candidate": candidate,
        "sol_ms": case.sol_ms,
    }
    if stats is not None:
        row.update(median_ms=stats.median_ms, p20_ms=stats.p20_ms, p80_ms=stats.p80_ms, n=stats.n)
        row.update(clock_mhz=stats.clock_mhz, watts=stats.watts, calls=stats.calls or None)
    keys = ("tflops", "gbps", "pct_peak_flops", "pct_peak_bw", "x_sol", "j_per_call")
    row.update({k: fig.get(k) for k in keys})
    row.update(extra)
    return row


def _csv_rows(case: Case, run: BenchRun):
    up = speedups(case)
    for c in case.candidates:
        fig = derived(case, run.device, c.stats)
        yield _csv_row(case, c.name, c.stats, fig, speedup_vs=up.get(c.name), note=c.note)
    # The total SoL: its figures at sol_ms (x_sol 1 by definition); measured stats only where
    # the SoL is the measured GEMM time alone.
    at_sol = Stats(case.sol_ms, case.sol_ms, case.sol_ms, 0)
    gemm_only = case.sol_kind == "gemm" and case.sol is not None
    sol_fig = derived(case, run.device, at_sol)
    yield _csv_row(case, "sol", case.sol if gemm_only else None, sol_fig, median_ms=case.sol_ms)
    if case.sol is not None and not gemm_only:  # the measured GEMM part of a gemm+memory SoL
        yield _csv_row(case, "sol:gemm", case.sol, derived(case, run.device, case.sol))
    for k in case.kernels:
        kcase = kernel_case(case, k)
        fig = derived(kcase, run.device, k.coda)
        name = f"kernel:{k.name}"
        yield _csv_row(case, name, k.coda, fig, sol_ms=kcase.sol_ms or None, note=k.note)


def csv_text(run: BenchRun) -> str:
    """One row per (case, candidate), one ``sol`` row per case, one per (case, kernel).

    For a ``kernel:<name>`` row, ``sol_ms`` and ``x_sol`` refer to the kernel's own cuBLAS GEMM.
    Empty cells are figures that do not apply (a candidate that did not run, no FLOPs)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for case in run.cases:
        writer.writerows(_csv_rows(case, run))
    return buf.getvalue()


def write_outputs(run: BenchRun, out_dir: Path, stem: str = "bench") -> list[Path]:
    """Write ``<stem>.json`` (:func:`model.dumps`, the file other tools read) and ``<stem>.csv``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / f"{stem}.json", out_dir / f"{stem}.csv"
    json_path.write_text(dumps(run))
    csv_path.write_text(csv_text(run))
    return [json_path, csv_path]


# -- compare ---------------------------------------------------------------------------------
def _times(case: Case) -> dict:
    """name -> median ms (None: did not run) of each candidate, the SoL and each kernel."""
    out = {c.name: c.stats.median_ms if c.stats else None for c in case.candidates}
    out["sol"] = case.sol_ms or None
    out.update({f"kernel:{k.name}": k.coda.median_ms if k.coda else None for k in case.kernels})
    return out


def render_compare(old: BenchRun, new: BenchRun) -> str:
    """Cases matched by :attr:`Case.key`: old ms -> new ms and the change (negative = faster)."""
    lines = [
        "coda bench compare",
        f"  old: {old.date}  {old.device.name}  rounds {old.rounds}  flush {old.flush}"
        f"  ruler {old.ruler}",
        f"  new: {new.date}  {new.device.name}  rounds {new.rounds}  flush {new.flush}"
        f"  ruler {new.ruler}",
    ]
    if old.device.name != new.device.name:
        lines.append(
            f"warning: the runs are on different devices ({old.device.name!r} vs "
            f"{new.device.name!r}); their times are not comparable"
        )
    if old.ruler != new.ruler:
        lines.append(
            f"warning: the runs time by different rulers ({old.ruler} vs {new.ruler}); a change "
            "between them is the ruler's as much as the code's"
        )
    elif old.flush != new.flush:
        lines.append(f"warning: the runs defeat caches differently ({old.flush} vs {new.flush})")
    before = {c.key: c for c in old.cases}
    matched = [c for c in new.cases if c.key in before]
    rows: list = [["", "", "old ms", "new ms", "change"]]
    for (chain, _, config), cases in _groups(matched).items():
        rows.append(f"{chain}  {_dims(cases[0].dims)}")
        for case in cases:
            old_config = before[case.key].config
            if old_config != config:
                rows.append(f"  config {old_config or '-'} -> {config or '-'}")
            a, b = _times(before[case.key]), _times(case)
            for i, name in enumerate([*b, *(n for n in a if n not in b)]):
                t0, t1 = a.get(name), b.get(name)
                pct = 100 * (t1 - t0) / t0 if t0 and t1 else None
                rows.append(
                    [
                        "  " + case.direction if i == 0 else "",
                        name,
                        _ms(t0),
                        _ms(t1),
                        _fmt(pct, "+.1f", "%"),
                    ]
                )
    lines += [""] + _grid(rows, (False, False, True, True, True), False)
    if not matched:
        lines.append("(no case in both runs)")
    now = {c.key for c in new.cases}
    for label, run, other in (("old", old, now), ("new", new, set(before))):
        only = [c for c in run.cases if c.key not in other]
        if only:
            lines += ["", f"only in {label}:"]
            lines += [f"  {c.chain}  {_dims(c.dims)}  {c.direction}" for c in only]
    return "\n".join(lines) + "\n"


# -- markdown summary --------------------------------------------------------------------------
def render_markdown(run: BenchRun) -> str:
    """One markdown table for docs: per chain and direction, one column per shape (the dims
    every case has, e.g. M and D; each chain's other dims follow them): coda's median, coda /
    SoL, and coda's speedup over its best complete baseline, named. Bold: a flagged case."""
    common = (
        [k for k in run.cases[0].dims if all(k in c.dims for c in run.cases)] if run.cases else []
    )
    col = lambda c: " ".join(f"{k}={c.dims[k]}" for k in common)  # noqa: E731
    cols = list(dict.fromkeys(col(c) for c in run.cases))
    # A chain gets one row per config only in a sweep (the same shape run at several configs);
    # a tuned run, whose config differs from shape to shape, stays one row per chain.
    configs: dict = {}
    for c in run.cases:
        configs.setdefault((c.chain, col(c), c.direction), set()).add(c.config)
    sweep = {chain for (chain, _, _), seen in configs.items() if len(seen) > 1}
    label = lambda c: c.chain + (f" [{c.config}]" if c.chain in sweep else "")  # noqa: E731
    rows: dict = {}
    for c in run.cases:
        rows.setdefault((label(c), c.direction), {})[col(c)] = c
    out = ["| chain | dir | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for (chain, direction), by_col in rows.items():
        cells = []
        for key in cols:
            case = by_col.get(key)
            coda = case.candidate(CODA) if case is not None else None
            if coda is None or coda.stats is None:
                cells.append("-")
                continue
            x_sol = derived(case, run.device, coda.stats).get("x_sol")
            best = best_baseline(case)
            vs = (
                f"{best.stats.median_ms / coda.stats.median_ms:.2f}x {best.name}"
                if best is not None
                else "no baseline"
            )
            bold = "**" if flagged(case, run.device) else ""
            cells.append(f"{bold}{_fmt(x_sol, '.2f', 'x')} SoL, {vs}{bold}")
        out.append(f"| {chain} | {direction} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# -- plot ------------------------------------------------------------------------------------
def plot(run: BenchRun, out_dir: Path) -> list[Path]:
    """One ``<chain>.png`` per chain: per dims a panel, per direction a group of bars (median ms
    of each candidate that ran, p20-p80 error bars) with the SoL as a dashed line."""
    try:
        import matplotlib
    except ImportError as e:
        raise ToolError("coda bench charts need matplotlib: pip install 'coda-spec[bench]'") from e
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_chain: dict = {}
    for (chain, _, _), cases in _groups(run.cases).items():
        by_chain.setdefault(chain, []).append(cases)
    paths = []
    for chain, panels in by_chain.items():
        fig = Figure(figsize=(8, 1.0 + 3.0 * len(panels)), layout="constrained")
        _draw_chain(fig, run, chain, panels)
        path = out_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", chain) + ".png")
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


def _draw_chain(fig, run: BenchRun, chain: str, panels: list) -> None:
    every = [CODA, *_baseline_names(run)]  # a candidate's colour is its place here, in every chart
    names = [n for n in every if any(c.candidate(n) for cases in panels for c in cases)]
    width = 0.8 / max(len(names), 1)
    handles: dict = {}  # legend label -> artist, one each
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, cases in zip(axes, panels, strict=True):
        for i, case in enumerate(cases):
            for j, name in enumerate(names):
                x = i + (j - (len(names) - 1) / 2) * width
                cand = case.candidate(name)
                if cand is None:
                    continue
                if cand.stats is None:
                    ax.text(x, 0, "n/a", rotation=90, ha="center", va="bottom", fontsize=7)
                    continue
                s = cand.stats
                err = [[s.median_ms - s.p20_ms], [s.p80_ms - s.median_ms]]
                color = f"C{every.index(name)}"
                handles[name] = ax.bar(x, s.median_ms, width, yerr=err, capsize=3, color=color)
                if s.clock_mhz is not None:  # the sustained ruler: the clock the streams held
                    ax.text(x, s.p80_ms, f"{s.clock_mhz:.0f}", ha="center", va="bottom", fontsize=6)
            if case.sol_ms:
                line = ax.hlines(case.sol_ms, i - 0.45, i + 0.45, colors="black", linestyles="--")
                handles[f"SoL ({case.sol_kind})"] = line
        ax.set_xticks(range(len(cases)), [c.direction for c in cases])
        config = f"  [{cases[0].config}]" if cases[0].config else ""
        ax.set_title(_dims(cases[0].dims) + config, fontsize=9)
        ax.set_ylabel("median ms (p20-p80)")
        ax.set_ylim(bottom=0)
    axes[0].legend(list(handles.values()), list(handles), fontsize=8, loc="upper left")
    fig.suptitle(f"{chain} - {run.device.name} - {run.date} - {run.ruler} ruler")
