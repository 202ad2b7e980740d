"""What ``coda build``'s lower stage refuses, asked of a checked spec without building it.

``coda check`` (``cli.check``) and ``coda grad`` (before it writes) run :func:`lowering_refusals`
on every spec the front end calls valid, so that what ``check`` accepts, ``build`` lowers: the
rule set is the lowering itself, not a second copy of it. It generates the text ``build``
generates -- every GEMM kernel's epilogue (``lower.module.lower_spec``, at the spec's fallback
config) and every host step's Triton kernel (``lower.host_kernel.host_kernel``) -- and returns
their located refusals; nothing is compiled and nothing is written (pure text, no torch, Triton,
QuACK or cutlass import: ``tests/test_robustness.py`` keeps ``check`` free of them).

The front end's own walk (``check.lowering``) answers most of these first, with the same
messages; this is the net under it, for refusals the walk does not re-state (a host body the
scheduler cannot place, a primitive without a host lowering). What only QuACK's compile can
refuse is the build's; ``tests/test_check_build_agree.py`` builds a sample of specs fully so
that a new one of those is found.
"""

from __future__ import annotations

from coda_spec.config import DEFAULT, parse_config
from coda_spec.errors import Diagnostic, SpecError
from coda_spec.lower.host_kernel import host_kernel
from coda_spec.lower.module import lower_spec


def lowering_refusals(checked) -> list[Diagnostic]:
    """The diagnostics ``coda build``'s lower stage would give ``checked`` (empty: it lowers)."""
    spec = checked.spec
    config = parse_config(spec.configs[0]) if spec.configs else DEFAULT
    out: list[Diagnostic] = []
    try:
        lower_spec(checked, config)
    except SpecError as e:
        out.extend(e.diagnostics)
    for step in spec.all_steps():
        if step.kind != "host":
            continue
        try:
            host_kernel(checked, step)
        except SpecError as e:
            out.extend(e.diagnostics)
    return out
