"""How ``coda bench`` times: interleaved rounds, a cold L2 before every sample, median and p20/p80.

Method (docs/benchmarks.md shows it applied):

* **Warm-up outside the timing.** Every candidate runs ``warmup`` times first (module load,
  cuBLAS handle creation, torch.compile's compile and autotuning happen there; the first call's
  wall time is returned so the report can show compile cost separately).
* **Interleaved rounds.** A round times each candidate once; round ``r`` starts at candidate
  ``r mod n`` and goes round the list, so slow drift (clocks, temperature, a neighbour on the
  host) lands on every candidate alike and no candidate always runs right after another.
* **Cold caches.** Before every sample the clock flushes the L2 (a 256 MiB write: the H200's L2 is
  50 MiB), so no candidate wins by finding its inputs cached by the previous one. The flush runs
  outside the timed region.
* **Device time.** A sample is the time between two CUDA events recorded around one call: the
  host launch cost is inside when the GPU waits for it (a chain of many small launches), not
  when the GPU is busy. Events are resolved once per round (one synchronize per round).
* **Statistics.** Median with the 20th and 80th percentiles (linear interpolation between order
  statistics, numpy's default), over ``rounds`` samples per candidate.

A :class:`Clock` is the only thing that touches the GPU; tests drive :func:`time_interleaved`
with a fake clock whose samples are scripted, so rounds, ordering and statistics are checked
without a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from coda_spec.bench.model import Stats

FLUSH_BYTES = 256 * 1024 * 1024


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


def time_interleaved(
    candidates: dict[str, Callable[[], object]],
    clock: Clock,
    rounds: int,
    warmup: int = 2,
    progress: Callable[[str], None] | None = None,
    sync: Callable[[], None] | None = None,
) -> tuple[dict[str, Stats], dict[str, str], dict[str, float]]:
    """Time every candidate in interleaved rounds.

    Returns ``(stats, failed, first_call_s)``: a candidate that raises during warm-up is left
    out of the rounds and reported in ``failed`` with its error (one broken baseline never stops
    a bench); ``first_call_s`` is each candidate's first call, wall clock, synchronized (it holds
    torch.compile's compile time)."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    sync = sync or (lambda: clock.resolve([]))
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
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
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
        if progress is not None and ((r + 1) % max(rounds // 3, 1) == 0 or r + 1 == rounds):
            progress(f"round {r + 1}/{rounds}")
    return {n: summarize(s) for n, s in samples.items()}, failed, first
