"""The versions of coda and of the tools a build depends on (``tool_versions``).

A neutral module: the lowering stamps them into ``kernel.py``'s banner
(``coda_spec.lower.module``), the build hashes them into the content address
(``coda_spec.build``) and the manifest writer records them (``coda_spec.manifest``). It imports
nothing of coda's, so the artifact format and the runtime side never load the lowering to know
them.

It also holds the one statement of the transformers releases ``coda_spec.nn`` supports
(:data:`TRANSFORMERS`): the model refuses others (``coda_spec.nn.llama.require_transformers``),
pyproject's ``[train]`` extra spells the same range (tests/test_nn_call.py compares them), and
CI runs the model's parity tests at both ends (:data:`TRANSFORMERS_TESTED`, ``.ci/run``).
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTIONS = ("coda-spec", "quack-kernels", "nvidia-cutlass-dsl", "apache-tvm-ffi")


# What ``coda --version`` names: coda, the build's tools, and what compiles or runs the rest.
STACK = DISTRIBUTIONS + ("triton", "torch")


# transformers for coda_spec.nn: from the first (major, minor) up to, not including, the second.
# transformers moves internals the model reads (its RoPE init functions, its mask rules) between
# minor releases, so a release past the range is refused until it is tested.
TRANSFORMERS = ((5, 17), (5, 26))
# The releases CI runs tests/test_nn_llama.py under: the test extra's pin, and the newest release
# the package index serves installably (.ci/run's second environment). 5.25.0 needs `kernels`
# >= 0.19.1, which the index does not serve; it passed the same tests installed by hand.
TRANSFORMERS_TESTED = ("5.17.0", "5.24.0")


def release(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string (``"5.24.0"``, ``"5.26.0.dev0"``), or None."""
    parts = text.split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def transformers_range() -> str:
    """The supported range as a pip requirement specifier: ``>=5.17,<5.26``."""
    (a, b), (c, d) = TRANSFORMERS
    return f">={a}.{b},<{c}.{d}"


def unsupported_transformers(installed: str) -> str:
    """Why transformers ``installed`` is refused, or "" where it is in :data:`TRANSFORMERS`."""
    got = release(installed)
    if got is not None and TRANSFORMERS[0] <= got < TRANSFORMERS[1]:
        return ""
    return (
        f"coda_spec.nn supports transformers{transformers_range()}; transformers {installed} is "
        f"installed: pip install 'transformers{transformers_range()}' (the [train] extra: pip "
        f"install 'coda-spec[train]')"
    )


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
