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


def tool_versions() -> dict:
    """{distribution: installed version, or "not installed"} for ``DISTRIBUTIONS``."""
    out = {}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
