"""``coda tune``: measure which tile-config variant of each kernel is fastest, per shape, and
keep the pick in a tune file the runtime reads (docs/tuning.md).

The dims rules (``plan``, ``at_dims``) are ``coda_spec.bench.driver``'s, the timing method
``coda_spec.bench.timing``'s, the variant a chain is forced to ``Chain.with_variants``; the tune
file's reader is ``coda_spec.artifact.tune_table`` (the runtime reads tables through it, never
through this module). Where this sits: docs/architecture.md, Layers.

Why: a format-4 build compiles each kernel at several candidate configs (``coda build --config
A;B;C`` or ``auto``), and no single config wins everywhere (docs/benchmarks.md). The build
cannot know which is fastest -- it has no GPU -- so the choice is measured once on the GPU and
recorded next to the code, where it survives rebuilds of the same spec (same content hash) and
can be checked in.

Method (the one ``coda bench`` uses, ``coda_spec.bench.timing``): per build, per shape (``--m``,
``--dims``, ``--width``, the bench rules), the chain runs once on drawn inputs to produce every
tensor; then each kernel step with more than one variant is timed with the finalizes that fold
its partials (:func:`timed_steps`; ``Chain.steps_fn`` of a chain forced to that variant,
``Chain.with_variants``): every variant of that kernel in the same interleaved rounds, warm-up
outside the timing, by one of two rulers:

* **sustained** (the default): each sample a stream of ``--sustain-s`` (0.5) seconds of
  back-to-back calls, as a training step runs its GEMMs: at the board's power cap, where the SM
  clock a config holds depends on its tiles (DESIGN.md section 7: on the H200, 2026-12-03, 22
  configs within 2% of each other in isolation spread from 599 to 685 TFLOP/s streamed, the
  then-untuned 128x128 pingpong at 1410 MHz against 1515 for wide cooperative tiles). The pick
  is by time per call: at the cap that already holds the clock a config costs, so a faster
  variant is the one that spends fewer joules per call. The SM clock, board power and J/call of
  every variant are recorded beside its time (``clock_mhz``, ``watts``, ``joules``); ``--rounds``
  default 3;
* **isolated** (``--isolated``): one call per sample after an L2 flush; ``--rounds`` default 30.

The pick (:func:`pick_winner`, the one place the rule lives): a variant other than the
fallback wins only if its median is at least ``--margin`` (default 3%) below the fallback's and its
p80 is below the fallback's median; of those, the smallest median; none: the fallback stays. The
fallback did not run: the smallest median. Kernels with one variant need no timing and get no
entry.

Tune file (JSON, ``FORMAT`` = 1; the values are rmsnorm_chain's out_proj as tuned on the H200,
2026-12-01 with the isolated ruler, benchmarks/results/h200-2026-12-01-tune/)::

    {"format": 1,
     "builds": {
       "<name>-<hash>": {                  # the build directory's name (not -latest)
         "spec": "rmsnorm_chain", "gpu": "NVIDIA H200", "driver": "580.159.04",
         "date": "2026-12-01 04:03 UTC", "command": "coda tune ...",
         "kernels": {
           "out_proj": [{"dims": {"D": 4096, "F": 11008},   # the static dims it was tuned at
                       "m_max": 16384,                     # the dynamic dim (M) it was tuned at
                       "config": "128x128,cluster=2x1,pingpong",   # the winner
                       "ms": 0.80,                                   # its median
                       "margin": 0.03, "rounds": 30,       # the pick's margin, samples each
                       "candidates": {"<config>": ms, ...},        # every variant timed: median
                       "spread": {"<config>": [p20, p80], ...}}]}}}}   # and its p20/p80

``margin``, ``rounds`` and ``spread`` are optional: ``coda tune`` writes them since the margin
rule (shown here at their defaults); older files, the 2026-12-01 one included, lack them and are
read as before. A variant that could not run has ``null`` in ``candidates`` and ``spread``.
Since the sustained ruler an entry also has ``"ruler"`` (``sustained`` or ``isolated``; absent:
isolated) and, for the sustained ruler, ``"clock_mhz"``, ``"watts"`` and ``"joules"`` (J per
call), each ``{"<config>": number or null}`` (null: not read, or the variant did not run).

The runtime rule (``coda_spec.runtime``): for each kernel step, an entry applies when its
``dims`` equal the chain's static dims and its ``config`` names one of the step's variants; of
those, the one with the smallest ``m_max >= M`` wins, else the one with the largest ``m_max``;
no entry: ``variants[0]`` (the build's fallback). A build entry whose ``gpu`` is not this GPU's
name is not used (a warning names both). Several files (a directory, ``$CODA_TUNED``, or
``./tuned/*.json``): read in sorted order; per kernel, the first file with entries for this
build and GPU wins.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from coda_spec.artifact.tune_table import DEFAULT_DIR, FORMAT, check_margin, read_file, validate
from coda_spec.bench.command import (
    build_dirs,
    check_ruler,
    command_line,
    options,
    timing_targets,
)
from coda_spec.bench.model import joules
from coda_spec.bench.timing import ISOLATED, SUSTAINED, CudaClock, NullSampler, open_sampler
from coda_spec.config import config_text
from coda_spec.dims import dynamic_dim
from coda_spec.errors import EXIT_NO_GPU, EXIT_OK, EXIT_TOOL_FAILURE, ToolError

DEFAULT_MARGIN = 0.03  # a variant must beat the fallback's median by 3% (pick_winner)
DEFAULT_ROUNDS = 30  # coda tune --isolated's --rounds (the sustained ruler's: 3)


# -- the pick ----------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


@dataclass(frozen=True)
class Pick:
    """What :func:`pick_winner` chose, and why. ``rule``: "won" (``winner`` cleared the margin),
    "kept" (no variant did: the fallback stays), "no-fallback" (the fallback did not run: the
    smallest median), "none" (no variant ran). ``best``: for "won" the winner, for "kept" the
    fastest other variant by median (None if no other ran); ``gain``: how much lower ``best``'s
    median is than the fallback's, as a fraction of the fallback's; ``p80_ok``: ``best``'s p80
    is below the fallback's median."""

    winner: str | None
    rule: str
    best: str | None = None
    gain: float | None = None
    p80_ok: bool = False

    def text(self, margin: float, tag=lambda name: name) -> str:
        """Why, in a few words: ``won by 12.3%``, ``fallback kept: best other v2 0.4% faster <
        3% margin``. ``tag``: how a variant is named (the table's v1, v2, ...)."""
        if self.rule == "none":
            return "every variant failed"
        if self.rule == "no-fallback":
            return "fallback did not run: smallest median"
        if self.rule == "won":
            return f"won by {_pct(self.gain)}"
        if self.best is None:
            return "fallback kept: no other variant ran"
        if self.gain <= 0:
            return f"fallback kept: fastest (best other {tag(self.best)} not faster)"
        if self.gain < margin:
            return (
                f"fallback kept: best other {tag(self.best)} {_pct(self.gain)} faster "
                f"< {margin * 100:g}% margin"
            )
        return (
            f"fallback kept: {tag(self.best)} {_pct(self.gain)} faster but its p80 is not "
            "below the fallback's median"
        )


def pick_winner(names, ms: dict, p80: dict, margin: float = DEFAULT_MARGIN) -> Pick:
    """The variant a kernel runs at one shape. ``names``: its variants, the fallback (the
    build's first config) first; ``ms``/``p80``: median and 80th percentile of each variant that
    ran (a missing p80 counts as the median).

    Rule: a variant other than the fallback may win only if its median is at least ``margin``
    (a fraction of the fallback's median) below the fallback's median AND its p80 is below the
    fallback's median; of the variants that qualify, the smallest median wins (a tie: the
    earlier in ``names``); none qualifies: the fallback. The fallback did not run: the smallest
    median of those that ran.

    Why: the fallback is what every untuned call runs and what ``coda verify`` and the benches
    have judged; replacing it should take a clear, repeatable win, not noise. On the H200
    (2026-12-01, 8 rounds, smallest median wins; docs/tuning.md) f1 at D = 2048 was decided by a
    0.2% difference in medians (between two pingpong variants, both well below the fallback)
    and the chain then ran slower than untuned: a few tenths of a percent on a 0.25-ms kernel is
    inside the run-to-run spread. The margin asks for a gap over the fallback larger than that
    noise; the p80 test asks that most samples of the challenger, not only its middle one, beat
    the fallback's typical time."""
    names = list(names)
    ran = [n for n in names if n in ms]
    if not ran:
        return Pick(None, "none")
    fastest = lambda pool: min(pool, key=lambda n: (ms[n], names.index(n)))
    fallback = names[0]
    if fallback not in ms:
        return Pick(fastest(ran), "no-fallback")
    base = ms[fallback]
    gain = lambda n: (base - ms[n]) / base if base > 0 else 0.0
    p80_ok = lambda n: p80.get(n, ms[n]) < base
    others = [n for n in ran if n != fallback]
    clear = [n for n in others if gain(n) >= margin and p80_ok(n)]
    if clear:
        w = fastest(clear)
        return Pick(w, "won", w, gain(w), True)
    if not others:
        return Pick(fallback, "kept")
    best = fastest(others)
    return Pick(fallback, "kept", best, gain(best), p80_ok(best))


# -- measuring (GPU side; imports torch and bench inside functions) -----------------------------


@dataclass(frozen=True)
class KernelTune:
    """One kernel step tuned at one shape. ``names``: its variants (config texts), fallback
    first; ``ms``: median of each variant timed; ``failed``: variant -> why it could not run;
    ``spread``: variant -> (p20, p80); ``margin``: the pick's (:func:`pick_winner`); ``rounds``:
    samples per variant; ``ruler``: how they were timed; ``stats``: variant -> its
    ``bench.model.Stats`` (the sustained ruler's clock and power in them)."""

    build: str  # the build directory's name, <name>-<hash>
    spec: str
    kernel: str
    sizes: dict  # every dim of the shape
    static: dict  # the static dims (the entry's "dims")
    m: int  # the dynamic dim (the entry's "m_max")
    names: tuple
    ms: dict
    failed: dict = field(default_factory=dict)
    spread: dict = field(default_factory=dict)
    margin: float = DEFAULT_MARGIN
    rounds: int | None = None
    ruler: str = ISOLATED
    stats: dict = field(default_factory=dict)

    @property
    def pick(self) -> Pick:
        p80 = {n: s[1] for n, s in self.spread.items()}
        return pick_winner(self.names, self.ms, p80, self.margin)

    @property
    def winner(self) -> str | None:
        return self.pick.winner

    @property
    def speedup(self) -> float | None:
        """The fallback's median over the winner's (None when the fallback did not run)."""
        base = self.ms.get(self.names[0])
        return base / self.ms[self.winner] if base and self.winner else None

    def entry(self) -> dict:
        w = self.winner
        return {
            "dims": dict(self.static),
            "m_max": self.m,
            "config": w,
            "ms": self.ms[w],
            "margin": self.margin,
            **({"rounds": self.rounds} if self.rounds else {}),
            "candidates": {n: self.ms.get(n) for n in self.names},
            "spread": {n: list(self.spread[n]) if n in self.spread else None for n in self.names},
            "ruler": self.ruler,
            **self.energy(),
        }

    def energy(self) -> dict:
        """The sustained ruler's telemetry per variant: ``clock_mhz``, ``watts`` and ``joules``
        (J per call: mean power x median time per call); {} for the isolated ruler."""
        if self.ruler != SUSTAINED:
            return {}
        st = lambda n: self.stats.get(n)  # noqa: E731
        return {
            "clock_mhz": {n: getattr(st(n), "clock_mhz", None) for n in self.names},
            "watts": {n: getattr(st(n), "watts", None) for n in self.names},
            "joules": {n: joules(st(n)) for n in self.names},
        }


@dataclass(frozen=True)
class TuneRun:
    gpu: str
    driver: str
    date: str
    command: str
    rounds: int
    results: tuple = ()  # KernelTune
    configs: dict = field(default_factory=dict)  # build -> its candidate configs (texts)
    notes: tuple = ()
    margin: float = DEFAULT_MARGIN
    ruler: str = ISOLATED
    telemetry: str = ""  # what read clocks and power (sustained ruler; "" none)


def variant_steps(chain) -> list:
    """The kernel steps of a chain (forward, then backward) with more than one variant."""
    return [s for s in chain.manifest.kernel_steps() if len(s.variants) > 1]


def timed_steps(manifest, step) -> list:
    """What one variant's time covers: the kernel step and the finalizes that fold its
    partial buffers (``links``). Their cost depends on the variant -- a tile half as wide writes
    twice the partial columns for the finalize to read -- so timing the kernel alone can pick a
    variant that makes the chain slower (b1 at D = 2048 on the H200, docs/tuning.md)."""
    fed = {link.to for link in manifest.links if link.source == step.name}
    return [step] + [s for s in manifest.all_steps if s.kind == "finalize" and s.name in fed]


def tune_shape(
    chain,
    checked,
    sizes: dict,
    opts,
    clock,
    progress,
    margin: float = DEFAULT_MARGIN,
    sampler=None,
) -> list[KernelTune]:
    """Every multi-variant kernel of one chain at one shape, each timed alone per variant.
    ``opts``: ``coda_spec.bench.driver.Options`` (seed, rounds, warmup, device, the ruler);
    ``margin``: the pick's (:func:`pick_winner`); ``sampler``: the sustained ruler's telemetry
    (None: none)."""

    from coda_spec.bench.driver import at_dims, draw

    build = chain.directory.name
    chain, checked = at_dims(chain, checked, sizes)
    steps = variant_steps(chain)
    if not steps:
        return []
    _, inputs, grads = draw(chain, checked, sizes, opts)
    env = chain.run(inputs, grads=grads)  # every tensor a kernel reads, backward ones included
    clock.resolve([])  # waits for the device
    declared = checked.spec.dim_sizes()
    static = {k: v for k, v in sizes.items() if declared.get(k) is not None}
    dynamic = dynamic_dim(checked.spec.dims)
    out = []
    for s in steps:
        if not chain.launches(s, sizes):  # an empty GEMM: no kernel runs, nothing to pick
            continue
        names = tuple(chain.variant_names(s.name))
        cands = {
            n: chain.with_variants({s.name: i}).steps_fn(env, sizes, timed_steps(chain.manifest, s))
            for i, n in enumerate(names)
        }
        t0 = time.perf_counter()
        stats, failed, _ = opts.time(
            cands,
            clock,
            sampler,
            progress=lambda msg, k=s.name, t0=t0: progress(
                f"{k}: {msg} ({time.perf_counter() - t0:.1f} s)"
            ),
        )
        out.append(
            KernelTune(
                build=build,
                spec=checked.spec.name,
                kernel=s.name,
                sizes=dict(sizes),
                static=static,
                m=int(sizes[dynamic]) if dynamic else 0,
                names=names,
                ms={n: stats[n].median_ms for n in names if n in stats},
                failed=dict(failed),
                spread={n: (stats[n].p20_ms, stats[n].p80_ms) for n in names if n in stats},
                margin=margin,
                rounds=opts.rounds,
                ruler=opts.ruler,
                stats={n: stats[n] for n in names if n in stats},
            )
        )
    return out


def run_tune(
    targets: list,
    opts,
    command: str,
    progress=None,
    clock=None,
    device=None,
    margin: float = DEFAULT_MARGIN,
    sampler=None,
):
    """``targets``: (build directory, loaded chain) pairs. ``clock``/``device`` ((gpu name,
    driver))/``sampler``: seams for tests; by default a ``CudaClock``, this GPU (needs CUDA) and,
    for the sustained ruler, the first telemetry source that works (``timing.open_sampler``).
    ``margin``: the pick's (:func:`pick_winner`)."""
    from coda_spec.bench.driver import plan

    margin = check_margin(margin)
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    jobs = plan(targets, opts)
    if clock is None or device is None:
        import torch

        if not torch.cuda.is_available():
            raise ToolError("coda tune needs a CUDA GPU (torch.cuda.is_available() is False)")
        from coda_spec.bench.driver import device_ids, device_info

        clock = clock or CudaClock()
        if device is None:
            info = device_info(0.0, 0.0)
            device = (info.name, info.driver)
        if sampler is None and opts.ruler == SUSTAINED:
            sampler = open_sampler(*device_ids())
    sampler = sampler or NullSampler()
    try:
        return _tune_jobs(jobs, opts, command, say, clock, device, margin, sampler)
    finally:
        sampler.close()


def _tune_jobs(jobs, opts, command, say, clock, device, margin, sampler) -> TuneRun:
    gpu, driver = device
    ruler = opts.ruler
    if ruler == SUSTAINED:
        ruler += f" ({opts.sustain_s:g} s streams; telemetry: {sampler.source or 'none'})"
    say(
        f"tuning on {gpu} (driver {driver or '?'}): {len(jobs)} shape(s), {opts.rounds} rounds, "
        f"margin {margin * 100:g}%, ruler {ruler}"
    )
    results, notes, configs = [], [], {}
    for i, (chain, checked, sizes) in enumerate(jobs, 1):
        configs[chain.directory.name] = _configs(chain)
        label = f"[{i}/{len(jobs)}] {chain.directory.name} " + " ".join(
            f"{k}={v}" for k, v in sizes.items()
        )
        say(label)
        try:
            got = tune_shape(
                chain, checked, sizes, opts, clock, lambda msg: say(f"  {msg}"), margin, sampler
            )
        except (ToolError, RuntimeError, ValueError) as e:
            msg = f"{label}: skipped: {type(e).__name__}: {str(e).splitlines()[0]}"
            say(msg)
            notes.append(msg)
            continue
        if not got:
            say("  no kernel with more than one variant: nothing to tune")
        for r in got:
            say(f"  {r.kernel}: {r.winner or '-'} ({r.pick.text(margin)})")
        results += got
        _empty_cache()
    return TuneRun(
        gpu=gpu,
        driver=driver,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        rounds=opts.rounds,
        results=tuple(results),
        configs=configs,
        notes=tuple(notes),
        margin=margin,
        ruler=opts.ruler,
        telemetry=sampler.source,
    )


def _configs(chain) -> list[str]:
    return [config_text(c) for c in chain.manifest.configs]


def _empty_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- writing ------------------------------------------------------------------------------------


def merge(data: dict | None, run: TuneRun) -> dict:
    """``data`` (a tune file's, or None) with ``run``'s winners merged in: per build, an entry
    at the same kernel, dims and m_max is replaced, others are kept; other builds are kept. A
    build entry measured on another GPU is replaced whole (entries of two GPUs never mix)."""
    out = validate(data) if data is not None else {"format": FORMAT, "builds": {}}
    builds = dict(out["builds"])
    for r in run.results:
        if r.winner is None:
            continue
        b = builds.get(r.build)
        if b is None or b.get("gpu") != run.gpu:
            b = {"spec": r.spec, "kernels": {}}
        kernels = dict(b["kernels"])
        rows = [
            x
            for x in kernels.get(r.kernel, [])
            if not (x["dims"] == r.static and x["m_max"] == r.m)
        ]
        rows.append(r.entry())
        kernels[r.kernel] = sorted(rows, key=lambda x: (sorted(x["dims"].items()), x["m_max"]))
        builds[r.build] = dict(
            b,
            spec=r.spec,
            gpu=run.gpu,
            driver=run.driver,
            date=run.date,
            command=run.command,
            kernels=kernels,
        )
    return {**out, "format": FORMAT, "builds": builds}


def write_file(path, data: dict) -> None:
    """Write a tune file atomically, creating its parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(validate(data, path), indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def gpu_slug(name: str) -> str:
    """``NVIDIA H200`` -> ``h200``: the default file name under tuned/."""
    text = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "gpu"


def default_out(gpu: str) -> Path:
    return Path(DEFAULT_DIR) / f"{gpu_slug(gpu)}.json"


# -- the table shown ----------------------------------------------------------------------------


def _shape(sizes: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def _num(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_table(run: TuneRun) -> str:
    """Per build: a legend v0.. = its candidate configs (v0 the fallback), then one row per
    kernel and shape with each variant's median ms, the winner, its speedup over v0 and why it
    won (:func:`pick_winner`)."""
    lines = [
        f"coda tune on {run.gpu} ({run.date}): median ms of {run.rounds} rounds; a variant "
        f"replaces v0 if its median is >= {run.margin * 100:g}% lower and its p80 < v0's median"
    ]
    if run.ruler == SUSTAINED:
        lines.append(
            "ruler sustained: ms per call in streams at the power cap (telemetry: "
            f"{run.telemetry or 'none'}); under each row, per variant: SM MHz / W / J per call"
        )
    else:
        lines.append("ruler isolated: one call per sample after an L2 flush")
    by_build: dict = {}
    for r in run.results:
        by_build.setdefault(r.build, []).append(r)
    for build, rows in by_build.items():
        configs = list(run.configs.get(build) or [])
        for r in rows:
            configs += [n for n in r.names if n not in configs]
        tag = {c: f"v{i}" for i, c in enumerate(configs)}
        lines.append(f"{build}")
        lines += [
            f"  {tag[c]:<4}{c}{'  (fallback)' if i == 0 else ''}" for i, c in enumerate(configs)
        ]
        kw = max(len("kernel"), *(len(r.kernel) for r in rows))
        sw = max(len("shape"), *(len(_shape(r.sizes)) for r in rows))
        head = f"  {'kernel':<{kw}}  {'shape':<{sw}}" + "".join(f"  {tag[c]:>8}" for c in configs)
        lines.append(head + "  winner  speedup  why")
        for r in rows:
            cells = []
            for c in configs:
                if c in r.ms:
                    cells.append(f"{r.ms[c]:>8.4f}")
                elif c in r.failed:
                    cells.append(f"{'failed':>8}")
                else:
                    cells.append(f"{'-':>8}")
            win = tag[r.winner] if r.winner else "-"
            speed = f"{r.speedup:.2f}x" if r.speedup else "-"
            lines.append(
                f"  {r.kernel:<{kw}}  {_shape(r.sizes):<{sw}}"
                + "".join(f"  {c}" for c in cells)
                + f"  {win:<6}  {speed:>7}  {r.pick.text(r.margin, tag.get)}"
            )
            energy = r.energy()
            if any(v is not None for k in energy.values() for v in k.values()):
                lines.append(
                    f"  {'':<{kw}}  {'':<{sw}}  "
                    + ", ".join(
                        f"{tag[c]} {_num(energy['clock_mhz'].get(c), '.0f')} MHz "
                        f"{_num(energy['watts'].get(c), '.0f')} W "
                        f"{_num(energy['joules'].get(c), '.3f')} J"
                        for c in configs
                        if c in r.ms
                    )
                )
        for r in rows:
            for n, why in r.failed.items():
                lines.append(f"  note: {r.kernel} {tag[n]} ({n}) failed: {why}")
    if not run.results:
        lines.append("  nothing tuned (no kernel with more than one variant at these shapes)")
    for n in run.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)


# -- the command --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Args:
    targets: tuple
    ms: tuple = ()
    dims: dict = field(default_factory=dict)
    widths: tuple = ()
    rounds: int | None = None  # None: 3 (sustained), DEFAULT_ROUNDS (isolated)
    warmup: int = 2
    seed: int = 0
    out: Path | None = None  # default: tuned/<gpu-slug>.json
    builds: Path = Path("build")
    margin: float = DEFAULT_MARGIN  # pick_winner's
    ruler: str = SUSTAINED  # or ISOLATED (--isolated)
    sustain_s: float | None = None  # None: timing.SUSTAIN_S

    def __post_init__(self):
        check_margin(self.margin)  # a bad --margin is a bad argument (exit 2), GPU or not
        check_ruler(self.ruler, self.sustain_s)


def _echo(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def main(args: Args, load_chain, has_gpu, run=None) -> int:
    """Run ``coda tune``; returns the exit status. ``load_chain``/``has_gpu``: the CLI's seams;
    ``run``: :func:`run_tune` (tests substitute one with a fake clock and device)."""

    directories = build_dirs(args.targets, args.builds, "tune")
    if not has_gpu():
        _echo(
            "error: coda tune times kernel variants on a CUDA GPU; none here (run it where the "
            "kernels deploy; the tune file it writes can be checked in and used anywhere)",
            err=True,
        )
        return EXIT_NO_GPU
    opts = options(args, isolated_rounds=DEFAULT_ROUNDS, baselines=(), kernels=False)
    targets = timing_targets(directories, load_chain)
    result = (run or run_tune)(targets, opts, command_line("tune"), margin=args.margin)
    _echo(render_table(result))
    if not result.results:
        if result.notes:
            return EXIT_TOOL_FAILURE  # every shape failed
        _echo("nothing to write: no kernel has more than one variant", err=True)
        return EXIT_OK
    if not any(r.winner for r in result.results):
        _echo("nothing to write: every variant failed", err=True)
        return EXIT_TOOL_FAILURE
    out = args.out or default_out(result.gpu)
    data = read_file(out) if out.is_file() else None
    write_file(out, merge(data, result))
    _echo(f"wrote {out}", err=True)
    return EXIT_OK
