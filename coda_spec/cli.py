"""The ``coda`` command line.

Commands: ``check`` (validate specs, located errors; ``--math`` adds the fp64 algebra proof of
``coda_spec.prove.mathcheck``), ``build`` (``coda_spec.build``), ``verify`` (``coda_spec.verify``),
``bench`` (``coda_spec.bench``), ``tune`` (``coda_spec.tune``), ``schema`` (print the JSON
Schema), ``primitives`` (list the registry). Every exit status is a row of the one exit-code
table, ``coda_spec.errors.EXIT_CODES`` (the group's help quotes it); ``--stop-after``'s choices
and help are the one stage table, ``coda_spec.stages.STAGES``. No Python traceback reaches a
user: unexpected failures print one line and exit ``EXIT_TOOL_FAILURE`` (set ``CODA_DEBUG=1``
to see the traceback), a Ctrl-C exits ``EXIT_INTERRUPTED``. ``check`` without ``--math`` imports
neither torch nor quack: the commands that need torch or the compiler (``build``, ``verify``,
``bench``, ``tune``) import them inside their own bodies (docs/architecture.md, the reasons for
a function-level import).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import sys
import time
from pathlib import Path

import click

from coda_spec import stages
from coda_spec.artifact.builddir import prune as prune_builds
from coda_spec.check.frontend import check_file
from coda_spec.check.source import MAX_BYTES, load_source, spec_files
from coda_spec.check.target import resolve
from coda_spec.config import parse_configs
from coda_spec.dims import parse_dims
from coda_spec.errors import (
    EXIT_INTERRUPTED,
    EXIT_INVALID_SPEC,
    EXIT_MISMATCH,
    EXIT_NO_GPU,
    EXIT_OK,
    EXIT_TOOL_FAILURE,
    Diagnostic,
    SpecError,
    ToolError,
    UsageError,
    exit_status,
    exit_summary,
    render_text,
)
from coda_spec.grad.command import run_grad
from coda_spec.lower.dry_run import lowering_refusals
from coda_spec.primitives import registry
from coda_spec.prove.mathcheck import coverage_diagnostics, diagnostics, prove
from coda_spec.schema import schema_json
from coda_spec.tune import DEFAULT_MARGIN as TUNE_MARGIN
from coda_spec.verify import sanitize as memcheck  # the module: the option is `sanitize`
from coda_spec.versions import stack_versions


def _exits(*codes: int) -> str:
    """``Exit status: 0 ok, 2 invalid spec, ...``: a command's rows of ``EXIT_CODES`` (every
    command also exits ``EXIT_INTERRUPTED`` on a Ctrl-C)."""
    return f"Exit status: {exit_summary(*codes, EXIT_INTERRUPTED)}."


def _report(exc: BaseException, where=None) -> int:
    """Print ``exc`` the project's way -- a ``SpecError``'s located diagnostics, else one line
    ``WHERE: error: WHAT`` -- and return its exit status (``errors.exit_status``)."""
    if isinstance(exc, SpecError):
        for d in exc.diagnostics:
            click.echo(render_text(d, _raw_lines(d.file)), err=True)
        return exit_status(exc)
    msg = str(exc)
    where = getattr(exc, "where", None) or where
    if where is not None and msg.startswith(f"{where}: "):
        msg = msg[len(f"{where}: ") :]
    click.echo(f"{where}: error: {msg}" if where is not None else f"error: {msg}", err=True)
    return exit_status(exc)


def _spec_files(paths, exclude) -> list[Path]:
    """``check.source.spec_files``, or exit 2 naming the folder that holds no spec."""

    try:
        return spec_files(paths, exclude)
    except UsageError as e:
        sys.exit(_report(e))


_exclude = click.option(
    "--exclude",
    multiple=True,
    metavar="GLOB",
    help="Leave out what matches GLOB in folder scans: a path below the folder "
    "(drafts/*.yaml), a file name (*_wip.yaml) or a folder name (drafts); repeatable. "
    "Scans always skip hidden folders, virtual environments (pyvenv.cfg, conda-meta), "
    "node_modules, site-packages and coda build directories.",
)


def _dims_callback(ctx, param, value):
    """``--dims NAME=INT,...`` through the one parser, ``dims.parse_dims``."""

    try:
        return parse_dims(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e


def _summary(checked) -> str:
    kinds = [s.kind for s in checked.spec.steps]
    parts = [
        f"{kinds.count(k)} {k}{'s' if kinds.count(k) != 1 else ''}"
        for k in ("kernel", "finalize", "host")
        if k in kinds
    ]
    if checked.spec.backward is not None:
        parts.append(f"backward: {len(checked.spec.backward.steps)} steps")
    return ", ".join(parts)


MAIN_HELP = f"""coda: declarative GEMM-epilogue fusion specs for Hopper (sm_90a).

    \b
    Typical flow:
      coda check --math specs/      # CPU: located errors, then the fp64 algebra proof
      coda build specs/x.yaml       # CPU: compile to build/x-<hash>/ (needs the [build] extra)
      coda verify build/x-latest    # GPU: every output against the spec's reference math

    Exit codes: {exit_summary()}.
    """


def _version(ctx, param, value):
    """``coda --version``: coda's version and the stack's (found by package metadata; nothing
    is imported)."""
    if not value or ctx.resilient_parsing:
        return

    click.echo("\n".join(f"{name} {version}" for name, version in stack_versions()))
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, help=MAIN_HELP)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Show coda's version and those of quack, cutlass, triton and torch, and exit.",
)
def main():
    pass


CHECK_HELP = f"""Validate spec files (or folders of them): schema first, then semantics.

    Every error is reported as FILE:LINE:COL: error: SPEC_PATH: MESSAGE; HINT. With --math, each
    valid spec's math is also proven (see coda_spec.prove.mathcheck). {_exits(0, 1, 2, 3)} 1: a file
    could not be read or torch is missing; 2: a spec is invalid, or a folder holds no spec; 3:
    a spec's math is wrong or unproven.
    """


@main.command(short_help="Validate specs; with --math, prove their math on CPU.", help=CHECK_HELP)
@click.argument("paths", nargs=-1, required=True)
@_exclude
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    help="text (compiler style, default) or json (a list of diagnostics).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only problems.")
@click.option(
    "--math",
    "math",
    is_flag=True,
    help="Also prove the math in fp64 on CPU: every output equals equivalent_to, every "
    "backward output equals its autograd (needs torch, CPU build; no GPU, no compiler).",
)
def check(paths, exclude, fmt, quiet, math):
    start = time.perf_counter()
    files = _spec_files(paths, exclude)
    diags: list[Diagnostic] = []
    tool_failed, invalid, ok, wrong = False, 0, 0, 0
    prover = _prover() if math else None
    lines_of: dict = {}
    for f in files:
        try:
            checked = check_file(f)
        except SpecError as e:
            invalid += 1
            diags.extend(e.diagnostics)
            try:
                lines_of[str(f)] = load_source(f).lines
            except (SpecError, ToolError):
                lines_of[str(f)] = _raw_lines(f)
            continue
        except ToolError as e:
            tool_failed = True
            diags.append(Diagnostic(str(f), 0, 0, "<file>", str(e).split(": ", 1)[-1]))
            continue
        lines_of[str(f)] = checked.source.lines
        refused = lowering_refusals(checked)  # what build's lower stage would refuse
        if refused:
            invalid += 1
            diags.extend(refused)
            continue
        diags.extend(checked.analysis.warnings)
        try:
            report = prover(checked) if prover else None
        except SpecError as e:  # an expression the proof cannot evaluate: located, invalid
            invalid += 1
            diags.extend(e.diagnostics)
            continue
        except Exception as e:  # noqa: BLE001 - one file's internal error ends only its proof
            if os.environ.get("CODA_DEBUG"):
                raise
            tool_failed = True
            diags.append(_internal(f, e))
            continue
        if report is not None and not report.ok:
            wrong += 1
            diags.extend(diagnostics(checked, report))
            continue
        if report is not None:
            diags.extend(coverage_diagnostics(checked, report))
        ok += 1
        if fmt == "text" and not quiet:
            click.echo(f"ok: {f}: {checked.spec.name} ({_summary(checked)})")
            if report is not None:
                click.echo(f"    {report.summary()} ({report.seconds:.2f}s)")
    elapsed = time.perf_counter() - start
    if fmt == "json":
        click.echo(json.dumps([d.to_json() for d in diags], indent=2))
    else:
        for d in diags:
            # A note explains the error before it, so it goes where the error goes.
            click.echo(render_text(d, lines_of.get(d.file)), err=d.severity != "warning")
        errors = sum(d.severity == "error" for d in diags)
        if not quiet or errors:
            proof = f", {wrong} with wrong or unproven math" if math else ""
            click.echo(
                f"{len(files)} spec(s): {ok} valid{' and proven' if math else ''}, "
                f"{invalid} invalid{proof}, {errors} error(s) in {elapsed:.2f}s",
                err=bool(errors),
            )
    if tool_failed:
        sys.exit(EXIT_TOOL_FAILURE)
    sys.exit(EXIT_INVALID_SPEC if invalid else EXIT_MISMATCH if wrong else EXIT_OK)


def _internal(file, exc: Exception) -> Diagnostic:
    """An internal error while proving one file of a folder run, as that file's diagnostic
    (the run goes on to the next file and exits ``EXIT_TOOL_FAILURE``)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return Diagnostic(
        str(file),
        0,
        0,
        "<file>",
        f"internal error while proving: {type(exc).__name__}: {first}",
        "please report it; set CODA_DEBUG=1 for a traceback",
    )


def _need_torch(command: str, why: str) -> None:
    """Exit 1 with how to install torch when it is missing (it is not a base dependency)."""

    if importlib.util.find_spec("torch") is None:
        click.echo(
            f'error: {command} needs PyTorch ({why}): pip install "coda-spec[math]", or the '
            'CPU build alone: pip install "torch==2.13.0" --index-url '
            "https://download.pytorch.org/whl/cpu",
            err=True,
        )
        sys.exit(EXIT_TOOL_FAILURE)


def _prover():
    """``prove.mathcheck.prove``, or exit 1 with how to install torch (``--math`` needs it)."""
    _need_torch("coda check --math", "the CPU build is enough")

    return prove


def _raw_lines(path) -> list[str] | None:
    try:
        with open(path, "rb") as f:  # bounded, like the loader
            raw = f.read(MAX_BYTES + 1)
    except (OSError, ValueError):
        return None
    return raw.decode("utf-8", errors="replace").splitlines()


BUILD_HELP = f"""Compile specs for sm_90a (no GPU needed) into BUILDS/<name>-<hash>/.

    PATHS are spec files or folders of them. {_exits(0, 1, 2)} 0: built (or a cache hit); 2: an
    invalid spec, a config a primitive cannot support, a folder without specs, two specs with
    one name, or bad arguments; 1: a tool failure.
    """


@main.command(
    short_help="Compile specs into a loadable sm_90a library (no GPU needed).", help=BUILD_HELP
)
@click.argument("paths", nargs=-1, required=True)
@_exclude
@click.option(
    "-o", "--out", "--builds", "out", default="build", show_default=True, help="Build root."
)
@click.option(
    "--config",
    "config_text",
    default=None,
    help="Tile/cluster/schedule, e.g. 128x256,cluster=2x1,cooperative,cstages=2 (the default); "
    "several candidates separated by ';' (the first is the fallback), or 'auto'; coda tune picks "
    "among them per kernel and shape. Overrides the spec's own configs: list.",
)
@click.option(
    "--stop-after",
    type=click.Choice(stages.NAMES),
    default=stages.NAMES[-1],
    show_default=True,
    help=stages.help_text(),
)
@click.option(
    "--prune",
    is_flag=True,
    help="Afterwards remove the other builds of the same spec files with the same configs "
    "(builds of another --config, or of another file with the same name, stay).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Parallel compile workers (~750 MB each), at least 1.",
)
@click.option("--force", is_flag=True, help="Rebuild even when a complete build exists.")
@click.option("--print-dir", is_flag=True, help="Print only the build directory of each spec.")
def build(paths, exclude, out, config_text, stop_after, prune, jobs, force, print_dir):
    from coda_spec.build import BuildOptions, build_spec

    try:
        configs = parse_configs(config_text)
    except ValueError as e:
        sys.exit(_report(UsageError(f"--config: {e}")))
    if Path(out).exists() and not Path(out).is_dir():
        sys.exit(_report(UsageError(f"-o/--builds {out}: not a directory; give a build root")))
    files = _spec_files(paths, exclude)
    opts = BuildOptions(
        out=Path(out),
        config=configs[0],
        configs=configs if len(configs) > 1 else (),
        explicit=config_text is not None,
        stop_after=stop_after,
        jobs=jobs,
        force=force,
    )
    status, kept, names = EXIT_OK, [], {}
    for f in files:
        # --print-dir: the progress lines go (build.log keeps them); errors still show
        quiet = contextlib.redirect_stdout(io.StringIO()) if print_dir else contextlib.nullcontext()
        try:
            _one_name(f, names, Path(out))
            with quiet:
                res = build_spec(f, opts)
        except (SpecError, ToolError, UsageError) as e:
            status = _worse(status, _report(e, f))
            continue
        kept.append(res.directory)
        if print_dir:
            click.echo(str(res.directory))
    if prune:
        for d in prune_builds(Path(out), kept):
            click.echo(f"pruned {d}")
    sys.exit(status)


def _one_name(path, names: dict, out: Path) -> None:
    """Refuse a second spec file with the ``name:`` of one built earlier in this run: both would
    share ``OUT/<name>-latest`` (docs/build.md, "Two files, one name")."""

    try:
        checked = check_file(path)
    except (SpecError, ToolError):
        return  # build_spec reports it
    name, here = checked.spec.name, Path(path).resolve()
    first = names.setdefault(name, here)
    if first != here:
        line, col = checked.source.where(("name",))
        raise SpecError(
            [
                Diagnostic(
                    str(path),
                    line,
                    col,
                    "name",
                    f"'{name}' is also the name of {first}, built in this run; both would "
                    f"share {out / (name + '-latest')}",
                    "rename one of them, or build them in separate runs",
                )
            ]
        )


VERIFY_HELP = f"""Check built kernels against the spec's reference math on a CUDA GPU (never
    compiles).

    TARGETS are build directories or spec files (their latest build under --builds, which must
    be built from the spec's current content). {_exits(0, 1, 2, 3, 4)} 3: a numeric failure; 2:
    an invalid spec, a target that is no build nor spec, a spec not built or changed since its
    newest build; 1: a tool error; 4: no GPU (--allow-no-gpu: 0).
    """


@main.command(
    short_help="Test built kernels against the spec's math on a CUDA GPU.", help=VERIFY_HELP
)
@click.argument("targets", nargs=-1, required=True)
@click.option(
    "--builds",
    "-o",
    "--out",
    "builds",
    default="build",
    show_default=True,
    help="Build root: where a SPEC's latest build is looked up.",
)
@click.option("--seed", type=int, default=None, help="Replay a run (default: a fresh seed).")
@click.option(
    "--dims",
    "dims",
    callback=_dims_callback,
    default=None,
    help="One shape case, e.g. M=4096,D=1000.",
)
@click.option("--small", is_flag=True, help="Only the small case (M=64).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a table per chain; json: the reports as a list (for CI); see also --junit.",
)
@click.option("--junit", "junit_path", default=None, help="Also write a JUnit XML report.")
@click.option(
    "--allow-no-gpu",
    is_flag=True,
    help="Without a GPU, exit 0 if the CPU algebra proof passed (else 4; 3 if it failed).",
)
@click.option(
    "--sanitize",
    is_flag=True,
    help="Also run the small case under compute-sanitizer memcheck (clean/unclean/unavailable).",
)
@click.option(
    "--reference-spec",
    default=None,
    hidden=True,
    help="Test only: check against this spec's math instead of the build's own.",
)
def verify(
    targets, builds, seed, dims, small, fmt, junit_path, allow_no_gpu, sanitize, reference_spec
):
    _need_torch("coda verify", "on a GPU machine, the CUDA build you already use")
    from coda_spec.runtime import CodaRuntimeError
    from coda_spec.verify import report as R
    from coda_spec.verify import run as V

    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    dims = dims or None
    reports, status = [], EXIT_OK
    reference = None
    if reference_spec:
        reference = check_file(reference_spec)
    for t in targets:
        try:
            directory = resolve(t, Path(builds))
            chain = _load_chain(directory)
            if not _has_gpu():
                rep = V.reference_only(reference or chain.checked(), seed)
                if not rep.passed:
                    status = _worse(status, EXIT_MISMATCH)
                elif not allow_no_gpu:
                    status = _worse(status, EXIT_NO_GPU)
            else:
                rep = V.verify_chain(chain, seed, dims, small, reference)
                if not rep.passed:
                    status = _worse(status, EXIT_MISMATCH)
        except (SpecError, ToolError, CodaRuntimeError, OSError, ValueError) as e:
            status = _worse(status, _report(e, t))
            continue
        if sanitize:
            san = memcheck.sanitize(directory, seed)
            rep = R.with_replaced(rep, extra={**rep.extra, "sanitizer": san})
            if san["result"] == "unclean":
                status = _worse(status, EXIT_MISMATCH)
        reports.append(rep)
        if fmt == "text":
            click.echo(R.render_table(rep))
    if fmt == "json":
        click.echo(json.dumps([dataclasses.asdict(r) for r in reports], indent=1, default=str))
    if junit_path:
        Path(junit_path).write_text(R.junit(reports))
    if reports and reports[0].skipped and fmt == "text":
        click.echo(
            "NOTE: no CUDA GPU here: kernel numerics were not run"
            + ("" if allow_no_gpu else " (exit 4; --allow-no-gpu accepts this)"),
            err=True,
        )
    sys.exit(status)


# Which exit status wins when targets end differently: a failed check beats everything, a
# missing GPU (nothing failed, something was not run) loses to every real failure.
_SEVERITY = (EXIT_OK, EXIT_NO_GPU, EXIT_TOOL_FAILURE, EXIT_INVALID_SPEC, EXIT_MISMATCH)


def _worse(a: int, b: int) -> int:
    return max(a, b, key=_SEVERITY.index)


def _load_chain(directory):
    """The chain ``verify`` runs: a loaded build. A seam: the CPU tests substitute a fake kernel
    runner here (tests/test_verify_cpu.py) to prove every check can fail."""
    from coda_spec.runtime import load

    return load(directory)


def _has_gpu() -> bool:
    """Whether ``verify`` can run kernels here (the same seam: tests pretend a GPU exists)."""
    import torch

    return torch.cuda.is_available()


def _timing_options(f):
    """The shape and timing options ``bench`` and ``tune`` share (one home for their texts)."""
    opts = [
        click.option("--m", "m_text", default=None, help="Dynamic-dim sizes, e.g. 16384,4096."),
        click.option(
            "--dims",
            "dims",
            callback=_dims_callback,
            default=None,
            help="Static dims, e.g. D=2048,F=5632.",
        ),
        click.option(
            "--width",
            "width_text",
            default=None,
            help="Catalogue width rule: D=W, F=round_up(8/3 W, 256), KV=W/512 heads; "
            "e.g. 2048,4096.",
        ),
        click.option(
            "--rounds",
            type=click.IntRange(1),
            default=None,
            help="Interleaved timing rounds (samples per candidate) [default: 3; with "
            "--isolated 20 for bench, 30 for tune].",
        ),
        click.option(
            "--isolated",
            is_flag=True,
            help="The isolated ruler: one call per sample after an L2 flush, instead of "
            "streams at the power cap (docs/benchmarks.md, 'Two rulers').",
        ),
        click.option(
            "--sustain-s",
            "sustain_s",
            type=float,
            default=None,
            help="Seconds of back-to-back calls per sample (the sustained ruler) [default: 0.5].",
        ),
        click.option(
            "--warmup",
            type=click.IntRange(1),
            default=2,
            show_default=True,
            help="Untimed calls of each candidate first (compile, module load).",
        ),
        click.option("--seed", type=int, default=0, show_default=True, help="Input seed."),
        click.option(
            "--builds",
            default="build",
            show_default=True,
            help="Build root: where a SPEC's latest build is looked up.",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _exit_timing(run) -> None:
    """Run a GPU command's body (``run() -> status``) and exit with its status
    (``errors.exit_status``: bad arguments and targets 2, tool failures 1), each problem in one
    line and no traceback."""
    from coda_spec.runtime import CodaRuntimeError

    try:
        status = run()
    except (SpecError, ToolError, CodaRuntimeError, OSError, ValueError) as e:
        status = _report(e)
    sys.exit(status)


BENCH_HELP = f"""Time built chains on a CUDA GPU (never compiles coda kernels).

    TARGETS are build directories, spec files (their latest build under --builds, built from
    the spec's current content), or results .json files from an earlier run (re-rendered, no
    GPU). Targets are checked before the GPU is looked for. {_exits(0, 1, 2, 4)} 2: invalid
    arguments or targets; 1: a tool failure or no case could run; 4: no GPU.
    """


@main.command(
    short_help="Time built chains against cuBLAS SoL, eager, torch.compile, Liger.",
    help=BENCH_HELP,
)
@click.argument("targets", nargs=-1)
@_timing_options
@click.option(
    "--baselines",
    default="eager,compile,liger",
    show_default=True,
    help="Baselines to time (any of eager, compile, liger; 'none' for SoL only). The "
    "catalogue's eager and Liger baselines live in the repository's benchmarks/baselines/ "
    "(a source checkout); elsewhere eager evaluates each spec's equivalent_to.",
)
@click.option("--no-kernels", is_flag=True, help="Do not time each coda kernel alone.")
@click.option(
    "--out",
    default=None,
    help="Results directory [default: build/bench]; with --plot, where the PNGs go "
    "[default: beside the results JSON].",
)
@click.option("--compare", default=None, help="An earlier results JSON to compare against.")
@click.option("--plot", default=None, help="Draw one PNG per chain from this results JSON.")
@click.option("--markdown", is_flag=True, help="Results mode: print the summary as markdown.")
def bench(
    targets,
    m_text,
    dims,
    width_text,
    baselines,
    rounds,
    isolated,
    sustain_s,
    warmup,
    seed,
    no_kernels,
    out,
    builds,
    compare,
    plot,
    markdown,
):
    _need_torch("coda bench", "on a GPU machine, the CUDA build you already use")
    from coda_spec.bench import command as C

    def run() -> int:
        names = tuple(b for b in baselines.split(",") if b and b != "none")
        unknown = [b for b in names if b not in ("eager", "compile", "liger")]
        if unknown:
            raise ValueError(f"--baselines: unknown {unknown}; choose from eager,compile,liger")
        if not targets and plot is None:
            raise ValueError("give build directories, specs or results .json files (or --plot)")
        args = C.Args(
            targets=tuple(targets),
            ms=C.parse_ints(m_text, "--m"),
            dims=dims,
            widths=C.parse_ints(width_text, "--width"),
            baselines=names,
            rounds=rounds,
            warmup=warmup,
            seed=seed,
            kernels=not no_kernels,
            out=Path(out) if out else None,
            builds=Path(builds),
            compare=Path(compare) if compare else None,
            plot=Path(plot) if plot else None,
            markdown=markdown,
            ruler="isolated" if isolated else "sustained",
            sustain_s=sustain_s,
        )
        return C.main(args, _load_chain, _has_gpu)

    _exit_timing(run)


TUNE_HELP = f"""Time every variant of each multi-variant kernel on a CUDA GPU; record the pick.

    TARGETS are build directories or spec files (their latest build under --builds, built from
    the spec's current content); they are checked before the GPU is looked for. A variant other
    than the fallback (the build's first config) is picked only if it is clearly faster
    (--margin); the picks are merged into --out, keyed by build directory name; coda_spec.load
    uses them (see docs/tuning.md). {_exits(0, 1, 2, 4)} 2: invalid arguments or targets; 1: a
    tool failure; 4: no GPU.
    """


@main.command(
    short_help="Pick each kernel's fastest tile-config variant per shape.",
    help=TUNE_HELP,
)
@click.argument("targets", nargs=-1, required=True)
@_timing_options
@click.option(
    "--out",
    default=None,
    help="Tune file to write or merge into [default: tuned/<gpu>.json, e.g. tuned/h200.json].",
)
@click.option(
    "--margin",
    type=float,
    default=TUNE_MARGIN,
    show_default=True,
    help="A variant replaces the fallback only if its median is this fraction below the "
    "fallback's (and its p80 below the fallback's median); 0 <= margin < 1.",
)
def tune(
    targets,
    m_text,
    dims,
    width_text,
    rounds,
    isolated,
    sustain_s,
    warmup,
    seed,
    out,
    builds,
    margin,
):
    _need_torch("coda tune", "on a GPU machine, the CUDA build you already use")
    from coda_spec import tune as T
    from coda_spec.bench import command as C

    def run() -> int:
        args = T.Args(
            targets=tuple(targets),
            ms=C.parse_ints(m_text, "--m"),
            dims=dims,
            widths=C.parse_ints(width_text, "--width"),
            rounds=rounds,
            warmup=warmup,
            seed=seed,
            out=Path(out) if out else None,
            builds=Path(builds),
            margin=margin,
            ruler="isolated" if isolated else "sustained",
            sustain_s=sustain_s,
        )
        return T.main(args, _load_chain, _has_gpu)

    _exit_timing(run)


GRAD_HELP = f"""Derive SPEC's fused backward: section from its forward steps.

    Writes the spec with a backward: section in CODA's schedule (each epilogue's backward in the
    epilogue of the dgrad GEMM that produces its gradient, deferred norms by the zdz row dot),
    proven by check --math before it is written. Incoming gradients are named d_<output>.
    {_exits(0, 1, 2, 3)} 2: an invalid spec, or a forward op the derivation cannot handle
    (located, naming the op); 3: the forward fails its own proof (its equivalent_to states
    other math than its steps; nothing written); 1: the derived section failed its own proof
    (never written).
    """


def _out_file(ctx, param, value):
    """An output FILE option (``-`` is stdout): refused (exit 2) when it names a folder or its
    folder does not exist, before anything runs (``coda grad`` proves for seconds first)."""
    if value in (None, "-"):
        return value
    path = Path(value)
    if path.is_dir() or value.endswith(("/", os.sep)):
        raise click.BadParameter(
            f"'{value}' is a folder; give a file name, e.g. {path / 'derived.yaml'}"
        )
    parent = path.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise click.BadParameter(f"the folder '{parent}' {what}; create it first")
    return value


def _csv(ctx, param, value):
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@main.command(
    short_help="Derive a spec's backward: section, proven before it is written.", help=GRAD_HELP
)
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--out",
    default=None,
    callback=_out_file,
    help="Write the spec to this file (default: stdout); its folder must exist.",
)
@click.option(
    "--wrt",
    default=None,
    callback=_csv,
    help="Inputs that get gradients, comma-separated (default: every floating input "
    "not derived and not marked differentiable: false).",
)
@click.option(
    "--from",
    "incoming",
    default=None,
    callback=_csv,
    help="Outputs whose gradients come in (default: every floating output not "
    "marked differentiable: false).",
)
@click.option(
    "--save",
    "policy",
    type=click.Choice(["min", "balanced", "max"]),
    default="min",
    show_default=True,
    help="min: recompute normalized and activated GEMM inputs in dgrad epilogues "
    "(CODA's); balanced: keep the activations; max: keep every GEMM input.",
)
@click.option(
    "--keep",
    default="",
    callback=_csv,
    help="Forward tensors to keep (saved, not recomputed), comma-separated.",
)
@click.option("--replace", is_flag=True, help="Derive in place of an existing backward:.")
def grad(spec, out, wrt, incoming, policy, keep, replace):
    _need_torch("coda grad", "it proves the derived section with check --math")
    try:
        code, _ = run_grad(spec, out, wrt, incoming, policy, keep or (), replace)
    except (SpecError, ToolError, UsageError) as e:
        sys.exit(_report(e, spec))
    sys.exit(code)


@main.command(short_help="Print the spec language's JSON Schema.")
def schema():
    """Print the JSON Schema of spec language v1 (for editors and LLM tools)."""

    click.echo(schema_json(), nl=False)


@main.command(short_help="List the epilogue primitives with an example each.")
def primitives():
    """List every epilogue primitive with its family, one-line summary, an example and where it
    lowers (GEMM epilogues, host steps)."""

    for name, p in sorted(registry().items(), key=lambda kv: (kv[1].family, kv[0])):
        click.echo(f"{p.family:<12} {name:<14} {p.summary}")
        click.echo(f"{'':<27} e.g. {p.example.lstrip('- ')}")
        click.echo(f"{'':<27} lowers in: {p.lowers_in()}")


def run():
    """Console-script entry: no traceback ever reaches the user, and a Ctrl-C exits
    ``EXIT_INTERRUPTED`` from every command (click's own handler would print 'Aborted!' and
    exit 1, so click runs without its standalone mode and its exceptions are handled here)."""
    try:
        rv = main(standalone_mode=False)
    except SystemExit:
        raise
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:  # a usage error: click's message, its exit status (2)
        e.show()
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - the last line of defence
        if os.environ.get("CODA_DEBUG"):
            raise
        click.echo(
            f"coda: internal error: {type(e).__name__}: {e} (set CODA_DEBUG=1 for a traceback)",
            err=True,
        )
        sys.exit(EXIT_TOOL_FAILURE)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


if __name__ == "__main__":
    run()
