"""The values a bench run produces, and their JSON form (the one file charts and comparisons read).

A run is a list of :class:`Case`: one chain at one set of dims in one direction (``fwd``; and for
a spec with a ``backward:`` section also ``bwd`` and ``fwd+bwd``). A case holds every candidate
timed in it (coda first, then the baselines) and each coda kernel alone next to its own GEMM.

Derived figures (TFLOP/s, GB/s, percent of the measured peaks, coda / SoL, speedups, joules per
call) are never
stored on the values: :func:`derived` computes them from the measured times, the case's work
(``flops``, ``bytes``) and the device's measured peaks, so JSON written by one version and read
by another cannot disagree with itself. ``to_json`` writes them next to the measurements for
readers that do not use this package.

Units: times in milliseconds, ``flops`` in floating-point operations, ``bytes`` in bytes,
``peak_tflops`` in TFLOP/s, ``copy_gbps`` in GB/s (1e9 bytes per second, read + written).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

FORMAT = 1
SOL_SLACK = 1.05  # a case whose coda time is above this multiple of its SoL is flagged
CODA = "coda"
BASELINES = ("eager", "compile", "liger")  # every baseline name a run may hold, in table order


@dataclass(frozen=True)
class Stats:
    """Summary of one candidate's samples (ms): median with the 20th and 80th percentiles.

    The sustained ruler (``coda_spec.bench.timing``) adds what the board reported while the
    candidate's streams ran: the median SM clock (MHz) and the mean board power (W), None where
    no source reads them, and ``calls``, the calls its streams timed (every round together; 0
    for the isolated ruler). Energy per call is derived (:func:`derived`), not stored."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    n: int
    clock_mhz: float | None = None
    watts: float | None = None
    calls: int = 0


@dataclass(frozen=True)
class Timed:
    """One candidate of a case. ``stats`` is None when it could not run; ``note`` says why, or
    what the candidate leaves out / how it was made (``equivalent_to fallback``). ``complete``:
    it produces every output coda does (a baseline that does less is shown, never "best")."""

    name: str
    stats: Stats | None
    note: str = ""
    complete: bool = True


@dataclass(frozen=True)
class KernelTimed:
    """One coda kernel launched alone, and the cuBLAS GEMM of the same operands."""

    name: str
    coda: Stats | None
    sol: Stats | None
    flops: float
    bytes: float
    note: str = ""


@dataclass(frozen=True)
class Case:
    """One chain, one set of dims, one direction.

    ``sol_kind``: ``gemm`` (SoL = the chain's GEMMs through cuBLAS, measured), ``memory`` (a
    chain without GEMMs: SoL = ``bytes`` / the measured copy bandwidth) or ``gemm+memory`` (the
    GEMMs measured plus the host steps' own bytes at the copy bandwidth). ``sol`` holds the
    measured GEMM time where there is one; ``sol_ms`` the total speed of light."""

    chain: str
    dims: dict
    direction: str
    sol_kind: str
    flops: float
    bytes: float
    sol_ms: float
    candidates: tuple = ()  # Timed, coda first
    kernels: tuple = ()  # KernelTimed
    sol: Stats | None = None
    notes: tuple = ()
    config: str = ""  # the build's tile config, in --config syntax ("" for host-only chains)

    def candidate(self, name: str) -> Timed | None:
        return next((c for c in self.candidates if c.name == name), None)

    @property
    def key(self) -> tuple:
        """What a comparison matches on: the same chain, dims and direction, whatever the
        config (comparing configs is what a tuned-vs-untuned comparison is for)."""
        return (self.chain, dims_text(self.dims), self.direction)


@dataclass(frozen=True)
class Device:
    name: str
    capability: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    sms: int = 0
    peak_tflops: float = 0.0  # a large bf16 torch.mm, measured at the start of the run
    copy_gbps: float = 0.0  # a large device-to-device copy, bytes read + written per second


@dataclass(frozen=True)
class BenchRun:
    date: str
    command: str
    device: Device
    rounds: int
    cases: tuple = ()
    flush: str = "l2"  # how warm caches are defeated: "l2" (a 256 MiB write before each sample)
    notes: tuple = ()
    format: int = FORMAT
    # "sustained": each sample a stream of sustain_s seconds at the power cap, no flush (flush
    # "none"); "isolated": one call per sample after an L2 flush (runs before the sustained
    # ruler are read as isolated). telemetry: what read the clocks and power ("" none).
    ruler: str = "isolated"
    sustain_s: float = 0.0
    telemetry: str = ""


def dims_text(dims: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


# -- derived figures ---------------------------------------------------------------------------
def derived(case: Case, device: Device, stats: Stats | None) -> dict:
    """Figures for one timing of ``case``'s work (a candidate, or the SoL). ``j_per_call``:
    mean board power x median time per call, where the ruler read the power."""
    if stats is None or not stats.median_ms > 0:
        return {}
    ms = stats.median_ms
    out = {
        "tflops": case.flops / ms / 1e9 if case.flops else None,
        "gbps": case.bytes / ms / 1e6 if case.bytes else None,
        "x_sol": ms / case.sol_ms if case.sol_ms else None,
        "j_per_call": joules(stats),
    }
    out["pct_peak_flops"] = (
        100 * out["tflops"] / device.peak_tflops if out["tflops"] and device.peak_tflops else None
    )
    out["pct_peak_bw"] = (
        100 * out["gbps"] / device.copy_gbps if out["gbps"] and device.copy_gbps else None
    )
    return out


def joules(stats: Stats | None) -> float | None:
    """Energy per call (J): mean power (W) x median time per call; None without a power reading."""
    if stats is None or stats.watts is None or not stats.median_ms > 0:
        return None
    return stats.watts * stats.median_ms / 1000.0


def kernel_case(case: Case, k: KernelTimed) -> Case:
    """``k``'s own work as a case, its cuBLAS GEMM as the SoL (for :func:`derived`)."""
    return Case(
        chain=case.chain,
        dims=case.dims,
        direction=case.direction,
        sol_kind="gemm" if k.flops else "memory",
        flops=k.flops,
        bytes=k.bytes,
        sol_ms=k.sol.median_ms if k.sol is not None else 0.0,
    )


def sol_stats(case: Case) -> Stats | None:
    """The whole speed of light as a (point) timing, so :func:`derived` can describe it."""
    return Stats(case.sol_ms, case.sol_ms, case.sol_ms, 0) if case.sol_ms > 0 else None


def pct_peak(case: Case, figures: dict) -> float | None:
    """Percent of the peak that bounds the case: bandwidth for memory chains, else flops."""
    return figures.get("pct_peak_bw" if case.sol_kind == "memory" else "pct_peak_flops")


def speedups(case: Case) -> dict:
    """coda's speedup over each baseline that ran: baseline median / coda median (> 1: faster)."""
    coda = case.candidate(CODA)
    if coda is None or coda.stats is None:
        return {}
    out = {}
    for c in case.candidates:
        if c.name != CODA and c.stats is not None:
            out[c.name] = c.stats.median_ms / coda.stats.median_ms
    return out


def best_baseline(case: Case) -> Timed | None:
    """The fastest baseline that ran and produces every output coda does (the one to beat)."""
    ran = [c for c in case.candidates if c.name != CODA and c.stats is not None and c.complete]
    return min(ran, key=lambda c: c.stats.median_ms, default=None)


def flagged(case: Case, device: Device) -> bool:
    """coda did not run, lost to its best baseline, or ran above ``SOL_SLACK`` x SoL."""
    coda = case.candidate(CODA)
    if coda is None or coda.stats is None:
        return True
    best = best_baseline(case)
    if best is not None and best.stats.median_ms < coda.stats.median_ms:
        return True
    x_sol = derived(case, device, coda.stats).get("x_sol")
    return x_sol is not None and x_sol > SOL_SLACK


# -- JSON ----------------------------------------------------------------------------------------
def to_json(run: BenchRun) -> dict:
    data = asdict(run)
    for case, out in zip(run.cases, data["cases"], strict=True):
        out["derived"] = {
            "sol": derived(case, run.device, sol_stats(case)),
            **{c.name: derived(case, run.device, c.stats) for c in case.candidates},
        }
        for k, kd in zip(case.kernels, out["kernels"], strict=True):
            kd["derived"] = derived(kernel_case(case, k), run.device, k.coda)
        out["speedup"] = speedups(case)
        best = best_baseline(case)
        out["best_baseline"] = best.name if best is not None else None
        out["flagged"] = flagged(case, run.device)
    return data


def dumps(run: BenchRun) -> str:
    return json.dumps(to_json(run), indent=1) + "\n"


def _stats(d) -> Stats | None:
    return None if d is None else Stats(**d)


def from_json(data: dict) -> BenchRun:
    """Read a run back (``derived`` and ``speedup`` are recomputed, not read)."""
    if data.get("format") != FORMAT:
        raise ValueError(
            f"bench results format {data.get('format')!r}; this coda reads format {FORMAT}"
        )
    cases = []
    for c in data["cases"]:
        cases.append(
            Case(
                chain=c["chain"],
                dims=dict(c["dims"]),
                direction=c["direction"],
                sol_kind=c["sol_kind"],
                flops=c["flops"],
                bytes=c["bytes"],
                sol_ms=c["sol_ms"],
                candidates=tuple(
                    Timed(t["name"], _stats(t["stats"]), t.get("note", ""), t.get("complete", True))
                    for t in c["candidates"]
                ),
                kernels=tuple(
                    KernelTimed(
                        k["name"],
                        _stats(k["coda"]),
                        _stats(k["sol"]),
                        k["flops"],
                        k["bytes"],
                        k.get("note", ""),
                    )
                    for k in c["kernels"]
                ),
                sol=_stats(c.get("sol")),
                notes=tuple(c.get("notes", ())),
                config=c.get("config", ""),
            )
        )
    return BenchRun(
        date=data["date"],
        command=data["command"],
        device=Device(**data["device"]),
        rounds=data["rounds"],
        cases=tuple(cases),
        flush=data.get("flush", "l2"),
        notes=tuple(data.get("notes", ())),
        ruler=data.get("ruler", "isolated"),
        sustain_s=data.get("sustain_s", 0.0),
        telemetry=data.get("telemetry", ""),
    )


def loads(text: str) -> BenchRun:
    return from_json(json.loads(text))


def merge(runs: list[BenchRun]) -> BenchRun:
    """Several runs of one device as one (e.g. one device call per width): the cases in order,
    the first run's date and device, every command and note. Each run measured the peaks
    again; the merged run keeps the highest (so its percent of peak is never flattering).
    Refuses runs of other devices, and runs of two rulers (their times are not comparable)."""
    if not runs:
        raise ValueError("nothing to merge")
    first = runs[0]
    other = [r.device.name for r in runs if r.device.name != first.device.name]
    if other:
        raise ValueError(
            f"cannot merge runs of different devices ({first.device.name!r} and {other[0]!r})"
        )
    rulers = sorted({r.ruler for r in runs})
    if len(rulers) > 1:
        raise ValueError(f"cannot merge runs of different rulers ({' and '.join(rulers)})")
    return BenchRun(
        date=first.date,
        command=" ; ".join(r.command for r in runs),
        device=Device(
            **{
                **asdict(first.device),
                "peak_tflops": max(r.device.peak_tflops for r in runs),
                "copy_gbps": max(r.device.copy_gbps for r in runs),
            }
        ),
        rounds=min(r.rounds for r in runs),
        cases=tuple(c for r in runs for c in r.cases),
        flush=first.flush,
        notes=tuple(n for r in runs for n in r.notes),
        ruler=first.ruler,
        sustain_s=first.sustain_s,
        telemetry=first.telemetry,
    )
