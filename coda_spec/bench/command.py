"""What ``coda bench`` does with its arguments (``cli.bench`` only parses them).

Two modes, chosen by the targets:

* **timing** (build directories or spec files; a spec means its latest build under
  ``--builds``): needs a CUDA GPU; writes ``bench.json`` and ``bench.csv`` into ``--out`` and
  prints the table;
* **results** (``.json`` files written by an earlier run): no GPU; prints their table again
  (``--markdown``: the summary table docs/benchmarks.md shows). Several files (one device call
  per width) are merged into one run, written to ``--out`` when given.

Timing has two rulers (``coda_spec.bench.timing``): ``sustained`` (the default; each sample a
stream of ``--sustain-s`` seconds of back-to-back calls at the power cap, SM clock and board
power sampled beside it; ``--rounds`` default 3) and ``isolated`` (``--isolated``: one call per
sample after an L2 flush; ``--rounds`` default 20). ``coda tune`` shares them (its isolated
default is 30 rounds).

Either way ``--compare OLD.json`` prints the change from an earlier run and ``--plot`` draws one
PNG per chain from a results file (matplotlib, Agg), so charts and comparisons work on a
machine without a GPU: ``coda bench --plot results.json`` (PNGs beside it, or in ``--out``).

Exit codes: 0 ok, 1 tool failure (a target that is neither a build, a spec nor results; a
chain that failed at every shape), 2 invalid arguments or spec, 4 no CUDA GPU for timing.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from coda_spec.bench import report
from coda_spec.bench.model import loads, merge
from coda_spec.bench.timing import ISOLATED, SUSTAIN_S, SUSTAINED, SUSTAINED_ROUNDS
from coda_spec.check.target import resolve
from coda_spec.errors import EXIT_NO_GPU, EXIT_OK, EXIT_TOOL_FAILURE, ToolError


@dataclass(frozen=True)
class Args:
    targets: tuple
    ms: tuple
    dims: dict
    widths: tuple
    baselines: tuple
    rounds: int | None  # None: the ruler's default (ruler_rounds)
    warmup: int
    seed: int
    kernels: bool
    out: Path | None  # default: build/bench (timing), beside the JSON (--plot)
    builds: Path
    compare: Path | None
    plot: Path | None  # a results JSON to draw charts from
    markdown: bool = False  # the summary table for docs instead of the terminal table
    ruler: str = SUSTAINED  # or ISOLATED (--isolated)
    sustain_s: float | None = None  # None: SUSTAIN_S (sustained ruler only)

    def __post_init__(self):
        check_ruler(self.ruler, self.sustain_s)


ISOLATED_ROUNDS = 20  # coda bench --isolated's --rounds


def check_ruler(ruler: str, sustain_s: float | None) -> None:
    """A bad ruler argument is a bad argument (exit 2), checked before any GPU is looked for."""
    if ruler not in (SUSTAINED, ISOLATED):
        raise ValueError(f"ruler {ruler!r}: expected {SUSTAINED!r} or {ISOLATED!r}")
    if sustain_s is None:
        return
    if ruler == ISOLATED:
        raise ValueError(
            "--sustain-s sets the sustained ruler's stream length; --isolated times one call "
            "per sample: give one of them"
        )
    if not sustain_s > 0:
        raise ValueError(f"--sustain-s {sustain_s!r}: must be a positive number of seconds")


def ruler_rounds(args, isolated: int) -> int:
    """``--rounds``, or the ruler's default: SUSTAINED_ROUNDS, or ``isolated`` (20 for bench,
    30 for tune)."""
    if args.rounds:
        return args.rounds
    return SUSTAINED_ROUNDS if args.ruler == SUSTAINED else isolated


def parse_ints(text: str | None, what: str) -> tuple:
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise ValueError(f"{what} {text!r}: expected integers separated by commas") from e


def _read_results(path: Path):
    try:
        return loads(Path(path).read_text())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ToolError(f"{path}: not a coda bench results file: {e}") from e


def _echo(text: str, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout, flush=True)


def build_dirs(targets, builds: Path, command: str) -> list[Path]:
    """The build directory of each target (a spec means its latest build, which must be of the
    spec's current content: ``check.target.resolve``); checked before any GPU is looked for."""

    return [resolve(t, builds, command=command) for t in targets]


def timing_targets(directories, load_chain) -> list:
    """(build directory, loaded chain) per build directory."""
    return [(d, load_chain(d)) for d in directories]


def options(args, isolated_rounds: int = ISOLATED_ROUNDS, **extra):
    """``driver.Options`` from the shape and timing arguments bench and tune share."""
    from coda_spec.bench.driver import DEFAULT_M, Options

    return Options(
        ms=args.ms or DEFAULT_M,
        dims=args.dims,
        widths=args.widths,
        rounds=ruler_rounds(args, isolated_rounds),
        warmup=args.warmup,
        seed=args.seed,
        ruler=args.ruler,
        sustain_s=args.sustain_s or SUSTAIN_S,
        **extra,
    )


def command_line(name: str) -> str:
    """The command as typed (recorded in results and tune files)."""
    return f"coda {name} " + " ".join(shlex.quote(a) for a in sys.argv[2:])


def main(args: Args, load_chain, has_gpu) -> int:
    """Run ``coda bench``; returns the exit status. ``load_chain``/``has_gpu``: the CLI's seams
    (tests substitute fakes)."""
    results = [t for t in args.targets if str(t).endswith(".json")]
    timing = [t for t in args.targets if not str(t).endswith(".json")]
    if results and timing:
        raise ValueError("give build directories / specs to time, or results .json files, not both")
    runs = [_read_results(Path(p)) for p in results]
    if len(runs) > 1:  # one device call per width: read as one run
        runs = [merge(runs)]
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            for p in report.write_outputs(runs[0], args.out):
                _echo(f"wrote {p}", err=True)
    if args.plot is not None:
        if args.targets:
            raise ValueError("--plot draws charts from a results file; give it no targets")
        for p in report.plot(_read_results(args.plot), args.out or Path(args.plot).parent):
            _echo(f"wrote {p}")
        return EXIT_OK
    status = EXIT_OK
    if timing:
        directories = build_dirs(timing, args.builds, "bench")
        if "liger" in args.baselines:  # the catalogue's (a source checkout): say so before timing
            from coda_spec.bench.baselines import catalogue

            catalogue()
        if not has_gpu():
            _echo(
                "error: coda bench times kernels on a CUDA GPU; none here. Charts and "
                "comparisons of earlier results work anywhere: coda bench --plot results.json",
                err=True,
            )
            return EXIT_NO_GPU
        from coda_spec.bench.driver import run_bench

        opts = options(args, baselines=args.baselines, kernels=args.kernels)
        targets = timing_targets(directories, load_chain)
        run = run_bench(targets, opts, command_line("bench"))
        out = args.out or Path("build/bench")
        out.mkdir(parents=True, exist_ok=True)
        for p in report.write_outputs(run, out):
            _echo(f"wrote {p}", err=True)
        if not run.cases:
            status = EXIT_TOOL_FAILURE
        runs = [run]
    for run in runs:
        _echo(report.render_markdown(run) if args.markdown else report.render_table(run))
    if args.compare is not None and runs:
        _echo(report.render_compare(_read_results(args.compare), runs[-1]))
    return status
