"""Shared test helpers: the repo's paths, the test tiers, golden files, the in-process CLI, and
the one oracle for invalid specs.

Tiers (markers declared in pyproject.toml)
------------------------------------------
* ``slow``: the compile tier (sm_90a compiles through cutlass/quack, Triton AOT cubins, Triton's
  CPU interpreter in a subprocess) and anything else over ~2 s. ``python -m pytest -q -m "not
  slow"`` is the quick loop (about 2 minutes on 2 cores); CI runs everything (``python -m pytest
  -q``).
* ``needs(*modules)``: skipped, naming the missing module, where one of ``modules`` is not
  installed. :data:`needs_build` (``quack`` and ``cutlass``: the ``[build]`` extra) and
  :data:`needs_triton` (``triton``, which comes with that extra) are the two in use; the check is
  ``importlib.util.find_spec``, so nothing is imported to decide.
* ``gpu``: skipped cleanly without a CUDA device; on a GPU machine a test whose build is missing
  FAILS, naming the command that makes it (:func:`need_build`): a GPU run without builds must
  not pass by skipping everything.

Golden files
------------
:func:`assert_golden` compares a text with a checked-in file; ``CODA_UPDATE_GOLDEN=1 python -m
pytest ...`` rewrites the files instead (review the diff). It is the one regeneration switch:
generated kernels, IR dumps and the bad-spec expectations all go through it.

The oracle for invalid specs
----------------------------
:func:`check_oracle` is the one place tests judge what ``coda check`` says about a spec (the
error-message suite tests/test_bad_specs.py, the hostile inputs of tests/test_robustness.py,
the fuzzer tests/test_fuzz.py). It runs the spec through the library's check stages
(``coda_spec.check.frontend.CHECK_STAGES``) and, unless told not to, through ``coda check``
in-process
(text and JSON), and asserts what must hold for EVERY input: no crash (a SpecError or ToolError
only), every diagnostic located inside the file, the CLI's exit code agreeing with the library's
verdict, no traceback printed, and the CLI's diagnostics being exactly the library's. Given an
``expected`` file, it also compares the rendered text with it (via :func:`assert_golden`).
:func:`coda_check` is the CLI half alone, for tests that drive ``coda check`` with options.

Why here: these helpers were copied across test files (a ``_chdir_root`` fixture in five, an
``assert_located`` in two, CLI runners in six); one copy means one behaviour to trust.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from coda_spec.check.frontend import CHECK_STAGES
from coda_spec.check.source import decode_bytes, load_source, parse_text
from coda_spec.cli import main
from coda_spec.errors import (
    EXIT_INVALID_SPEC,
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_TOOL_FAILURE,
    SpecError,
    ToolError,
)

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml"))
SPEC_IDS = [p.stem for p in SPECS]

needs_build = pytest.mark.needs("quack", "cutlass")
needs_triton = pytest.mark.needs("triton")

# The modules the [build] extra brings (named in skip reasons).
BUILD_EXTRA = frozenset({"quack", "cutlass", "triton"})


# -- tiers -------------------------------------------------------------------------------------


def _missing(modules, known: dict) -> list[str]:
    """The modules not installed, looked up once per collection (``known`` caches)."""
    out = []
    for m in modules:
        if m not in known:
            known[m] = importlib.util.find_spec(m) is not None
        if not known[m]:
            out.append(m)
    return out


def pytest_configure(config):
    """Under pytest-xdist, each worker's torch gets its share of the cores (one thread each
    on CI's 2 cores with ``-n auto``), and so do the processes it starts (``OMP_NUM_THREADS``,
    read by a subprocess's torch at import). Two workers each running torch's default one
    thread per core kept twice as many threads as cores busy: a quarter of the reference
    interpreter's CPU time went to contention."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    threads = max(1, (os.cpu_count() or 1) // int(workers))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config, items):
    known: dict[str, bool] = {}
    for item in items:
        for mark in item.iter_markers("needs"):
            missing = _missing(mark.args, known)
            if missing:
                extra = " (the [build] extra)" if set(missing) <= BUILD_EXTRA else ""
                reason = f"needs {', '.join(repr(m) for m in missing)}{extra}: not installed"
                item.add_marker(pytest.mark.skip(reason=reason))
                break
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the lent H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def need_build(name: str, spec: str | None = None) -> Path:
    """``build/<name>-latest`` for a GPU test; a missing build FAILS the test, naming the
    command that makes it (a GPU run without builds must not pass by skipping everything)."""
    d = ROOT / "build" / f"{name}-latest"
    if not (d / "manifest.json").is_file():
        pytest.fail(f"no build of {name}: run `coda build {spec or f'specs/{name}.yaml'}` first")
    return d


# -- small shared fixtures and helpers ---------------------------------------------------------


@pytest.fixture
def at_root(monkeypatch):
    """Run the test from the repo root: spec paths in messages and generated comments are then
    relative (``specs/x.yaml``), as a user's run shows them. Use with
    ``pytestmark = pytest.mark.usefixtures("at_root")``."""
    monkeypatch.chdir(ROOT)


def checked_text(text: str, file: str = "inline.yaml"):
    """Every check stage on an inline spec ``text`` attributed to ``file``; a ``Checked``."""
    from coda_spec.check.frontend import check_source

    return check_source(parse_text(file, text))


def source_pin(obj) -> str:
    """The sha256 prefix of ``obj``'s source: how the tests pin QuACK code coda relies on."""
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


def coda_cli(*args) -> subprocess.CompletedProcess:
    """``python -m coda_spec.cli ARGS`` in a child process from the repo root, output captured:
    the GPU tests run ``coda verify`` this way (a fresh CUDA context per run)."""
    return subprocess.run(
        [sys.executable, "-m", "coda_spec.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


def invoke(*args, catch: bool = True):
    """``coda ARGS`` in-process (``click.testing``); arguments may be paths. The result's
    ``output`` holds stdout and stderr interleaved, as a terminal shows them."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=catch)


def assert_golden(path: Path, text: str) -> None:
    """Compare ``text`` with the golden file, or write it when CODA_UPDATE_GOLDEN=1."""
    if os.environ.get("CODA_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"missing golden {path}; run with CODA_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from its golden file"


# -- the oracle for invalid specs --------------------------------------------------------------

# `coda check`'s last line; its timing varies, so it is cut off before comparing.
SUMMARY = re.compile(
    r"^(\d+) spec\(s\): (\d+) valid[^,]*, (\d+) invalid(?:, \d+ with [^,]*)?, (\d+) error\(s\) "
    r"in \d+\.\d\ds$",
    re.MULTILINE,
)
# The exit codes `coda check` may return at all.
CHECK_EXITS = (EXIT_OK, EXIT_TOOL_FAILURE, EXIT_INVALID_SPEC, EXIT_MISMATCH)


@dataclass(frozen=True)
class CheckRun:
    """What one in-process ``coda check`` returned and printed."""

    exit_code: int
    output: str  # stdout and stderr interleaved
    stdout: str
    stderr: str

    @property
    def summary(self):
        """The summary line's match (groups: specs, valid, invalid, errors), or None."""
        return SUMMARY.search(self.output)

    @property
    def body(self) -> str:
        """The output less the summary line: the rendered diagnostics (and ``ok:`` lines)."""
        s = self.summary
        return self.output[: s.start()] if s else self.output

    @property
    def errors(self) -> int | None:
        s = self.summary
        return int(s.group(4)) if s else None

    def json(self) -> list[dict]:
        """The diagnostics of a ``--format json`` run."""
        return json.loads(self.stdout)


def coda_check(*args, cwd: Path = ROOT) -> CheckRun:
    """``coda check ARGS`` in-process from ``cwd`` (paths in messages are relative to it).

    Asserts what holds for any input: the command ends by exiting (no other exception), with
    one of :data:`CHECK_EXITS`, and prints no Python traceback or internal error."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        result = invoke("check", *args)
    finally:
        os.chdir(here)
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    out = result.output
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    assert result.exit_code in CHECK_EXITS, (result.exit_code, out[-2000:])
    return CheckRun(result.exit_code, out, result.stdout, result.stderr)


@dataclass(frozen=True)
class Verdict:
    """The oracle's finding for one input.

    ``stage`` is ``'valid'``, the check stage that refused the spec (``'load'``,
    ``'validate'``, ``'normalize'``, ``'analyze'``: the rows of ``CHECK_STAGES``) or
    ``'unreadable'`` (a ToolError). ``error`` is the refusal (SpecError or ToolError);
    ``checked`` the ``Checked`` of a valid spec. ``text`` and ``as_json`` are the CLI runs
    (None when the oracle ran the library half only); ``diagnostics`` the library's (a valid
    spec's warnings)."""

    stage: str
    error: Exception | None = None
    checked: object = None
    text: CheckRun | None = None
    as_json: CheckRun | None = None
    diagnostics: tuple = ()

    @property
    def valid(self) -> bool:
        return self.stage == "valid"


def assert_located(e: SpecError, file: str, text: str | None) -> None:
    """Every diagnostic names ``file``, a line within ``text`` (0: the whole file), a column
    >= 0, a spec path and a non-empty message."""
    assert e.diagnostics, "SpecError without diagnostics"
    n_lines = max(1, len(text.splitlines())) if text is not None else None
    for d in e.diagnostics:
        where = f"{d.file}:{d.line}:{d.col}: {d.message[:200]!r}"
        assert d.file == file, where
        assert isinstance(d.line, int) and d.line >= 0, where
        assert isinstance(d.col, int) and d.col >= 0, where
        assert isinstance(d.message, str) and d.message.strip(), where
        assert isinstance(d.path, str) and d.path, where
        if n_lines is not None:
            assert d.line <= n_lines, f"{where} is past the last line ({n_lines})"


def _stages(file: str, data) -> Verdict:
    """The library half: load ``data`` (a path, bytes or text) as ``file`` and walk the check
    stages; crashes propagate."""
    text = None
    try:
        if isinstance(data, Path):
            src = load_source(file)
        else:
            text = decode_bytes(file, data) if isinstance(data, bytes) else data
            src = parse_text(file, text)
    except SpecError as e:
        assert_located(e, file, text)
        return Verdict("load", e, diagnostics=e.diagnostics)
    except ToolError as e:
        return Verdict("unreadable", e)
    value = src
    for name, run in CHECK_STAGES[1:]:
        try:
            value = run(value)
        except SpecError as e:
            assert_located(e, file, src.text)
            return Verdict(name, e, diagnostics=e.diagnostics)
    return Verdict("valid", checked=value, diagnostics=tuple(value.analysis.warnings))


def check_oracle(
    spec: str | Path | None = None,
    *,
    data: bytes | str | None = None,
    name: str = "spec.yaml",
    expected: Path | None = None,
    cli: bool = True,
) -> Verdict:
    """Judge one input the way ``coda check`` sees it; the one oracle for invalid specs.

    The input is a spec file ``spec`` (a path relative to the repo root, or absolute), or
    ``data`` (bytes or text) written to a temporary folder as ``name`` and checked from there,
    so messages name just ``name``. Asserted for every input:

    * the library's check stages accept it or refuse it with a SpecError (ToolError: the file
      cannot be read) whose diagnostics are all located (:func:`assert_located`); any other
      exception is a crash and propagates;
    * with ``cli`` (the default), ``coda check`` in-process, text and ``--format json``: no
      traceback, exit 0 for a valid spec, 2 for an invalid one, 1 for an unreadable one; the
      JSON diagnostics are exactly the library's; the text lists each error and note at its
      ``file:line:col`` in the same order, and its summary counts the errors.

    ``expected``: a file holding exactly what ``coda check`` prints, less the summary line
    (diagnostics with their source line and caret); compared with :func:`assert_golden`, so
    ``CODA_UPDATE_GOLDEN=1`` regenerates it. Returns the :class:`Verdict` for further checks.
    ``cli=False`` runs the library half only (the fuzzer: thousands of examples)."""
    assert (spec is None) != (data is None), "give spec or data"
    if data is None:
        return _judge(str(spec), Path(spec), ROOT, expected, cli)
    if not cli:  # bytes go through the size and encoding gate, text straight to the parser
        assert expected is None, "an expected text needs the CLI"
        return _stages(name, data)
    with tempfile.TemporaryDirectory() as tmp:
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        (Path(tmp) / name).write_bytes(raw)
        return _judge(name, Path(name), Path(tmp), expected, cli)


def _judge(file: str, data, cwd: Path, expected: Path | None, cli: bool) -> Verdict:
    here = os.getcwd()
    os.chdir(cwd)
    try:
        verdict = _stages(file, data)
    finally:
        os.chdir(here)
    if not cli:
        assert expected is None, "an expected text needs the CLI"
        return verdict
    want = {"valid": EXIT_OK, "unreadable": EXIT_TOOL_FAILURE}.get(verdict.stage, EXIT_INVALID_SPEC)
    text = coda_check(file, cwd=cwd)
    assert text.exit_code == want, f"{verdict.stage}: exit {text.exit_code}\n{text.output[-2000:]}"
    as_json = coda_check("--format", "json", file, cwd=cwd)
    assert as_json.exit_code == want, as_json.output[-2000:]
    diags = as_json.json()
    if verdict.stage != "unreadable":
        assert diags == [d.to_json() for d in verdict.diagnostics], verdict.stage
        heads = [
            ln
            for ln in text.body.splitlines()
            if ln.startswith(f"{file}:") and (": error: " in ln or ": note: " in ln)
        ]
        located = [
            f"{file}:{d.line}:{d.col}: {d.severity}: " if d.line else f"{file}: {d.severity}: "
            for d in verdict.diagnostics
            if d.severity != "warning"
        ]
        assert [h[: len(p)] for h, p in zip(heads, located, strict=False)] == located, heads
        assert len(heads) == len(located), heads
        n_errors = sum(d.severity == "error" for d in verdict.diagnostics)
        assert text.errors == n_errors or (n_errors == 0 and text.errors is None), text.output
    if expected is not None:
        assert_golden(expected, text.body)
    return Verdict(
        verdict.stage, verdict.error, verdict.checked, text, as_json, verdict.diagnostics
    )
