"""The primitive contract: what one epilogue primitive file declares.

The package
-----------
* ``coda_spec/primitives/<name>.py`` — ONE primitive each: its JSON Schema fragment, its declared
  ports (which keys name epilogue values, which name chain tensors), its typing rule, its torch
  reference, its mutants (for the equivalence mutation tests), ``supports()`` and cache key; its
  CuTe lowering ``lower`` (against ``coda_spec/primitives/lower_api.py``) and its host step's
  Triton text ``host`` (against ``coda_spec/primitives/host_api.py``), or, without one, why
  (``no_host``). Primitives only ever emit source text, so this package imports neither torch
  (lazily, inside ``reference``) nor cutlass/quack.
* ``coda_spec/primitives/__init__.py`` — the registry: every module of the package not starting
  with ``_`` (and not this one or the two contracts) is a primitive file exporting ``PRIMITIVE``,
  discovered by listing the package; no list to edit, no decorators, no import-time side
  effects. ``_``-modules hold shared builders (``_composite.composite`` makes ``softcap`` one
  expression).
* Adding a primitive touches only its file: the validator derives the keys an item may hold from
  the schemas (``check.validate.item_fields``), the JSON Schema and the docs' primitive
  reference are generated from the registry, and ``version`` feeds every build's content address
  (``cache_key()``, via ``primitives.cache_keys``) so bumping it rebuilds the specs that use it.
* The front end's typing walk (``coda_spec.check.steps``) and ``coda_spec.prove.reference`` walk
  the IR and dispatch on ``op.prim`` through the registry, never on Python types.

Where this sits: docs/architecture.md, Layers.

Value model
-----------
Inside an epilogue every value is fp32 and has a *kind* (``VType``):

``tile``   an M x W tile (W = ``width``; the accumulator is a tile of the GEMM's N)
``row``    a per-column vector broadcast over rows (gamma, bias), width W
``col``    a per-row vector broadcast over columns (rstd, zdz, a gathered logit)
``scalar`` one number (an immediate or a device scalar)
``group``  a per-(row, group) statistic broadcast over its group's columns (prepass)
``rowpart`` / ``colpart``  reduction partials; only a chain-level ``finalize`` may read them

In the torch reference, tiles are ``[M, W]``, cols ``[M, 1]``, rows ``[1, W]``, scalars 0-d,
groups are expanded to ``[M, W]``; row partials are the exact reduction ``[M, 1]`` (or
``[M, W/g]`` grouped) and col partials ``[1, W]`` — partial buffers are an implementation detail
of the kernel, folded by the finalize step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from coda_spec.dtypes import names as dtype_names
from coda_spec.errors import ItemError

# Families (docs/spec-language.md, "Primitive reference").
ELEMENTWISE = "elementwise"
PAIR = "pair"
VECTOR = "vector"
TILE = "tile"
REDUCTION = "reduction"
STATEFUL = "stateful"
FAMILIES = (ELEMENTWISE, PAIR, VECTOR, TILE, REDUCTION, STATEFUL)
MODES = ("plain", "acc_pair", "packed_pair")  # a kernel's pairing modes (analyze's names)

NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
DTYPES = dtype_names("float")  # the one dtype table: coda_spec.dtypes
INDEX_DTYPES = dtype_names("index")
MASK_DTYPES = dtype_names("mask")  # uint8, bool: read as fp32 0/1 by the loads
FP8_DTYPES = dtype_names("fp8")


@dataclass(frozen=True)
class VType:
    kind: str
    width: int | str | None = None
    group: int | None = None

    def show(self) -> str:
        if self.kind in ("col", "scalar"):
            return self.kind
        g = f", group {self.group}" if self.group else ""
        return f"{self.kind}[{self.width}{g}]"


@dataclass(frozen=True)
class Primitive:
    """One epilogue primitive. Every field is declared data or a pure function."""

    name: str
    family: str
    summary: str
    example: str  # one YAML epilogue item, used verbatim in docs and validated by a test
    schema: dict  # JSON Schema fragment for the item
    operands: tuple[str, ...]  # keys naming epilogue values (or number literals)
    infer: Callable  # (TypeCtx, Op) -> tuple[VType, ...]; raises ItemError
    reference: Callable  # (RefCtx, Op, dict[str, value]) -> tuple[value, ...]
    tensors: tuple[str, ...] = ()  # keys naming chain tensors
    results: str = "one"  # "one" | "many" | "none" (store)
    mutants: Callable = field(default=lambda op: ())  # (Op) -> tuple[dict of field overrides]
    # (BuildConfig, config.KernelSizes, Op) -> why the config cannot lower the item, or None
    supports: Callable = field(default=lambda config, sizes, op: None)
    # (Op, where: "kernel" | "host") -> the dim expressions whose values the compiled code holds
    # as constants (a group width, a scale over dims, a kernel's column range): a build cannot
    # run at dims that change one (suits.baked_change)
    bakes: Callable = field(default=lambda op, where: ())
    bakes_width: bool = False  # its GEMM-epilogue code holds the kernel's width (N) as a constant
    lower: Callable | None = None  # (LowerCtx, Op) -> None: emits kernel source (lower/emit.py)
    prepass: bool = False  # its lower may be re-emitted in a prepass fn (loads; lower_api.py)
    # (Op) -> the values a per-(row, group) statistic of this item folds in the kernel's prepass
    # fn, which re-computes their definitions there (lower_api.prepass_slice); () for most items
    prepass_of: Callable = field(default=lambda op: ())
    host: Callable | None = None  # (HostCtx, Op) -> None: emits Triton statements for a
    # host-step body (primitives/host_api.py); None: host_kernel refuses a body that uses it
    no_host: str = ""  # why it has no ``host`` (host_kernel's refusal quotes it); set iff None
    # Pairing modes of a kernel (analyze's names: "acc_pair", "packed_pair") whose epilogue its
    # ``lower`` cannot serve, each with why; ``coda check`` refuses the item there, as the walk does
    no_mode: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    lowers_note: str = ""  # an option's narrower reach, appended to lowers_in (rope's pairs: half)
    # (Op, where, sizes) -> ItemError | None: why THIS item, with its arguments, cannot lower in
    # ``where`` (a kernel's pairing mode, or "host" for a host step); sizes: the static dims.
    # Asked by ``analyze`` (so ``coda check`` refuses it, located) and by the lowering walks.
    item_refusal: Callable = field(default=lambda op, where, sizes: None)
    version: int = 1  # bump when semantics change: part of the build hash (cache_key)

    def cache_key(self) -> tuple:
        return (self.name, self.version)

    def epilogue_refusal(self, mode: str) -> ItemError | None:
        """Why the primitive cannot lower in the epilogue of a kernel of pairing ``mode``
        (``plain``, ``acc_pair``, ``packed_pair``), with the fix, or None. Asked by ``analyze``
        (so ``coda check`` refuses what ``coda build`` would) and by the lowering walk."""
        if self.lower is None:
            return ItemError(
                f"'{self.name}' has no GEMM-epilogue lowering yet (it runs in host steps)",
                hint="compute it in a host step",
            )
        if mode in self.no_mode:
            others = [m for m in MODES if m not in self.no_mode]
            return ItemError(
                self.no_mode[mode],
                hint=f"compute it in a host step, or in a {' or '.join(others)} kernel",
            )
        return None

    def lowers_in(self) -> str:
        """Where it lowers, for people (``coda primitives``, docs/spec-language.md): GEMM
        epilogues (less the pairing modes it refuses) and/or host steps."""
        places = []
        if self.lower is not None:
            no = " or ".join(self.no_mode)
            places.append("GEMM epilogues" + (f" (not in {no} kernels)" if no else ""))
        if self.host is not None:
            places.append("host steps")
        where = " and ".join(places) or "nowhere (the reference only)"
        return f"{where}; {self.lowers_note}" if self.lowers_note else where

    @property
    def in_prepass(self) -> bool:
        """Whether its lowering can be re-emitted in a prepass fn (elementwise items and the
        primitives declared ``prepass=True``; ``lower_api.LowerCtx.prepass_value``)."""
        return self.family == ELEMENTWISE or self.prepass


def moved(v: float) -> float:
    """A parameter's mutant value: ``1.5 v + 0.25`` for ``v >= 0`` and ``0.5 v + 0.25`` below,
    i.e. ``v + 0.25 + |v| / 2``, which is never ``v`` (``1.5 v + 0.25`` alone maps -0.5 to
    itself: a mutant equal to the spec, which no test can kill)."""
    return (1.5 * v if v >= 0 else 0.5 * v) + 0.25


def item_schema(
    name: str, value: dict, props: dict | None = None, required=(), result: str = "required"
) -> dict:
    """Schema of an epilogue item ``{name: value, **props, as: ...}``.

    ``result``: "required" (``as: name``), "optional" (loads: defaults to the tensor's name),
    "list" (``as: [a, b]``, two results) or "none" (stores).
    """
    properties = {name: value, "doc": {"type": "string"}}
    if result == "list":
        properties["as"] = {
            "type": "array",
            "items": {"type": "string", "pattern": NAME_RE},
            "minItems": 2,
            "maxItems": 2,
        }
    elif result != "none":
        properties["as"] = {"type": "string", "pattern": NAME_RE}
    properties.update(props or {})
    req = [name] + list(required) + (["as"] if result in ("required", "list") else [])
    return {
        "type": "object",
        "properties": properties,
        "required": req,
        "additionalProperties": False,
    }


VALUE_REF = {"type": "string", "pattern": NAME_RE}
OPERAND = {"anyOf": [{"type": "string", "pattern": NAME_RE}, {"type": "number"}]}
DIM_REF = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]}
TENSOR_REF = {"type": "string", "pattern": NAME_RE}


def broadcast(types: list[VType], what: str) -> VType:
    """Result kind of an elementwise op over ``types`` (shared by every elementwise primitive)."""
    kinds = {t.kind for t in types}
    for bad in ("rowpart", "colpart"):
        if bad in kinds:
            raise ItemError(
                f"{what} cannot read a reduction partial",
                hint="finalize it first with a 'finalize' step",
            )
    widths = {t.width for t in types if t.kind in ("tile", "row", "group")}
    if len(widths) > 1:
        _width_error(types, what)
    width = next(iter(widths)) if widths else None
    if "tile" in kinds or "group" in kinds or ("row" in kinds and "col" in kinds):
        return VType("tile", width)
    if "row" in kinds:
        return VType("row", width)
    if "col" in kinds:
        return VType("col")
    return VType("scalar")


def _width_error(types: list[VType], what: str):
    """Operands of unequal widths: a row vector with the wrong number of values (say it needs
    one per column, and how a per-head vector is repeated), else tiles of unequal widths."""
    shown = ", ".join(t.show() for t in types)
    tiles = [t.width for t in types if t.kind in ("tile", "group")]
    short = [t.width for t in types if t.kind == "row" and tiles and t.width != tiles[0]]
    if short:
        n, w = short[0], tiles[0]
        hint = f"declare the tensor with {w} values, one per column"
        if isinstance(w, int) and isinstance(n, int) and w % n == 0:  # a dynamic width: no hint
            hint += (
                f"; a per-head vector of {n} values repeats {w // n} times across the {w} "
                f"columns: pass it repeated (torch: v.repeat({w // n}))"
            )
        raise ItemError(
            f"{what}: a row vector needs one value per column: it has {n} values, the tile "
            f"has {w} columns ({shown})",
            hint=hint,
        )
    raise ItemError(
        f"{what}: operand widths differ ({shown})",
        hint="pair halves are W/2 wide; tiles must have equal widths",
    )


def need_tile(t: VType, what: str, key: str | None = None) -> VType:
    if t.kind != "tile":
        raise ItemError(f"{what} needs a tile, got {t.show()}", key)
    return t


def need_even(t: VType, what: str, key: str | None = None) -> int | str:
    w = t.width
    if isinstance(w, int) and w % 2:
        raise ItemError(
            f"{what} works on adjacent column pairs; width {w} is odd",
            key,
            "pair modes need an even N",
            width=w,
        )
    return w


def half(w: int | str) -> int | str:
    return w // 2 if isinstance(w, int) else f"{w}/2"


def double(w: int | str) -> int | str:
    return w * 2 if isinstance(w, int) else f"2*{w}"
