"""The ``coda`` command line.

Commands: ``check`` (validate specs, located errors; ``--math`` adds the fp64 algebra proof of
``coda_spec.mathcheck``), ``build`` (``coda_spec.build``), ``verify`` (``coda_spec.verify``),
``bench`` (``coda_spec.bench``), ``tune`` (``coda_spec.tune``), ``schema`` (print the JSON
Schema), ``primitives`` (list the registry). Every exit status is a row of the one exit-code
table, ``coda_spec.errors.EXIT_CODES`` (the group's help quotes it); ``--stop-after``'s choices
and help are the one stage table, ``coda_spec.stages.STAGES``. No Python traceback reaches a
user: unexpected failures print one line and exit ``EXIT_TOOL_FAILURE`` (set ``CODA_DEBUG=1``
to see the traceback), a Ctrl-C exits ``EXIT_INTERRUPTED``. ``check`` without ``--math`` imports
neither torch nor quack; every command imports what it needs inside its own body.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from coda_spec import stages
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
    exit_summary,
    render_text,
)
from coda_spec.tune import DEFAULT_MARGIN as TUNE_MARGIN
from coda_spec.tune import DEFAULT_ROUNDS as TUNE_ROUNDS

SPEC_SUFFIXES = (".yaml", ".yml")


def expand_paths(paths) -> list[Path]:
    """Files as given; folders searched recursively for *.yaml / *.yml, sorted."""
    out = []
    for p in map(Path, paths):
        try:
            is_dir = p.is_dir()
        except OSError:  # e.g. a name too long: let the loader report it
            is_dir = False
        if is_dir:
            out += sorted(f for f in p.rglob("*") if f.suffix in SPEC_SUFFIXES and f.is_file())
        else:
            out.append(p)
    return out


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, help=MAIN_HELP)
@click.version_option(package_name="coda-spec", prog_name="coda")
def main():
    pass


@main.command(short_help="Validate specs; with --math, prove their math on CPU.")
@click.argument("paths", nargs=-1, required=True)
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
def check(paths, fmt, quiet, math):
    """Validate spec files (or folders of them): schema first, then semantics.

    Every error is reported as FILE:LINE:COL: error: SPEC_PATH: MESSAGE; HINT. With --math, each
    valid spec's math is also proven (see coda_spec.mathcheck). Exit status: 0 all valid (and
    proven), 2 some spec invalid, 3 some spec's math is wrong or unproven, 1 a file could not
    be read or torch is missing.
    """
    from coda_spec.frontend import check_file
    from coda_spec.source import load_source

    start = time.perf_counter()
    files = expand_paths(paths)
    diags: list[Diagnostic] = []
    tool_failed, invalid, ok, wrong = False, 0, 0, 0
    prover = _prover() if math else None
    lines_of: dict = {}
    if not files:
        click.echo(f"error: no spec files under {' '.join(paths)}", err=True)
        sys.exit(EXIT_TOOL_FAILURE)
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
        diags.extend(checked.analysis.warnings)
        lines_of[str(f)] = checked.source.lines
        report = prover(checked) if prover else None
        if report is not None and not report.ok:
            from coda_spec.mathcheck import diagnostics

            wrong += 1
            diags.extend(diagnostics(checked, report))
            continue
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


def _need_torch(command: str, why: str) -> None:
    """Exit 1 with how to install torch when it is missing (it is not a base dependency)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        click.echo(
            f'error: {command} needs PyTorch ({why}): pip install "coda-spec[math]", or the '
            'CPU build alone: pip install "torch==2.13.0" --index-url '
            "https://download.pytorch.org/whl/cpu",
            err=True,
        )
        sys.exit(EXIT_TOOL_FAILURE)


def _prover():
    """``mathcheck.prove``, or exit 1 with how to install torch (``--math`` needs it)."""
    _need_torch("coda check --math", "the CPU build is enough")
    from coda_spec.mathcheck import prove

    return prove


def _raw_lines(path) -> list[str] | None:
    from coda_spec.source import MAX_BYTES

    try:
        with open(path, "rb") as f:  # bounded, like the loader
            raw = f.read(MAX_BYTES + 1)
    except (OSError, ValueError):
        return None
    return raw.decode("utf-8", errors="replace").splitlines()


@main.command(short_help="Compile specs into a loadable sm_90a library (no GPU needed).")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--out", default="build", show_default=True, help="Build root directory.")
@click.option(
    "--config",
    "config_text",
    default=None,
    help="Tile/cluster/schedule, e.g. 128x256,cluster=2x1,cooperative (the default); several "
    "candidates separated by ';' (the first is the fallback), or 'auto'; coda tune picks among "
    "them per kernel and shape.",
)
@click.option(
    "--stop-after",
    type=click.Choice(stages.NAMES),
    default=stages.NAMES[-1],
    show_default=True,
    help=stages.help_text(),
)
@click.option("--prune", is_flag=True, help="Remove stale builds of the same specs afterwards.")
@click.option(
    "-j", "--jobs", default=2, show_default=True, help="Parallel compile workers (~750 MB each)."
)
@click.option("--force", is_flag=True, help="Rebuild even when a complete build exists.")
@click.option("--print-dir", is_flag=True, help="Print only the build directory of each spec.")
def build(paths, out, config_text, stop_after, prune, jobs, force, print_dir):
    """Compile specs for sm_90a (no GPU needed) into build/<name>-<hash>/.

    Exit status: 0 built (or cache hit), 2 invalid spec or config a primitive cannot support,
    1 tool failure.
    """
    from coda_spec.build import BuildOptions, build_spec
    from coda_spec.build import prune as prune_builds
    from coda_spec.config import parse_configs

    try:
        configs = parse_configs(config_text)
    except ValueError as e:
        click.echo(f"error: --config: {e}", err=True)
        sys.exit(EXIT_INVALID_SPEC)
    opts = BuildOptions(
        out=Path(out),
        config=configs[0],
        configs=configs if len(configs) > 1 else (),
        stop_after=stop_after,
        jobs=jobs,
        force=force,
    )
    status, keep = EXIT_OK, {}
    for f in expand_paths(paths):
        try:
            res = build_spec(f, opts)
        except SpecError as e:
            lines = _raw_lines(f)
            for d in e.diagnostics:
                click.echo(render_text(d, lines), err=True)
            status = max(status, EXIT_INVALID_SPEC)
            continue
        except ToolError as e:
            click.echo(f"{f}: error: {e}", err=True)
            status = EXIT_TOOL_FAILURE if status == EXIT_OK else status
            continue
        keep[res.name] = res.directory
        if print_dir:
            click.echo(str(res.directory))
    if prune:
        for d in prune_builds(Path(out), keep):
            click.echo(f"pruned {d}")
    sys.exit(status)


@main.command(short_help="Test built kernels against the spec's math on a CUDA GPU.")
@click.argument("targets", nargs=-1, required=True)
@click.option(
    "-o",
    "--out",
    default="build",
    show_default=True,
    help="Where a SPEC's latest build is looked up.",
)
@click.option("--seed", type=int, default=None, help="Replay a run (default: a fresh seed).")
@click.option("--dims", "dims_text", default=None, help="One shape case, e.g. M=4096,D=1000.")
@click.option("--small", is_flag=True, help="Only the small case (M=64).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
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
    targets, out, seed, dims_text, small, fmt, junit_path, allow_no_gpu, sanitize, reference_spec
):
    """Check built kernels against the spec's reference math on a CUDA GPU (never compiles).

    TARGETS are build directories or spec files (their latest build under --out). Exit status:
    0 all pass, 3 numeric failure, 2 invalid spec, 1 tool error, 4 no GPU.
    """
    import os as _os

    _need_torch("coda verify", "on a GPU machine, the CUDA build you already use")
    from coda_spec import verify as V
    from coda_spec import verify_report as R
    from coda_spec.runtime import CodaRuntimeError
    from coda_spec.verify_sanitize import sanitize as run_sanitizer

    if seed is None:
        seed = int.from_bytes(_os.urandom(4), "little")
    dims = None
    if dims_text:
        try:
            dims = {k.strip(): int(v) for k, v in (p.split("=") for p in dims_text.split(","))}
        except ValueError:
            click.echo(f"error: --dims {dims_text!r}: expected NAME=INT,...", err=True)
            sys.exit(EXIT_INVALID_SPEC)
    reports, status = [], EXIT_OK
    reference = None
    if reference_spec:
        from coda_spec.frontend import check_file

        reference = check_file(reference_spec)
    for t in targets:
        try:
            directory = V.resolve(t, Path(out))
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
        except SpecError as e:
            for d in e.diagnostics:
                click.echo(render_text(d, _raw_lines(d.file)), err=True)
            status = _worse(status, EXIT_INVALID_SPEC)
            continue
        except (ToolError, CodaRuntimeError, FileNotFoundError, ValueError) as e:
            click.echo(f"{t}: error: {e}", err=True)
            status = _worse(status, EXIT_TOOL_FAILURE)
            continue
        if sanitize:
            san = run_sanitizer(directory, seed)
            rep = R.with_replaced(rep, extra={**rep.extra, "sanitizer": san})
            if san["result"] == "unclean":
                status = _worse(status, EXIT_MISMATCH)
        reports.append(rep)
        if fmt == "text":
            click.echo(R.render_table(rep))
    if fmt == "json":
        import dataclasses

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
        click.option("--dims", "dims_text", default=None, help="Static dims, e.g. D=2048,F=5632."),
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
            default=20,
            show_default=True,
            help="Interleaved timing rounds (samples per candidate).",
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
            "--builds", default="build", show_default=True, help="Where specs' builds are."
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _exit_timing(run) -> None:
    """Run a GPU command's body (``run() -> status``) and exit with its status; bad arguments
    exit 2, tool failures 1, each with one line and no traceback."""
    from coda_spec.runtime import CodaRuntimeError

    try:
        status = run()
    except SpecError as e:
        for d in e.diagnostics:
            click.echo(render_text(d, _raw_lines(d.file)), err=True)
        status = EXIT_INVALID_SPEC
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        status = EXIT_INVALID_SPEC
    except (ToolError, CodaRuntimeError, OSError) as e:
        click.echo(f"error: {e}", err=True)
        status = EXIT_TOOL_FAILURE
    sys.exit(status)


@main.command(short_help="Time built chains against cuBLAS SoL, eager, torch.compile, Liger.")
@click.argument("targets", nargs=-1)
@_timing_options
@click.option(
    "--baselines",
    default="eager,compile,liger",
    show_default=True,
    help="Baselines to time (any of eager, compile, liger; 'none' for SoL only).",
)
@click.option("--no-kernels", is_flag=True, help="Do not time each coda kernel alone.")
@click.option("--out", default=None, help="Results directory [default: build/bench].")
@click.option("--compare", default=None, help="An earlier results JSON to compare against.")
@click.option("--plot", default=None, help="Draw one PNG per chain from this results JSON.")
@click.option("--markdown", is_flag=True, help="Results mode: print the summary as markdown.")
def bench(
    targets,
    m_text,
    dims_text,
    width_text,
    baselines,
    rounds,
    warmup,
    seed,
    no_kernels,
    out,
    builds,
    compare,
    plot,
    markdown,
):
    """Time built chains on a CUDA GPU (never compiles coda kernels).

    TARGETS are build directories, spec files (their latest build under --builds), or results
    .json files from an earlier run (re-rendered, no GPU). Exit status: 0 ok, 1 tool failure,
    2 invalid arguments, 4 no GPU.
    """
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
            dims=C.parse_dims(dims_text),
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
        )
        return C.main(args, _load_chain, _has_gpu)

    _exit_timing(run)


@main.command(
    short_help="Pick each kernel's fastest tile-config variant per shape.",
    # more rounds than bench's 20: picks within a few percent need them (docs/tuning.md)
    context_settings={"default_map": {"rounds": TUNE_ROUNDS}},
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
def tune(targets, m_text, dims_text, width_text, rounds, warmup, seed, out, builds, margin):
    """Time every variant of each multi-variant kernel on a CUDA GPU; record the pick.

    TARGETS are build directories or spec files (their latest build under --builds). A variant
    other than the fallback (the build's first config) is picked only if it is clearly faster
    (--margin); the picks are merged into --out, keyed by build directory name; coda_spec.load
    uses them (see docs/tuning.md). Exit status: 0 ok, 1 tool failure, 2 invalid arguments,
    4 no GPU.
    """
    _need_torch("coda tune", "on a GPU machine, the CUDA build you already use")
    from coda_spec import tune as T
    from coda_spec.bench import command as C

    def run() -> int:
        args = T.Args(
            targets=tuple(targets),
            ms=C.parse_ints(m_text, "--m"),
            dims=C.parse_dims(dims_text),
            widths=C.parse_ints(width_text, "--width"),
            rounds=rounds,
            warmup=warmup,
            seed=seed,
            out=Path(out) if out else None,
            builds=Path(builds),
            margin=margin,
        )
        return T.main(args, _load_chain, _has_gpu)

    _exit_timing(run)


@main.command(short_help="Print the spec language's JSON Schema.")
def schema():
    """Print the JSON Schema of spec language v1 (for editors and LLM tools)."""
    from coda_spec.schema import schema_json

    click.echo(schema_json(), nl=False)


@main.command(short_help="List the epilogue primitives with an example each.")
def primitives():
    """List every epilogue primitive with its family and one-line summary."""
    from coda_spec.primitives import registry

    for name, p in sorted(registry().items(), key=lambda kv: (kv[1].family, kv[0])):
        click.echo(f"{p.family:<12} {name:<14} {p.summary}")
        click.echo(f"{'':<27} e.g. {p.example.lstrip('- ')}")


def run():
    """Console-script entry: no traceback ever reaches the user."""
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # noqa: BLE001 - the last line of defence
        if os.environ.get("CODA_DEBUG"):
            raise
        click.echo(
            f"coda: internal error: {type(e).__name__}: {e} (set CODA_DEBUG=1 for a traceback)",
            err=True,
        )
        sys.exit(EXIT_TOOL_FAILURE)


if __name__ == "__main__":
    run()
