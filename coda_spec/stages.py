"""The one stage table: coda's pipeline as named stages, what each produces and keeps.

Pure data; imports nothing of coda's. Where this sits: docs/architecture.md, Layers.

Readers
-------

* ``coda_spec.check.frontend.run_stages`` runs the check stages (``load`` .. ``analyze``) in this
  order, one function per row, and stops after the one asked for;
* ``coda_spec.build`` runs the rest (``lower`` .. ``manifest``), stops where ``--stop-after``
  says and prints which stage it stopped after;
* ``coda build --stop-after``'s choices and help text are the names and ``produces`` below;
* tests/test_stages.py checks that every stage stops there and leaves exactly the files of the
  stages up to it (``keeps``), and that docs/build.md's pipeline table lists these stages.

Contract
--------
``keeps`` are the files (globs, relative to the build directory) a stage leaves in the build
directory. The check stages keep none: the build directory's name is a content address that
covers the lowered source, so it exists only from ``lower`` on; ``lower`` writes the IR of
``normalize`` (``spec.normalized.json``) with its own output. ``compile`` also exports: QuACK's
compiled function is written out as an object file (``export_to_c``), and the guide's "export"
is that half of this stage, not a stage of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    produces: str  # what the stage makes, in a few words (help text, the stop message)
    keeps: tuple  # files (globs) it leaves in the build directory; () = nothing written
    module: str  # where it lives


STAGES = (
    Stage("load", "YAML with source positions", (), "coda_spec.check.source"),
    Stage("validate", "JSON Schema conformance, every error", (), "coda_spec.check.validate"),
    Stage("normalize", "the frozen IR", (), "coda_spec.check.normalize"),
    Stage(
        "analyze",
        "shapes, dtypes, pairing modes and partial buffers, or every semantic error",
        (),
        "coda_spec.check.analyze",
    ),
    Stage(
        "lower",
        "kernel.py, lowered.json and the Triton kernels' source (text only)",
        (
            "build.log",
            "spec.yaml",
            "spec.normalized.json",
            "kernel.py",
            "lowered.json",
            "kernels/*.py",
        ),
        "coda_spec.lower",
    ),
    Stage(
        "compile",
        "one exported .o per kernel (sm_90a) and the Triton cubins",
        ("*.o", "*.compiled.json", "kernels/*.cubin"),
        "coda_spec.lower.quack_adapter",
    ),
    Stage("link", "the shared library <name>.so", ("*.so",), "coda_spec.build"),
    Stage(
        "manifest",
        "manifest.json, which marks the build complete",
        ("manifest.json",),
        "coda_spec.artifact",
    ),
)
NAMES = tuple(s.name for s in STAGES)
LAST_CHECK = "analyze"  # the last stage of coda_spec.check.frontend; nothing is written up to it


def stage(name: str) -> Stage:
    """The stage called ``name``; ValueError naming the stages for any other name."""
    for s in STAGES:
        if s.name == name:
            return s
    raise ValueError(f"unknown stage {name!r}; the stages are {', '.join(NAMES)}")


def index(name: str) -> int:
    return STAGES.index(stage(name))


def reaches(stop_after: str, name: str) -> bool:
    """Whether a run that stops after ``stop_after`` runs stage ``name``."""
    return index(name) <= index(stop_after)


def kept(stop_after: str) -> tuple:
    """The files (globs) a build stopped after ``stop_after`` has in its directory."""
    return tuple(f for s in STAGES[: index(stop_after) + 1] for f in s.keeps)


def help_text() -> str:
    """``--stop-after``'s help: every stage and what it produces."""
    return "Stop after this stage; what the stages so far wrote is kept. " + "; ".join(
        f"{s.name}: {s.produces}" for s in STAGES
    )
