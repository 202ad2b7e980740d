"""The versions of coda and of the tools a build depends on (``tool_versions``).

A neutral module: the lowering stamps them into ``kernel.py``'s banner
(``coda_spec.lower.module``), the build hashes them into the content address
(``coda_spec.build``) and the manifest writer records them (``coda_spec.manifest``). It imports
nothing of coda's, so the artifact format and the runtime side never load the lowering to know
them.
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTIONS = ("coda-spec", "quack-kernels", "nvidia-cutlass-dsl", "apache-tvm-ffi")


# What ``coda --version`` names: coda, the build's tools, and what compiles or runs the rest.
STACK = DISTRIBUTIONS + ("triton", "torch")


def version(dist: str) -> str:
    """The installed version of distribution ``dist`` (package metadata: nothing is imported),
    or "not installed"."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def tool_versions() -> dict:
    """{distribution: installed version, or "not installed"} for ``DISTRIBUTIONS``."""
    return {dist: version(dist) for dist in DISTRIBUTIONS}


def stack_versions() -> list[tuple[str, str]]:
    """(name, version) for ``coda --version``: ``coda`` first, then ``STACK``."""
    return [("coda", version("coda-spec"))] + [(d, version(d)) for d in STACK[1:]]
