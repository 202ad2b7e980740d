"""The check pipeline as named stages: load -> validate -> normalize -> analyze.

Each stage is a plain function from one typed value to the next, in the style of Triton's
``make_ttir``/``make_ptx``::

    path --load--> Source --validate--> Source --normalize--> Normalized --analyze--> Checked

``CHECK_STAGES`` maps the first rows of the one stage table (``coda_spec.stages``) to these
functions; ``run_stages`` walks that table in order and stops after the stage asked for
(``coda build --stop-after``), so a later stage's errors are not reported. ``check_file`` is all
of them. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from coda_spec import stages
from coda_spec.check.analyze import Analysis, analyze
from coda_spec.check.normalize import normalize
from coda_spec.check.source import Source, load_source
from coda_spec.check.validate import validate_source
from coda_spec.ir import Dim, Spec


@dataclass(frozen=True)
class Normalized:
    """What ``normalize`` produces: the frozen IR, with the source its locations point into."""

    source: Source
    spec: Spec


@dataclass(frozen=True)
class Checked:
    source: Source
    spec: Spec
    analysis: Analysis


def load_stage(path) -> Source:
    return load_source(path)


def validate_stage(src: Source) -> Source:
    validate_source(src)
    return src


def normalize_stage(src: Source) -> Normalized:
    return Normalized(src, normalize(src))


def analyze_stage(n: Normalized) -> Checked:
    return Checked(n.source, n.spec, analyze(n.source, n.spec))


CHECK_STAGES = (
    ("load", load_stage),
    ("validate", validate_stage),
    ("normalize", normalize_stage),
    ("analyze", analyze_stage),
)


def run_stages(path, stop_after: str = stages.LAST_CHECK):
    """Run the check stages on one file up to ``stop_after`` (inclusive) and return that
    stage's value: ``Source`` (load, validate), ``Normalized`` (normalize) or ``Checked``
    (analyze); a build stage past analyze runs them all. Raises SpecError / ToolError."""
    stages.stage(stop_after)  # a ValueError naming the stages for an unknown name
    value = path
    for name, run in CHECK_STAGES:
        value = run(value)
        if name == stop_after:
            break
    return value


def check_source(src: Source) -> Checked:
    """Every check stage after ``load`` on an already-loaded source."""
    return analyze_stage(normalize_stage(validate_stage(src)))


def check_file(path) -> Checked:
    """Run every check stage on one file. Raises SpecError / ToolError."""
    return run_stages(path, stages.LAST_CHECK)


def with_dims(checked: Checked, overrides: dict) -> Checked:
    """Re-analyze with some dims replaced (verify's --dims, small CPU test sizes).

    Overriding a dynamic dim binds nothing (it stays dynamic); shape rules are re-checked.
    """
    unknown = set(overrides) - {d.name for d in checked.spec.dims}
    if unknown:
        raise KeyError(f"unknown dims {sorted(unknown)}")
    dims = tuple(
        Dim(d.name, overrides.get(d.name, d.size) if d.size is not None else None, d.loc)
        for d in checked.spec.dims
    )
    spec = replace(checked.spec, dims=dims)
    return Checked(checked.source, spec, analyze(checked.source, spec))
