"""The values the derivation builds: gradient terms, emitted items and steps.

Plain records shared by the schedule (``coda_spec.grad.derive``), the step builder
(``coda_spec.grad.step``) and the writer (``coda_spec.grad.text``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Term:
    name: str
    load: str | None = None  # load_tile | load_col: a tensor in memory; None: a step value
    sign: int = 1


@dataclass
class Item:
    fields: list  # [(key, value), ...], the primitive first
    note: str = ""


@dataclass
class BStep:
    kind: str  # kernel | host | finalize
    name: str
    head: list  # kernel: [("gemm", {a, b})]; host: [("over", t)]; finalize: its fields
    items: list = field(default_factory=list)
    note: str = ""


class Unavailable(Exception):
    """A forward value the current backward step cannot read or recompute; ``hint``: the fix."""

    def __init__(self, what: str, hint: str = ""):
        super().__init__(what)
        self.hint = hint
