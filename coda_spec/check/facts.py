"""The facts ``analyze`` records, and what a primitive's ``infer`` may ask about its step.

Part of stage ``analyze``: ``TensorInfo`` (one chain tensor: folded shape, dtype, producer),
``StepInfo`` (one step: reads, writes, accumulator shape, pairing mode, the kind of each epilogue
value), ``Partial`` (a reduction partial's facts, read by name) and ``TypeCtx``, the context handed
to each primitive's ``infer``. Pure data and tiny helpers shared by the typing walk
(``check.steps``) and the chain-level checks (``check.order``); imports no other analyze module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from coda_spec.dims import DimError, fold
from coda_spec.errors import ItemError
from coda_spec.ir import Loc
from coda_spec.primitives.base import double, half


class Partial(NamedTuple):
    """A reduction partial's facts, read by name (a NamedTuple, so it is still the tuple it was)."""

    kind: str  # rowpart (a reduce_row's per-column-tile partials) | colpart (a reduce_col's)
    reduce: str  # the reduction (sum, sumsq, max, logsumexp, ...): which finalize ops fold it
    width: object  # the step's width (int or dynamic-dim name)
    group: object  # the reduce_row's group (None: the whole row)
    rows: object  # the step's rows


# The partial of a reduction in a step whose typing failed (its facts are not known).
UNKNOWN_PARTIAL = Partial("unknown", "unknown", "unknown", "unknown", "unknown")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple  # folded dims (int or dynamic-dim name)
    dtype: str
    origin: str  # input | grad_in | stored | finalized | partial
    producer: str  # step name ("" for inputs)
    loc: Loc = field(compare=False)
    ignore_index: int | None = None
    partial: Partial | None = None  # for partials
    add_to: str | None = None  # the input this output accumulated into, in place
    over: str | None = None  # the tensor a host step's store wrote this one over (its buffer)


@dataclass(frozen=True)
class StepInfo:
    name: str
    kind: str
    reads: tuple
    writes: tuple
    rows: object = None
    width: object = None
    k: object = None
    mode: str = ""
    values: tuple = ()  # ((name, VType), ...)
    operands: tuple = ()  # a kernel's GEMM operand dtypes (a, b); () for other steps


class TypeCtx:
    """What a primitive's ``infer`` may ask about the step it sits in."""

    def __init__(self, rows, width, sizes, has_acc):
        self.rows, self.width, self.sizes, self.has_acc = rows, width, sizes, has_acc

    def fold(self, expr, key):
        try:
            return fold(expr, self.sizes)
        except DimError as e:
            raise ItemError(str(e), key, e.hint) from e

    def width_ok(self, w) -> bool:
        return w in (self.width, half(self.width), double(self.width))

    def width_choices(self) -> str:
        return f"{self.width}, {half(self.width)} or {double(self.width)}"

    @staticmethod
    def both_literals(op) -> bool:
        v = op.get(op.prim)
        return isinstance(v, list) and all(isinstance(x, (int, float)) for x in v)


def load_hint(info, rows=None) -> str:
    if len(info.shape) == 1:  # a per-row vector is as long as the step has rows
        prim = "load_col" if info.shape[0] == rows else "load_row"
    else:
        prim = {2: "load_tile", 0: "load_scalar"}.get(len(info.shape), "load_tile")
    return f"load it first: - {{{prim}: {info.name}}}"


def shape_expr(data, name, idx):
    """The dim expression a tensor declares at ``idx`` (as written), or None."""
    try:
        return data["tensors"][name]["shape"][idx]
    except (KeyError, IndexError, TypeError):
        return None


def flat(values):
    for v in values:
        if isinstance(v, list):
            yield from (x for x in v if x is not None)
        elif v is not None:
            yield v
