"""How ``coda bench`` and ``coda tune`` time: two rulers, interleaved rounds, median and p20/p80.

**The sustained ruler (the default).** A training step runs its GEMMs back to back at the
board's power cap (700 W on the H200), and there the SM clock depends on the mix: the more of the
step is tensor-core work, the lower the clock. DESIGN.md section 7 has the numbers (H200,
2026-12-03): coda's glue-free 1B step held 1485 MHz, torch.compile's 1650, eager's 1770, each at
689-692 W; isolated samples ranked 22 tile configs within 2% of each other, while streamed at the
cap they spread from 599 to 685 TFLOP/s. So a candidate is timed the way the step runs it:

* **Warm-up, then calibration.** ``warmup`` untimed calls (module load, compile, autotuning; the
  first call's wall time is returned), then batches of 1, 2, 4, ... calls timed with CUDA events
  until one lasts ``CALIBRATE_MS``: the calls per millisecond the first stream is sized from.
* **A stream per sample.** ``ceil(settle_s / t)`` untimed calls (the lead-in, a fifth of the
  stream and at most ``SETTLE_S``: the clock governor and the board's power reading follow the
  new load), then ``n = ceil(sustain_s / t)`` calls
  between two CUDA events, back to back, no flush (a step does not flush either); the sample is
  the stream's time / ``n``. ``t`` is the time per call of the candidate's previous stream (the
  calibration for the first), so every stream after the first is sized at the rate it ran at;
  ``n`` is at most ``MAX_CALLS``. Each stream is waited for before the next starts, so the
  telemetry of the interval is this candidate's alone.
* **Telemetry.** A :class:`Sampler` reads the SM clock (MHz) and the board power (W) while the
  stream runs; samples in the lead-in are dropped. Per candidate, over every round: the median
  clock and the mean power; energy per call (J) is mean power x median time per call
  (``model.derived``), where the board reports power. Sources: NVML through ``pynvml`` where it
  imports (:func:`nvml_sampler`), else ``nvidia-smi -lms 50`` (:class:`SmiSampler`), else none
  (:class:`NullSampler`: clocks and power are reported as unknown, never guessed).

**The isolated ruler** (``--isolated``, unchanged): one call per sample, each after an L2 flush
(a 256 MiB write: the H200's L2 is 50 MiB) outside the timed region, CUDA events around the call,
resolved once per round. It measures a kernel alone at whatever clock a lone kernel gets.

Both rulers:

* **Interleaved rounds.** A round times each candidate once; round ``r`` starts at candidate
  ``r mod n`` and goes round the list, so slow drift (clocks, temperature, a neighbour on the
  host) lands on every candidate alike and no candidate always runs right after another.
* **Device time.** CUDA events: the host launch cost is inside when the GPU waits for it (a chain
  of many small launches), not when the GPU is busy.
* **Statistics.** Median with the 20th and 80th percentiles (linear interpolation between order
  statistics, numpy's default), over ``rounds`` samples per candidate.
* **A candidate that fails its warm-up** is left out of the rounds and reported with its error.

A :class:`Clock` and a :class:`Sampler` are the only things that touch the GPU; tests drive
:func:`time_interleaved` and :func:`time_sustained` with fakes (a clock that advances a simulated
device time per call, a sampler whose samples are scripted), so stream lengths, the per-call
division, rounds, ordering and statistics are checked without a GPU.
"""

from __future__ import annotations

import math
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Protocol

from coda_spec.bench.model import Stats

FLUSH_BYTES = 256 * 1024 * 1024
SUSTAINED, ISOLATED = "sustained", "isolated"  # the rulers (``--isolated`` picks the second)
SUSTAIN_S = 0.5  # seconds of back-to-back calls per sample (``--sustain-s``)
SETTLE_S = 0.1  # the untimed lead-in of every stream, and the telemetry dropped with it
SUSTAINED_ROUNDS = 3  # a sample is already a 0.5-s mean: few rounds suffice
CALIBRATE_MS = 20.0  # a calibration batch this long sizes the first stream
MAX_CALLS = 100_000  # calls per stream at most (a 5-us launch-bound call: 0.5 s)
SMI_PERIOD_MS = 50  # nvidia-smi -lms
POLL_S = 0.02  # NVML polling period

# One telemetry sample: (seconds since the sampler's start, SM clock MHz, board power W); a
# reading the board does not give is None.
Sample = tuple[float, float | None, float | None]


class Clock(Protocol):
    def flush(self) -> None: ...

    def start(self) -> object: ...

    def stop(self, mark: object) -> object: ...

    def resolve(self, marks: list) -> list[float]:
        """Milliseconds of each (start, stop) pair, after whatever waiting that needs."""
        ...


class CudaClock:
    """CUDA events around each call, and an L2 flush before it."""

    def __init__(self, device=None):
        import torch

        self._torch = torch
        self._flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device or "cuda")

    def flush(self) -> None:
        self._flush.zero_()

    def start(self):
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def stop(self, mark):
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return (mark, ev)

    def resolve(self, marks: list) -> list[float]:
        self._torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in marks]


class Sampler(Protocol):
    """Reads the SM clock and the board power while a stream runs."""

    source: str  # what reads them, for the report ("" when nothing does)

    def start(self) -> None:
        """Forget earlier samples; times are counted from now."""
        ...

    def stop(self) -> list[Sample]:
        """The samples since :meth:`start`."""
        ...

    def close(self) -> None: ...


class NullSampler:
    """No telemetry source: clocks and power are reported as unknown."""

    source = ""

    def start(self) -> None:
        pass

    def stop(self) -> list[Sample]:
        return []

    def close(self) -> None:
        pass


class _Recorder:
    """Samples appended by a background thread, read between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._samples: list[Sample] = []
        self._done = threading.Event()

    def add(self, mhz: float | None, watts: float | None) -> None:
        with self._lock:
            self._samples.append((time.perf_counter() - self._t0, mhz, watts))

    def start(self) -> None:
        with self._lock:
            self._t0 = time.perf_counter()
            self._samples = []

    def stop(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)


class PollingSampler(_Recorder):
    """``read() -> (MHz, W)`` called every ``period_s`` on a daemon thread (NVML's way)."""

    def __init__(self, read: Callable[[], tuple], source: str, period_s: float = POLL_S):
        super().__init__()
        self.source = source
        self._read = read
        self._period = period_s
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.wait(self._period):
            try:
                self.add(*self._read())
            except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a crash
                continue

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=1.0)


def nvml_sampler(device_index: int = 0, uuid: str = "") -> PollingSampler | None:
    """NVML through ``pynvml``, or None where it does not import or start. Power: the
    instantaneous field where the driver has it (the plain reading is a trailing average over up
    to a second, which blurs one candidate into the next), else the plain reading."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else None
        except pynvml.NVMLError:
            handle = None
        handle = handle or pynvml.nvmlDeviceGetHandleByIndex(device_index)
        field = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)

        def instant():
            (v,) = pynvml.nvmlDeviceGetFieldValues(handle, [field])
            if v.nvmlReturn != pynvml.NVML_SUCCESS:
                raise RuntimeError("no instantaneous power")
            return v.value.uiVal / 1000.0

        def average():
            return pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0

        power, what = average, "power average"
        if field is not None:
            try:
                instant()
                power, what = instant, "power instant"
            except Exception:  # noqa: BLE001 - an older driver: the average it is
                pass
        try:
            power()
        except pynvml.NVMLError:
            power, what = (lambda: None), "no power reading"

        def read():
            return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), power()

        read()
        return PollingSampler(read, f"NVML ({what}, every {POLL_S * 1000:g} ms)")
    except Exception:  # noqa: BLE001 - no pynvml, no driver library: try nvidia-smi
        return None


def parse_smi_line(line: str) -> tuple[float | None, float | None] | None:
    """``"1485, 689.12"`` -> (1485.0, 689.12); ``[N/A]`` / ``[Not Supported]`` -> None in its
    place; a line that is not two fields (a header, an error) -> None."""
    parts = [x.strip() for x in line.split(",")]
    if len(parts) != 2:
        return None

    def num(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None

    mhz, watts = num(parts[0]), num(parts[1])
    if mhz is None and watts is None:
        return None
    return mhz, watts


class SmiSampler(_Recorder):
    """One ``nvidia-smi --query-gpu=clocks.sm,<power> -lms 50`` for the whole run, its lines read
    on a daemon thread (starting nvidia-smi per stream would cost a few hundred ms each)."""

    def __init__(self, argv: list[str], source: str):
        super().__init__()
        self.source = source
        self._proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
        )
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        for line in self._proc.stdout:
            got = parse_smi_line(line)
            if got is not None:
                self.add(*got)

    def close(self) -> None:
        self._done.set()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._thread.join(timeout=1.0)


def smi_argv(power: str, gpu: str = "", period_ms: int = SMI_PERIOD_MS) -> list[str]:
    where = [f"--id={gpu}"] if gpu else []
    query = f"--query-gpu=clocks.sm,{power}"
    return ["nvidia-smi", *where, query, "--format=csv,noheader,nounits", f"--loop-ms={period_ms}"]


def smi_sampler(gpus: tuple[str, ...] = ("",)) -> SmiSampler | None:
    """``nvidia-smi`` sampling of the first of ``gpus`` (``--id`` values: a ``GPU-<uuid>``, an
    index; "" none) that answers, or None where it is not on PATH or none does. Power:
    ``power.draw.instant`` where the driver knows the field, else ``power.draw``."""
    if not shutil.which("nvidia-smi"):
        return None
    for gpu in gpus:
        for power in ("power.draw.instant", "power.draw"):
            argv = smi_argv(power, gpu)
            once = [a for a in argv if not a.startswith("--loop-ms")]
            try:
                res = subprocess.run(once, capture_output=True, text=True, timeout=10, check=False)
            except (OSError, subprocess.SubprocessError):
                return None
            lines = res.stdout.splitlines()
            if res.returncode == 0 and len(lines) == 1 and parse_smi_line(lines[0]):
                return SmiSampler(argv, f"nvidia-smi ({power}, every {SMI_PERIOD_MS} ms)")
    return None


def open_sampler(device_index: int = 0, uuid: str = ""):
    """The first telemetry source that works here: NVML, nvidia-smi, else :class:`NullSampler`.
    ``uuid``: the device's (``GPU-...``), so a process shown a subset of GPUs reads its own (the
    index is the fallback: torch's and nvidia-smi's agree without ``CUDA_VISIBLE_DEVICES``)."""
    ids = tuple(x for x in (uuid, str(device_index)) if x)
    return nvml_sampler(device_index, uuid) or smi_sampler(ids) or NullSampler()


def percentile(sorted_xs: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, linear between order statistics."""
    if not sorted_xs:
        raise ValueError("no samples")
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples: list[float]) -> Stats:
    xs = sorted(samples)
    return Stats(percentile(xs, 50), percentile(xs, 20), percentile(xs, 80), len(xs))


def order(names: list[str], round_index: int) -> list[str]:
    """The candidates in the order round ``round_index`` times them (a rotation)."""
    k = round_index % len(names) if names else 0
    return names[k:] + names[:k]


def _why(e: Exception) -> str:
    """A failed candidate's note: the exception's type and first line."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _warm(
    candidates: dict[str, Callable[[], object]], warmup: int, sync: Callable[[], None]
) -> tuple[dict[str, str], dict[str, float]]:
    """Every candidate's warm-up calls: ``(failed, first_call_s)``."""
    failed: dict[str, str] = {}
    first: dict[str, float] = {}
    for name, fn in candidates.items():
        try:
            for i in range(max(warmup, 1)):
                t0 = time.perf_counter()
                fn()
                if i == 0:
                    sync()
                    first[name] = time.perf_counter() - t0
            sync()
        except Exception as e:  # noqa: BLE001 - a failing candidate is reported, not fatal
            failed[name] = _why(e)
    return failed, first


def _say_round(progress, r: int, rounds: int) -> None:
    if progress is not None and ((r + 1) % max(rounds // 3, 1) == 0 or r + 1 == rounds):
        progress(f"round {r + 1}/{rounds}")


def time_interleaved(
    candidates: dict[str, Callable[[], object]],
    clock: Clock,
    rounds: int,
    warmup: int = 2,
    progress: Callable[[str], None] | None = None,
    sync: Callable[[], None] | None = None,
) -> tuple[dict[str, Stats], dict[str, str], dict[str, float]]:
    """The isolated ruler: every candidate timed in interleaved rounds, one call per sample,
    each after an L2 flush.

    Returns ``(stats, failed, first_call_s)``: a candidate that raises during warm-up is left
    out of the rounds and reported in ``failed`` with its error (one broken baseline never stops
    a bench); ``first_call_s`` is each candidate's first call, wall clock, synchronized (it holds
    torch.compile's compile time)."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    sync = sync or (lambda: clock.resolve([]))
    failed, first = _warm(candidates, warmup, sync)
    names = [n for n in candidates if n not in failed]
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds if names else 0):
        marks, who = [], []
        for name in order(names, r):
            clock.flush()
            mark = clock.start()
            candidates[name]()
            marks.append(clock.stop(mark))
            who.append(name)
        for name, ms in zip(who, clock.resolve(marks), strict=True):
            samples[name].append(ms)
        _say_round(progress, r, rounds)
    return {n: summarize(s) for n, s in samples.items()}, failed, first


def _batch(fn: Callable[[], object], clock: Clock, calls: int, lead: int = 0) -> float:
    """``lead`` untimed calls, then ``calls`` calls between two events; the events' ms, waited
    for (so the next batch starts on an idle device)."""
    for _ in range(lead):
        fn()
    mark = clock.start()
    for _ in range(calls):
        fn()
    (ms,) = clock.resolve([clock.stop(mark)])
    return ms


def calibrate(fn: Callable[[], object], clock: Clock, target_ms: float | None = None) -> float:
    """Milliseconds per call: batches of 1, 2, 4, ... calls until one lasts ``target_ms``
    (default ``CALIBRATE_MS``) or holds ``MAX_CALLS``."""
    target_ms = CALIBRATE_MS if target_ms is None else target_ms
    calls = 1
    while True:
        ms = _batch(fn, clock, calls)
        if ms >= target_ms or calls >= MAX_CALLS:
            return ms / calls
        calls = min(calls * 2, MAX_CALLS)


def stream_calls(ms_per_call: float, seconds: float) -> int:
    """Calls that fill ``seconds`` at ``ms_per_call`` (at least 1, at most ``MAX_CALLS``)."""
    if seconds <= 0:
        return 0
    if not ms_per_call > 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, math.ceil(seconds * 1000.0 / ms_per_call)))


def telemetry(samples: list[Sample], settle_s: float = SETTLE_S) -> tuple:
    """(median SM clock MHz, mean board power W) of the samples after the lead-in (all of them
    if none is later); None for a reading no sample has."""
    later = [x for x in samples if x[0] >= settle_s] or list(samples)
    mhz = [x[1] for x in later if x[1] is not None]
    watts = [x[2] for x in later if x[2] is not None]
    return (
        statistics.median(mhz) if mhz else None,
        statistics.fmean(watts) if watts else None,
    )


def time_sustained(
    candidates: dict[str, Callable[[], object]],
    clock: Clock,
    sampler: Sampler,
    rounds: int,
    warmup: int = 2,
    sustain_s: float = SUSTAIN_S,
    settle_s: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Stats], dict[str, str], dict[str, float]]:
    """The sustained ruler: every candidate timed in interleaved rounds, one stream of
    ``sustain_s`` seconds of back-to-back calls per sample (the module docstring), after a
    lead-in of ``settle_s`` (default: a fifth of the stream, at most ``SETTLE_S``). Returns
    what :func:`time_interleaved` does; each :class:`Stats` also holds the candidate's median SM
    clock, mean power and the calls its streams timed."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    if not sustain_s > 0:
        raise ValueError(f"sustain_s must be > 0 seconds, not {sustain_s!r}")
    settle_s = min(SETTLE_S, sustain_s / 5) if settle_s is None else settle_s
    failed, first = _warm(candidates, warmup, lambda: clock.resolve([]))
    names = [n for n in candidates if n not in failed]
    per_call: dict[str, float] = {}
    for name in names:
        try:
            per_call[name] = calibrate(candidates[name], clock)
        except Exception as e:  # noqa: BLE001 - as in warm-up
            failed[name] = _why(e)
    names = [n for n in names if n not in failed]
    samples: dict[str, list[float]] = {n: [] for n in names}
    seen: dict[str, list[Sample]] = {n: [] for n in names}
    calls: dict[str, int] = {n: 0 for n in names}
    for r in range(rounds if names else 0):
        for name in order(names, r):
            n = stream_calls(per_call[name], sustain_s)
            lead = stream_calls(per_call[name], settle_s)
            sampler.start()
            ms = _batch(candidates[name], clock, n, lead)
            seen[name] += sampler.stop()
            per_call[name] = ms / n
            samples[name].append(ms / n)
            calls[name] += n
        _say_round(progress, r, rounds)
    stats = {}
    for n in names:
        mhz, watts = telemetry(seen[n], settle_s)
        base = summarize(samples[n])
        stats[n] = Stats(base.median_ms, base.p20_ms, base.p80_ms, base.n, mhz, watts, calls[n])
    return stats, failed, first


def time_with(
    ruler: str,
    candidates: dict[str, Callable[[], object]],
    clock: Clock,
    sampler: Sampler | None,
    rounds: int,
    warmup: int = 2,
    sustain_s: float = SUSTAIN_S,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Stats], dict[str, str], dict[str, float]]:
    """:func:`time_sustained` or :func:`time_interleaved`, as ``ruler`` says."""
    if ruler == ISOLATED:
        return time_interleaved(candidates, clock, rounds, warmup, progress)
    if ruler != SUSTAINED:
        raise ValueError(f"ruler {ruler!r}: expected {SUSTAINED!r} or {ISOLATED!r}")
    return time_sustained(
        candidates, clock, sampler or NullSampler(), rounds, warmup, sustain_s, progress=progress
    )
