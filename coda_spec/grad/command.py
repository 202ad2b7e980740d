"""``coda grad SPEC``: derive, prove, then write; the command's whole flow.

``run_grad(path, ...) -> (exit status, derived or None)``. The spec is checked with its own
``backward:`` cut (``--replace``; without it a spec that has one is refused, so a hand-written
section is never overwritten by accident), the section is derived (``coda_spec.grad``), and
the whole result is checked and proven by ``coda check --math``'s prover before anything is
written: a derived section that fails either is a tool failure (exit 1) and is not written. A
forward that fails its own proof (its ``equivalent_to`` states other math than its steps) is
the spec's error, not the derivation's: it is reported against the spec's lines and exits 3,
nothing written (no backward derived from it can be proven). Before the proof the result is
lowered as ``coda build`` would (``coda_spec.lower.dry_run``, the rule ``coda check`` runs
too): a section the build would refuse is refused (exit 2), not written.
Diagnostics and progress go to stderr; the spec goes to ``out`` (``-`` is stdout).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from coda_spec.check.frontend import check_source
from coda_spec.check.source import load_source, parse_text
from coda_spec.errors import (
    EXIT_INVALID_SPEC,
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_TOOL_FAILURE,
    Diagnostic,
    SpecError,
    UsageError,
    format_path,
    render_text,
)
from coda_spec.grad import POLICIES, derive_text
from coda_spec.grad.facts import Unsupported
from coda_spec.grad.text import without_backward
from coda_spec.lower.dry_run import lowering_refusals
from coda_spec.prove.mathcheck import diagnostics, prove


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _diag(file, lines, d: Diagnostic) -> None:
    _say(render_text(d, lines))


def _refuse(src, line: int, col: int, path: str, message: str, hint: str) -> tuple:
    """Print one located error against the spec's own text; the command's refusal."""
    _say(render_text(Diagnostic(src.file, line, col, path, message, hint), src.lines))
    return EXIT_INVALID_SPEC, None


def _names(checked, names, what: str, allowed, noun: str = "") -> list:
    """``names`` (a flag's list), or a SpecError naming each one not in ``allowed``."""
    bad = [n for n in names if n not in allowed]
    if bad:
        raise SpecError(
            [
                Diagnostic(
                    checked.source.file,
                    0,
                    0,
                    what,
                    f"'{b}' is not {noun or what[2:]}; choose from {', '.join(sorted(allowed))}",
                )
                for b in bad
            ]
        )
    return list(names)


def run_grad(path, out=None, wrt=None, incoming=None, policy="min", keep=(), replace=False):
    start = time.perf_counter()
    src = load_source(path)
    if policy not in POLICIES:
        raise ValueError(f"--save {policy}: choose {', '.join(POLICIES)}")
    if "backward" in src.data and not replace:
        line, col = src.where(("backward",), key=True)
        return _refuse(
            src,
            line,
            col,
            "backward",
            "the spec has a backward: section already",
            "pass --replace to derive a new one in its place, or remove it",
        )
    forward = parse_text(src.file, without_backward(src.text))
    checked = check_source(forward)
    spec = checked.spec
    if spec.equivalent_to is None:
        return _refuse(
            src,
            1,
            1,
            "equivalent_to",
            "the spec has no equivalent_to: nothing can prove a derived backward",
            "add equivalent_to: the unfused math the chain replaces (docs/spec-language.md)",
        )
    floating = {t.name for t in spec.tensors}
    if wrt is not None:
        wrt = _names(checked, wrt, "--wrt", floating)
    if incoming is not None:
        incoming = _names(checked, incoming, "--from", {o.name for o in spec.outputs})
    if keep:  # a tensor the forward reads or writes (an input, an output, a stored value)
        tensors = {t.name for t in checked.analysis.tensors}
        keep = _names(checked, keep, "--keep", tensors, "a tensor of the forward")
    try:
        derived = derive_text(checked, wrt, incoming, policy, keep)
    except Unsupported as e:
        line, col = (e.loc.line, e.loc.col) if e.loc is not None else (0, 0)
        return _refuse(
            src,
            line,
            col,
            format_path(e.loc.path) if e.loc is not None else "",
            f"coda grad cannot derive {e.message}",
            e.hint or "write a backward: section for this kernel by hand",
        )
    target = str(out) if out not in (None, "-") else src.file
    try:
        result = check_source(parse_text(target, derived.text))
    except SpecError as e:
        _say(f"{src.file}: error: coda grad derived an invalid backward (a coda bug):")
        for d in e.diagnostics:
            _diag(d.file, derived.text.splitlines(), d)
        return EXIT_TOOL_FAILURE, derived
    refused = lowering_refusals(result)  # what coda check refuses of it, and build would
    if refused:
        _say(
            f"{src.file}: error: coda build cannot lower the derived backward, so nothing is "
            "written; write a backward: section for these steps by hand:"
        )
        for d in refused:
            _diag(d.file, derived.text.splitlines(), d)
        return EXIT_INVALID_SPEC, None
    report = prove(result, coverage=False)
    if any(p.section == "forward" and not p.ok for p in report.proofs):
        _say(f"{src.file}: error: the forward fails its own proof (coda check --math):")
        for d in diagnostics(result, report):
            if not d.path.startswith("backward"):
                at = Diagnostic(src.file, d.line, d.col, d.path, d.message, d.hint, d.severity)
                _diag(src.file, src.lines, at)
        return EXIT_MISMATCH, None
    if not report.ok:
        _say(f"{src.file}: error: the derived backward fails its own proof (a coda bug):")
        for d in diagnostics(result, report):
            _diag(d.file, derived.text.splitlines(), d)
        return EXIT_TOOL_FAILURE, derived
    if out in (None, "-"):
        sys.stdout.write(derived.text)
    else:
        try:
            Path(out).write_text(derived.text)
        except OSError as e:
            raise UsageError(f"cannot write {out}: {e.strerror or e}", "-o") from e
    _say(
        f"derived: {src.file}: {_n(derived.kernels, 'GEMM kernel')}, "
        f"{_n(derived.hosts, 'host step')}, {_n(derived.finalizes, 'finalize')} "
        f"(--save {policy}); gradients of "
        f"{', '.join(derived.wrt)} from {', '.join('d_' + o for o in derived.incoming)}"
    )
    _say(f"    {report.summary()} ({time.perf_counter() - start:.2f}s)")
    if out not in (None, "-"):
        _say(f"    wrote {out}")
    return EXIT_OK, derived
