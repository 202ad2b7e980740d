"""What a backward section costs, counted from its steps: for comparing derived and hand-written.

``section_cost(checked)`` works on any checked spec with a ``backward:`` section. It counts the
section's GEMM kernels, host steps and finalizes, the bytes per token row the forward saves for
it (forward-produced ``[M, ...]`` tensors the section reads), and the bytes per row it moves:
every ``[M, ...]`` tensor a step reads (a GEMM operand, a tile or per-row load) or writes (a
store; an ``add_to`` store reads and writes). Weights and per-column vectors are left out: they
do not grow with the tokens. It is a model of traffic, not a measurement; ``coda bench`` times.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda_spec.dtypes import element_bytes
from coda_spec.ir import Finalize, Host, Kernel


@dataclass(frozen=True)
class Cost:
    kernels: int
    hosts: int
    finalizes: int
    saved: int  # bytes per row the forward keeps for the section
    moved: int  # bytes per row the section reads and writes


def _row_bytes(info) -> int:
    if info is None or not info.shape or not isinstance(info.shape[0], str):
        return 0
    width = 1
    for d in info.shape[1:]:
        width *= d if isinstance(d, int) else 1
    return width * element_bytes(info.dtype)


def section_cost(checked) -> Cost:
    a, bw = checked.analysis, checked.spec.backward
    rows = lambda name: _row_bytes(a.info(name.removesuffix(".T")))  # noqa: E731
    moved = 0
    for step in bw.steps:
        if isinstance(step, Finalize):
            continue
        if isinstance(step, Kernel):
            moved += rows(step.gemm.a.name) + rows(step.gemm.b.name)
        for op in step.ops:
            if op.prim in ("load_tile", "load_col"):
                moved += rows(op.get(op.prim))
            elif op.prim == "store":
                target = op.get("to") or op.get("store")
                moved += rows(target) * (2 if op.get("add_to") else 1)
    saved = sum(rows(t) for t in bw.save if a.info(t) is not None and a.info(t).origin != "input")
    return Cost(
        sum(isinstance(s, Kernel) for s in bw.steps),
        sum(isinstance(s, Host) for s in bw.steps),
        sum(isinstance(s, Finalize) for s in bw.steps),
        saved,
        moved,
    )
