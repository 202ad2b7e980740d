"""What the derivation reads from a checked forward chain, as typed records.

``read_forward(checked)`` turns the forward steps into :class:`FKernel` records (the GEMM's A
operand and weight, the epilogue items by result, the stored tensors, the deferred row scale)
and :class:`Stat` records (a deferred RMS statistic ``r = rsqrt(mean(X^2) + eps)``: its input
``X``, where it is reduced, its width ``n`` and the kernels whose accumulator it scales). A
chain this module cannot read raises :class:`Unsupported` at the item, naming the op; the
command turns it into a located error (``coda_spec.grad``'s docstring says what is supported).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from coda_spec.grad.layernorm import match
from coda_spec.ir import Finalize, Host, Kernel, Op


class Unsupported(Exception):
    """The derivation cannot handle a forward construct: ``loc`` is the item's location."""

    def __init__(self, message: str, loc=None, hint: str = ""):
        super().__init__(message)
        self.message, self.loc, self.hint = message, loc, hint


@dataclass(frozen=True)
class FKernel:
    index: int  # forward step index
    kernel: Kernel
    a: str  # the GEMM's A operand (a chain tensor)
    w: str  # the weight (B operand) tensor
    w_t: bool  # the forward reads b as w.T (torch Linear layout)
    items: tuple  # tuple[Op, ...] in source order
    kinds: tuple  # ((value, kind), ...): tile | row | col | scalar
    stores: tuple  # ((value, tensor), ...)
    row_scale: Op | None  # the item ``mul: [acc, r]`` of a deferred norm statistic r
    ln: object = None  # a host step that is a LayerNorm (coda_spec.grad.layernorm); a = w = ""

    @property
    def name(self) -> str:
        return self.kernel.name

    def kind(self, value: str) -> str:
        return dict(self.kinds).get(value, "tile" if value == "acc" else "")

    def defining(self, value: str) -> Op | None:
        return next((op for op in self.items if value in op.results), None)

    def stored_as(self, value: str) -> str | None:
        return next((t for v, t in self.stores if v == value), None)

    def stored_value(self, tensor: str) -> str | None:
        return next((v for v, t in self.stores if t == tensor), None)


@dataclass(frozen=True)
class Stat:
    """A deferred RMSNorm statistic ``r = rsqrt(sum(X^2) / n + eps)``."""

    r: str
    x: str  # the tensor (input) or forward value the statistic is of
    kernel: int | None  # the forward kernel reducing sum X^2; None: a derived input
    n: object  # the mean's width (an int or a dim expression)
    reduce: Op | None  # the reduce_row item (None for a derived input)


_DERIVED_RMS = re.compile(
    r"^\s*rsqrt\(\s*mean\(\s*square\(\s*(\w+)\s*\)\s*,\s*-1\s*\)\s*\+\s*[0-9.eE+-]+\s*\)\s*$"
)


def _store_target(op: Op) -> str:
    return op.get("to") or op.get(op.prim)


def _fkernel(index: int, step: Kernel, info) -> FKernel:
    gemm = step.gemm
    if gemm.a.transposed:
        raise Unsupported(
            f"kernel '{step.name}': a transposed A operand ({gemm.a.name}.T) has no derived "
            "backward (the derivation reads forward GEMMs as activations times weights)",
            gemm.loc,
            "write this kernel's backward by hand",
        )
    stores = tuple(
        (op.get(op.prim), _store_target(op)) for op in step.epilogue if op.prim == "store"
    )
    row_scale = None
    for op in step.epilogue:
        if op.prim == "mul" and op.get("mul")[0] == "acc":
            row_scale = op
            break
    kinds = tuple((n, v.kind) for n, v in info.values)
    return FKernel(
        index,
        step,
        gemm.a.name,
        gemm.b.name,
        gemm.b.transposed,
        step.epilogue,
        kinds,
        stores,
        row_scale,
    )


# what an RMSNorm prologue host step may hold (llama3_first's input_norm: h = x * gamma stored,
# sum x^2 reduced): elementwise products of loads, and the statistic's reduction
_PROLOGUE = {"load_tile", "load_row", "load_col", "mul", "add", "store", "reduce_row"}


def _norm_prologue(step: Host, spec) -> bool:
    """``step`` is a norm prologue: only :data:`_PROLOGUE` items, its row reductions ``sumsq``,
    and a stored tensor that a later GEMM reads as its A operand. The derivation reads it as a
    kernel without a GEMM (its backward runs in that GEMM's dgrad epilogue, as a fused
    epilogue's does)."""
    if any(op.prim not in _PROLOGUE for op in step.body):
        return False
    if any(op.get("reduce_row") != "sumsq" for op in step.body if op.prim == "reduce_row"):
        return False
    stored = {_store_target(op) for op in step.body if op.prim == "store"}
    return any(isinstance(k, Kernel) and k.gemm.a.name in stored for k in spec.steps)


def read_forward(checked) -> tuple[tuple, tuple]:
    """``(kernels, stats)`` of the forward section; raises :class:`Unsupported`."""
    spec = checked.spec
    kernels, partial_of, stats = [], {}, []
    for index, (step, info) in enumerate(zip(spec.steps, checked.analysis.steps, strict=True)):
        if isinstance(step, Host):
            unit = match(step, spec)
            stores = tuple(
                (op.get("store"), _store_target(op)) for op in step.body if op.prim == "store"
            )
            kinds = tuple((n, v.kind) for n, v in info.values)
            if unit is None and _norm_prologue(step, spec):  # a kernel without a GEMM
                fk = FKernel(index, step, "", "", False, step.body, kinds, stores, None)
                kernels.append(fk)
                partial_of.update(
                    (op.results[0], (fk, op)) for op in step.body if op.prim == "reduce_row"
                )
                continue
            if unit is None:
                raise Unsupported(
                    f"host step '{step.name}': a forward host step is derived only when it is "
                    "a LayerNorm ((x - mu) * rsqrt(var + eps) [* gamma] [+ beta], mu and var "
                    "finalized from a kernel's sum and sumsq of x) or an RMSNorm prologue "
                    "(loads, products, a sumsq row reduction, storing a GEMM's A operand)",
                    step.loc,
                    "write its backward by hand in a backward: section",
                )
            kernels.append(
                FKernel(index, step, "", "", False, step.body, kinds, stores, None, unit)
            )
        if isinstance(step, Kernel):
            fk = _fkernel(index, step, info)
            kernels.append(fk)
            for op in step.epilogue:
                if op.prim == "reduce_row":
                    partial_of[op.results[0]] = (fk, op)
        elif isinstance(step, Finalize) and step.op == "rsqrt_mean" and step.of in partial_of:
            fk, op = partial_of[step.of]
            if op.get("reduce_row") != "sumsq":
                raise Unsupported(
                    f"finalize rsqrt_mean of a '{op.get('reduce_row')}' reduction", step.loc
                )
            stats.append(Stat(step.result, op.get("of"), fk.index, step.n, op))
    for t in spec.tensors:
        m = _DERIVED_RMS.match(t.derive or "")
        if m:
            x = spec.tensor(m.group(1))
            stats.append(Stat(t.name, x.name, None, x.shape[-1], None))
    # a row scale is only a deferred norm when its column vector is such a statistic
    names = {s.r for s in stats}
    kernels = [
        k
        if k.row_scale is None or k.row_scale.get("mul")[1] in names
        else replace(k, row_scale=None)
        for k in kernels
    ]
    return tuple(kernels), tuple(stats)
