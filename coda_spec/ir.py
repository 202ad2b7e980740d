"""The spec IR: frozen dataclasses produced by ``normalize`` and walked by everything else.

Three walkers read this IR: ``analyze`` (kinds, shapes, lowering modes, partial buffers),
the lowering (generated kernel source) and ``reference`` (torch math). Each epilogue item is a
generic :class:`Op` whose ``prim`` names its primitive in the registry; walkers dispatch on that
string and on the primitive's declared ports, never on Python types. Steps dispatch on
``step.kind`` (``"kernel"``, ``"host"``, ``"finalize"``). A step's op list is read through one
accessor, :attr:`StepOps.ops` (a kernel's ``epilogue``, a host step's ``body``, none for a
finalize), and rebuilt through :meth:`StepOps.with_ops`; ``ops_field`` names the field (and the
spec path key) that holds it.

Every node keeps the 1-based line/col and spec path of its source so that any later stage
(analysis, lowering comments, compiler errors) can point back into the YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import ClassVar


@dataclass(frozen=True)
class Loc:
    line: int
    col: int
    path: tuple


@dataclass(frozen=True)
class Dim:
    name: str
    size: int | None  # None = dynamic
    loc: Loc = field(compare=False)


@dataclass(frozen=True)
class Tensor:
    """A chain input (forward inputs, backward cotangents are declared in ``backward.grads``)."""

    name: str
    shape: tuple  # dim expressions (int | str)
    dtype: str
    range: tuple | None = None  # [lo, hi) for generated values; required for integer tensors
    ignore_index: int | None = None  # index tensors: rows with this value are ignored
    derive: str | None = None  # expression (equivalence language) computing it from others
    doc: str = ""
    loc: Loc = field(default=None, compare=False)
    differentiable: bool = True  # False: coda grad derives no gradient for it


@dataclass(frozen=True)
class Op:
    """One epilogue (or host body) item: ``{prim: ..., key: value, as: result}``."""

    prim: str
    args: tuple  # ((key, value), ...) in source order; the primitive key itself is first
    results: tuple  # result value names
    loc: Loc = field(compare=False)

    def get(self, key: str, default=None):
        for k, v in self.args:
            if k == key:
                return v
        return default

    def with_arg(self, key: str, value) -> Op:
        args = tuple((k, value if k == key else v) for k, v in self.args)
        if key not in dict(self.args):
            args += ((key, value),)
        return replace(self, args=args)

    def with_prim(self, prim: str) -> Op:
        args = tuple((prim if k == self.prim else k, v) for k, v in self.args)
        return replace(self, prim=prim, args=args)


class StepOps:
    """The op list of a step, whatever its kind: the one home of "a kernel's epilogue, a host
    step's body". A class attribute and methods only, so no dataclass field (``to_data``, equality
    and hashing see the same fields as before)."""

    ops_field: ClassVar[str | None] = None  # the field holding the op list (None: it has none)

    @property
    def ops(self) -> tuple:
        """The step's items (``tuple[Op, ...]``); ``()`` for a finalize step."""
        return getattr(self, self.ops_field) if self.ops_field else ()

    def with_ops(self, ops: tuple):
        """A copy of the step with its op list replaced."""
        return replace(self, **{self.ops_field: ops})


@dataclass(frozen=True)
class Operand:
    name: str
    transposed: bool


@dataclass(frozen=True)
class Gemm:
    a: Operand
    b: Operand
    loc: Loc = field(compare=False)


@dataclass(frozen=True)
class Kernel(StepOps):
    name: str
    gemm: Gemm
    epilogue: tuple  # tuple[Op, ...]
    doc: str = ""
    loc: Loc = field(default=None, compare=False)
    kind: str = "kernel"
    ops_field: ClassVar[str] = "epilogue"


@dataclass(frozen=True)
class Host(StepOps):
    """A GEMM-free step (CODA's B3/B4): a row-wise pass over ``over`` in the same primitive
    language, compiled at build time to one Triton kernel (``coda_spec.lower.host_kernel``)."""

    name: str
    over: str  # the tensor whose shape is the iteration space
    body: tuple  # tuple[Op, ...]
    doc: str = ""
    loc: Loc = field(default=None, compare=False)
    kind: str = "host"
    ops_field: ClassVar[str] = "body"


@dataclass(frozen=True)
class Finalize(StepOps):
    op: str  # an op of coda_spec.finalize.TABLE: sum | mean | rsqrt_mean | logsumexp | max | var
    of: str  # the partial-reduction name
    result: str
    n: int | str | None = None
    eps: float | None = None
    loc: Loc = field(default=None, compare=False)
    kind: str = "finalize"
    over: str | None = None  # rows | cols: also fold the other axis, to one [] scalar
    second: str | None = None  # an op's second partial (var: its ``sumsq:``)

    def partials(self) -> tuple:
        """The partials it reads: ``of``, then the second (var's sumsq) if any."""
        return (self.of,) if self.second is None else (self.of, self.second)

    @property
    def name(self) -> str:
        return f"finalize_{self.result}"


@dataclass(frozen=True)
class Output:
    name: str
    dtype: str
    loc: Loc = field(compare=False)
    differentiable: bool = True  # False: kept for the backward, no incoming gradient (coda grad)


@dataclass(frozen=True)
class Backward:
    save: tuple  # forward tensor names the backward may read
    grads: tuple  # ((grad_name, forward_tensor_name), ...)
    steps: tuple
    outputs: tuple  # tuple[Output, ...]
    loc: Loc = field(compare=False)
    # ((output, forward tensor), ...): backward outputs that recompute a forward value (dGeGLU's
    # recomputed activation, stored for the weight gradient), proven equal to it
    recomputes: tuple = ()


@dataclass(frozen=True)
class Spec:
    coda: int
    name: str
    doc: str
    dims: tuple  # tuple[Dim, ...]
    tensors: tuple  # tuple[Tensor, ...]
    steps: tuple  # tuple[Kernel | Host | Finalize, ...]
    outputs: tuple  # tuple[Output, ...]
    equivalent_to: str | None
    equivalent_loc: Loc | None = field(compare=False)
    backward: Backward | None
    file: str = field(default="", compare=False)
    digest: str = ""
    configs: tuple = ()  # the spec's candidate tile configs, texts in --config syntax

    def dim_sizes(self) -> dict:
        return {d.name: d.size for d in self.dims}

    def tensor(self, name: str) -> Tensor | None:
        return next((t for t in self.tensors if t.name == name), None)

    def sections(self) -> tuple:
        """``(section, steps)`` for the forward steps (section ``"steps"``), then the backward
        steps (``"backward"``) when the spec has a backward section. The one home of the
        forward + backward walk; a step's section and index locate it (mutants, perturbation)."""
        out = (("steps", self.steps),)
        if self.backward is not None:
            out += (("backward", self.backward.steps),)
        return out

    def all_steps(self) -> tuple:
        """Every step, forward then backward."""
        return tuple(s for _, steps in self.sections() for s in steps)


def to_data(node):
    """JSON-ready view of an IR node (golden files, build dirs). Locations become ``line``."""

    if isinstance(node, Loc):
        return node.line
    if is_dataclass(node):
        out = {}
        for f in fields(node):
            if f.name in ("file", "equivalent_loc"):
                continue
            value = getattr(node, f.name)
            key = "line" if f.name == "loc" else f.name
            out[key] = to_data(value)
        return out
    if isinstance(node, tuple | list):
        return [to_data(x) for x in node]
    return node
