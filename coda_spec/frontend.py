"""The check pipeline as named stages: load -> validate -> normalize -> analyze.

Each stage is a plain function from one typed value to the next (``Source`` -> ``Source`` ->
``Spec`` -> ``Analysis``), in the style of Triton's ``make_ttir``/``make_ptx``; ``check_file``
chains them and ``--stop-after`` (build) cuts the chain by name. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from coda_spec.analyze import Analysis, analyze
from coda_spec.ir import Dim, Spec
from coda_spec.normalize import normalize
from coda_spec.source import Source, load_source
from coda_spec.validate import validate_source


@dataclass(frozen=True)
class Checked:
    source: Source
    spec: Spec
    analysis: Analysis


def run_stages(path, stop_after: str = "analyze"):
    """Run the check stages on one file up to ``stop_after`` (inclusive) and return that
    stage's value: the loaded ``Source`` (load, validate), the ``Spec`` (normalize) or the
    ``Checked`` spec (analyze). Later stages do not run, so their errors are not reported."""
    src = load_source(path)
    if stop_after == "load":
        return src
    validate_source(src)
    if stop_after == "validate":
        return src
    spec = normalize(src)
    if stop_after == "normalize":
        return spec
    return Checked(src, spec, analyze(src, spec))


def check_source(src: Source) -> Checked:
    validate_source(src)
    spec = normalize(src)
    return Checked(src, spec, analyze(src, spec))


def check_file(path) -> Checked:
    """Run every check stage on one file. Raises SpecError / ToolError."""
    return check_source(load_source(path))


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
