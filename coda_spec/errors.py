"""Diagnostics: located, collected, rendered the way compilers render them.

Contract
--------
Every user-facing problem is a :class:`Diagnostic` carrying the file, a 1-based line and column,
the *spec path* (``steps[0].epilogue[1]``), a message, and an optional hint (usually a
did-you-mean). A phase collects all of its diagnostics and raises one :class:`SpecError`
holding them, so the user sees every problem of that phase at once. The CLI renders them as

    specs/x.yaml:4:9: error: steps[0].epilogue[1]: unknown primitive 'rleu'; did you mean 'relu'?
        - {rleu: acc, as: y}
           ^

or as JSON (``--format json``). A diagnostic's severity is ``error``, ``warning`` or ``note``; a
note follows the error it explains and points at a second place, the way compilers point at a
declaration (``specs/x.yaml:7:18: note: tensors.w.shape[0]: ...``). Only errors make a spec
invalid. Nothing here imports torch, yaml or jsonschema.

Exit codes
----------
Every exit status any coda process returns -- the ``coda`` commands, ``python -m
coda_spec.docgen --check``, the compile worker ``python -m coda_spec.lower.quack_adapter`` -- is
one row of :data:`EXIT_CODES`, named by an ``EXIT_*`` constant; nothing else spells a number.
The table is the one home of each status's meaning: the ``coda`` help texts quote it and
tests/test_exit_codes.py checks docs/ci.md's table row by row against it. The codes are stable
(CI scripts branch on them); a new one is a new row here, in docs/ci.md and in the CHANGELOG.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ExitCode:
    """One process exit status: its number, its constant's name, a few words (help texts) and
    what it means (docs/ci.md's table holds the same words)."""

    code: int
    name: str
    short: str
    means: str


EXIT_OK = 0
EXIT_TOOL_FAILURE = 1
EXIT_INVALID_SPEC = 2
EXIT_MISMATCH = 3
EXIT_NO_GPU = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT: the shell's convention for a Ctrl-C

EXIT_CODES = (
    ExitCode(EXIT_OK, "EXIT_OK", "ok", "everything checked passed"),
    ExitCode(
        EXIT_TOOL_FAILURE,
        "EXIT_TOOL_FAILURE",
        "tool failure",
        "coda or something it drives failed: an unreadable file, a missing package, a compiler "
        "crash, a stale generated doc (docgen --check); the spec may be fine",
    ),
    ExitCode(
        EXIT_INVALID_SPEC,
        "EXIT_INVALID_SPEC",
        "invalid spec",
        "located spec errors, a config a primitive cannot support, or bad arguments",
    ),
    ExitCode(
        EXIT_MISMATCH,
        "EXIT_MISMATCH",
        "wrong math or numerics",
        "check --math: the math differs from equivalent_to or autograd; verify: a kernel output "
        "is out of bound or unwritten",
    ),
    ExitCode(
        EXIT_NO_GPU,
        "EXIT_NO_GPU",
        "no GPU",
        "verify, bench or tune found no CUDA GPU: nothing ran on one",
    ),
    ExitCode(
        EXIT_INTERRUPTED, "EXIT_INTERRUPTED", "interrupted", "stopped by Ctrl-C (128 + SIGINT)"
    ),
)


def exit_summary(*codes: int) -> str:
    """``0 ok, 1 tool failure, ...``: the table (or the rows of ``codes``, in table order) in
    one line, for help texts."""
    return ", ".join(f"{e.code} {e.short}" for e in EXIT_CODES if not codes or e.code in codes)


@dataclass(frozen=True)
class Diagnostic:
    """One located problem. ``line``/``col`` are 1-based; 0 means "whole file"."""

    file: str
    line: int
    col: int
    path: str
    message: str
    hint: str = ""
    severity: str = "error"  # error | warning | note

    def to_json(self) -> dict:
        return asdict(self)


class SpecError(Exception):
    """A spec is invalid. Holds every diagnostic of the phase that found the problems."""

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]):
        self.diagnostics = tuple(diagnostics)
        errors = [d for d in self.diagnostics if d.severity == "error"] or self.diagnostics
        first = errors[0].message if errors else "invalid spec"
        super().__init__(f"{len(errors)} error(s); first: {first}")


class ItemError(Exception):
    """One spec item cannot be typed or lowered: raised by a primitive's ``infer``, ``lower``
    or ``host`` (and the contexts they use); the stage that called it adds the location and
    reports a :class:`Diagnostic`. ``key`` names the item's field at fault (for the caret);
    ``width`` is the tile width at fault when the problem is that width (analyze traces it to a
    declared shape and adds a note there). One class for the three uses: typing, the CuTe
    lowering and the host (Triton) lowering ask the same of a refusal."""

    def __init__(
        self, message: str, key: str | None = None, hint: str = "", width: int | None = None
    ):
        super().__init__(message)
        self.message, self.key, self.hint, self.width = message, key, hint, width


class ToolError(Exception):
    """coda itself (or something it drives) failed; the spec may be fine. Exit code 1."""


class UsageError(ValueError):
    """Bad arguments or targets: a path that is neither a build nor a spec, a folder without
    specs, a spec whose newest build is of other content (run ``coda build``). Exit code 2.
    ``where``: the argument at fault (printed first: ``WHERE: error: MESSAGE``)."""

    def __init__(self, message: str, where=None):
        super().__init__(message)
        self.where = where


def exit_status(exc: BaseException) -> int:
    """The one exception -> exit status rule of every coda command (``EXIT_CODES``).

    A Ctrl-C is ``EXIT_INTERRUPTED``; an invalid spec (:class:`SpecError`) and bad arguments or
    targets (:class:`UsageError`, and any ``ValueError``: what argument parsers raise) are
    ``EXIT_INVALID_SPEC``; everything else -- :class:`ToolError`, ``OSError``, the runtime's
    refusals, a bug -- is ``EXIT_TOOL_FAILURE``. ``ToolError`` is tested before ``ValueError``
    so that a tool failure that also is a ``ValueError`` stays one."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, (SpecError, UsageError)):
        return EXIT_INVALID_SPEC
    if isinstance(exc, ToolError):
        return EXIT_TOOL_FAILURE
    if isinstance(exc, ValueError):
        return EXIT_INVALID_SPEC
    return EXIT_TOOL_FAILURE


def in_order(diags) -> list[Diagnostic]:
    """Sort by position; each note stays right after the diagnostic it was added after."""
    groups: list[list[Diagnostic]] = []
    for d in diags:
        if d.severity == "note" and groups:
            groups[-1].append(d)
        else:
            groups.append([d])
    groups.sort(key=lambda g: (g[0].line, g[0].col))
    return [d for g in groups for d in g]


def did_you_mean(word: str, candidates, n: int = 1) -> str:
    """Return ``"did you mean 'x'?"`` for the closest candidate, or ``""``."""
    close = closest(word, candidates, n)
    if not close:
        return ""
    return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"


def closest(word: str, candidates, n: int = 1) -> list[str]:
    """The (at most ``n``) candidates ``word`` is most likely a misspelling of."""
    pool = sorted({str(c) for c in candidates})
    close = difflib.get_close_matches(str(word), pool, n=n, cutoff=0.6)
    if not close and len(str(word)) >= 3:
        # Prefix/containment matches catch abbreviations such as 'rsqrt_m' -> 'rsqrt_mean'.
        close = [c for c in pool if c.startswith(str(word)) or str(word) in c][:n]
    if not close and len(str(word)) >= 2:
        # One edit away: short names such as 'x2' -> 'x1' fall under difflib's cutoff.
        close = [c for c in pool if _one_edit(str(word), c)][:n]
    return close


def _one_edit(a: str, b: str) -> bool:
    """True when ``b`` is one substitution, insertion, deletion or swap away from ``a``."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def format_path(path: tuple) -> str:
    """``('steps', 0, 'epilogue', 1)`` -> ``steps[0].epilogue[1]``; ``()`` -> ``<root>``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<root>"


def render_text(diag: Diagnostic, source_lines: list[str] | None) -> str:
    """Render one diagnostic with its source line and a caret under the column."""
    where = f"{diag.file}:{diag.line}:{diag.col}" if diag.line else diag.file
    msg = f"{where}: {diag.severity}: {diag.path}: {diag.message}"
    if diag.hint:
        msg += f"; {diag.hint}"
    if source_lines and 0 < diag.line <= len(source_lines):
        text = source_lines[diag.line - 1].rstrip("\n")
        if len(text) > 200:
            text = text[:200] + " ..."
        caret = " " * max(diag.col - 1, 0) + "^"
        msg += f"\n    {text}\n    {caret}"
    return msg
