"""A command's target, a build directory or a spec file, resolved to a build directory.

``verify``, ``bench`` and ``tune`` take either. A spec file names its ``-latest`` build under the
build root (the layout: ``coda_spec.artifact.builddir``), which must have been built from the
spec's current content: a spec whose newest build was made from other content is refused
(``UsageError``, exit 2), so they never check an old build in its place. Resolving a spec runs
the front end (it needs the spec's name and digest), which is why this lives in ``check`` and
not beside the layout, which the runtime reads.
"""

from __future__ import annotations

from pathlib import Path

from coda_spec.artifact import MANIFEST
from coda_spec.artifact.builddir import latest, record
from coda_spec.check.frontend import check_file
from coda_spec.check.source import SPEC_SUFFIXES
from coda_spec.errors import UsageError


def resolve(target, out: Path = Path("build"), command: str = "verify") -> Path:
    """A build directory, or a spec file -> its ``-latest`` build under ``out``, which must have
    been built from the spec's current content (never compiles, never falls back to an old
    build). Raises ``UsageError`` (exit 2) for a target that is neither, a spec without a build
    and a spec whose newest build differs from it; ``SpecError`` for an invalid spec."""

    p = Path(target)
    if p.is_dir() and (p / MANIFEST).is_file():
        return p
    if p.suffix in SPEC_SUFFIXES and p.exists() and not p.is_dir():
        spec = check_file(p).spec
        link = latest(out, spec.name)
        if not (link / MANIFEST).is_file():
            raise UsageError(
                f"no build of '{spec.name}' under {out}/; run coda build first "
                f"({command} never compiles)",
                target,
            )
        built = record(link) or {}
        if built.get("digest") != spec.digest:
            raise UsageError(
                f"the newest build of '{spec.name}', {link} -> "
                f"{link.resolve().name} (built from {built.get('spec_file', '?')}), differs "
                f"from the spec's current content; run coda build {target}"
                + ("" if Path(out) == Path("build") else f" -o {out}")
                + f" first ({command} never checks an old build in its place)",
                target,
            )
        return link
    if not p.exists():
        raise UsageError("no such build directory or spec file", target)
    raise UsageError(f"not a build directory (no {MANIFEST}) nor a spec file", target)
