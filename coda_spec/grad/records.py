"""The values the derivation builds: gradient terms, emitted items and steps.

Plain records shared by the schedule (``coda_spec.grad.derive``), the step builder
(``coda_spec.grad.step``, with ``special`` and ``finish``) and the writer
(``coda_spec.grad.text``), and :class:`DerivationView`, the one interface between the schedule
and a step it builds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

LOADS = ("load_tile", "load_row", "load_col", "load_scalar")


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


@dataclass(frozen=True, eq=False)
class DerivationView:
    """What a backward step sees of the derivation (``Derivation.view()``, one per step).

    Exactly what :class:`~coda_spec.grad.step.StepBuilder` and its helpers read and write: the
    forward's facts (read), the derivation's queries (``fresh`` and ``output_name`` mint names,
    ``weight_vector`` adds a host step), and the containers of the state carried between steps
    (``derive.State``), shared, so that a step's writes are the derivation's (a placement that
    fails is rolled back by the derivation, which builds a new view for the next try).
    """

    # the forward's facts, read only
    spec: object  # the checked forward spec
    analysis: object  # its analysis (tensor facts)
    stats: dict  # statistic r -> Stat
    wrt: set  # the inputs that get gradients
    keep: set  # the tensors the policy keeps (saved, never recomputed)
    # the derivation's queries
    fresh: Callable[[str], str]  # a new name from a base
    source_of: Callable  # forward op -> its text, for comments
    needs: Callable  # (kernel index | None, value) -> a wrt input depends on it
    producer: Callable  # tensor -> the forward kernel that stores it, or None
    twinned: Callable  # kernel -> another forward kernel runs its GEMM (same A, W)
    ln_of: Callable  # tensor -> the LayerNorm unit whose output it is, or None
    weight_vector: Callable  # (kernel, vector | None) -> the finalized W @ v
    output_name: Callable  # forward tensor -> the name of its produced gradient
    # the state carried between steps (written in place; see derive.State)
    pending: dict
    uses: dict
    rows: dict
    zdz: dict
    zdz_left: dict
    zdz_done: dict
    dacc: dict
    wgrad_a: dict
    readers: dict
    save: set
    outputs: dict
    grads: dict
    tensors: set
    lnparts: dict
    lndone: dict
    twins: dict
