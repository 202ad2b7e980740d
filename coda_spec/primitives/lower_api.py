"""The lowering API: everything a primitive's ``lower(lc, op)`` may use, and nothing else.

Why here (``coda_spec/primitives/lower_api.py``, not in ``coda_spec.lower``)
-----------------------------------------------------------------
Primitives lower against this module, so it sits on the primitives' floor, one layer below
them, beside :mod:`coda_spec.primitives.host_api` (what a primitive's ``host`` may use): the two
lowering
contracts, named after the ``Primitive`` fields they serve (``lower``, ``host``). The
``coda_spec.lower`` package holds what runs the primitives (``lower/emit.py``, the walk;
``lower/module.py``, kernel.py; ``lower/host_kernel.py``) and sits above them; this module used
to be ``lower/api.py``, the one module of that package below the primitives. Imports go one way
(``pyproject.toml``'s layers, ``tests/test_lower_api.py``): ``lower/module.py`` -> ``lower/emit.py``
-> ``primitives/*`` -> this module. It imports no primitive, neither the walk nor a compiler
(quack, cutlass, torch): lowering is pure text.

Contract
--------
A primitive reads values (:meth:`LowerCtx.v`), emits statements (:meth:`LowerCtx.let`,
:meth:`LowerCtx.line`) and DECLARES what its text needs through methods, never by touching the
context's state: the names generated code calls (:meth:`LowerCtx.use`, :meth:`LowerCtx.op`,
:meth:`LowerCtx.call`; kernel.py imports exactly the declared names, from
:data:`KERNEL_IMPORTS`), fn operands (:meth:`LowerCtx.param`; the column table,
:meth:`LowerCtx.columns`), the D / C bindings
(:meth:`LowerCtx.store_d`, :meth:`LowerCtx.bind_c`), aux stores (:meth:`LowerCtx.aux_output`),
sinks (:meth:`LowerCtx.reduce`, :meth:`LowerCtx.out_op`, :meth:`LowerCtx.extra_op`), pending
gathers (:meth:`LowerCtx.select`) and module-level lines (:meth:`LowerCtx.global_line`). The walk
(``lower/emit.py``) reads the result once, as a frozen :class:`Declared`, and turns it into the
``@gemm_epilogue`` decorator.

Why: one place defines what lowering may do, the walk cannot be bypassed by a primitive writing
its fields, and the generated module imports only what it uses (a QuACK mod's import block).

Contract with QuACK 0.6.5 (``quack/epilogue/frontend.py`` is the authority)
--------------------------------------------------------------------------
* The fn is ``fn(acc, <operands>) -> {"D": ..., <sinks>: ...}``, called per accumulator element
  (``plain``), per adjacent column pair (``acc_pair``: full-width values are ``Pair``s, half-width
  values are scalars) or per element with a 16-bit C/D read and written as pairs at twice GEMM-N
  (``packed_cd_b16x2``: the fn parameter must be named ``c``).
* Every operand's op is pinned with ``ops=``: ``TileLoad`` (M x N), ``RowVecLoad`` ((1, N)),
  ``ColVecLoad`` ((1, M)), ``Scalar`` (device pointer). Ranks are fixed at compile time, so the
  manifest records the exact buffer shape the runtime must pass (a view of the user's tensor).
* The fn receives values, never coordinates. A column index (``onehot``, ``col_index``) is a
  ``RowVecLoad`` of a column table, fp32 ``0 .. N - 1``, that the runtime fills (``Field`` role
  ``columns``, no chain tensor); ``RowVecLoad`` reads each CTA tile's slice of it.
* Sinks: ``TileStore`` aux outputs (``gated=True`` for half-width outputs in acc_pair),
  ``ColVecReduce``/``RowVecReduce`` per-tile partials ((M, n_tiles) / (m_tiles, N), fp32;
  ``scaled=True`` folds a product with one FMA), ``OnlineLSEReduce`` (per-tile LSE),
  ``ColVecSelect`` (per-row gather; rows whose index is out of range are never written).
* ``add_to_output`` is a ``.gemm()`` argument with ``C=None``, so only D can accumulate.
* Prepass (``prepass=fn2, prepass_outs=(names,)``): ``fn2(acc, <operands>)`` runs per element
  over the RAW accumulator before the epilogue and feeds per-(row, group) statistics
  (``GroupStat``, coda's ``GroupedColStatsBase``; ``coda_spec.lower.quack_ops``). fn2 sees only
  ``acc`` and operands the main fn also declares, so any value a statistic reads is re-computed
  in fn2 from its definition slice (:meth:`LowerCtx.prepass_value`; only elementwise items and
  primitives declared ``prepass=True`` can be). The main fn receives the finalized statistic as
  a value operand (a ``Pair`` with equal lanes in ``acc_pair`` mode); ``op.out(name)`` in
  ``extra_ops`` writes it to an (M, N / group) fp32 buffer. Not with packed C
  (``packed_cd_b16x2``), which QuACK 0.6.5 refuses.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from types import MappingProxyType

from coda_spec import dims, idents
from coda_spec.artifact import F32_BITS, Field
from coda_spec.dtypes import names as dtype_names
from coda_spec.errors import ItemError

# Every name generated code may use, by the module kernel.py imports it from. A kernel.py
# imports exactly the names its kernels declared (LowerCtx.use). ``cute`` is the module
# ``cutlass.cute`` (``cute.math.exp``). QuACK's private names never appear here: the adapter
# ``coda_spec.lower.quack_private`` gives them coda names.
KERNEL_IMPORTS = MappingProxyType(
    {
        "quack.activation": (
            "dgeglu",
            "dswiglu",
            "geglu",
            "gelu_tanh_approx",
            "relu",
            "relu_sq",
            "sigmoid",
            "silu",
            "swiglu",
            "tanh",
        ),
        "quack.epilogue.frontend": ("gemm_epilogue",),
        "quack.epilogue.math": ("pack", "unpack"),
        "quack.epilogue.ops": (
            "ColVecLoad",
            "ColVecReduce",
            "ColVecSelect",
            "OnlineLSEReduce",
            "RowVecLoad",
            "RowVecReduce",
            "Scalar",
            "TileLoad",
            "TileStore",
        ),
        "coda_spec.lower.kernel_lib": (
            "lane_div",
            "lane_max",
            "lane_min",
            "lanewise",
            "philox_uniform",
            "round_bf16",
            "round_fp16",
            "select",
        ),
        "coda_spec.lower.quack_ops": ("GroupStat", "HalfPartner", "PairF32Store", "PairF8Store"),
        "cutlass": ("Int64",),  # a Scalar op's element type: Scalar("seed", dtype=Int64)
        "coda_spec.lower.quack_private": ("angle_turns", "sincos_turns"),
    }
)
MODULE_IMPORTS = MappingProxyType({"cute": "import cutlass.cute as cute"})
SOURCE_OF = MappingProxyType({n: m for m, names in KERNEL_IMPORTS.items() for n in names})

# Why a per-(row, group) statistic has no packed kernel, and the fix: QuACK 0.6.5's words.
NO_PACKED_PREPASS = (
    "per-(row, group) statistics run in QuACK's accumulator prepass, which QuACK 0.6.5 does not "
    "support with a packed C operand ('prepass + packed C: not supported')",
    "compute the statistic in a separate kernel or a host step",
)

# The fn operand (and EpilogueArguments field) of a kernel's column table: fp32 0, 1, ..., N - 1
# over GEMM-N, which the runtime fills (``Field`` role ``columns``; :meth:`LowerCtx.columns`).
COLUMNS = "columns"
# The row table's operand: fp32 0, 1, ..., M - 1 over GEMM-M (``Field`` role ``rows``), a
# ``ColVecLoad``, for values keyed by the global row (``philox``; :meth:`LowerCtx.row_indices`).
ROWS = "rows"

# Names a spec value or tensor may not take in generated code (they get a trailing "_"): the fn's
# own parameters and return key, and every name kernel.py may import.
RESERVED = frozenset(
    {"acc", "c", "D", "cutlass", "Pair", COLUMNS, ROWS, *SOURCE_OF, *MODULE_IMPORTS}
)


def prepass_slice(raw, producers: dict, prims, out: dict, done=()) -> None:
    """Add to ``out`` (item index -> item) the epilogue items that the value ``raw`` depends on,
    back to ``acc`` and the loads, skipping values in ``done``; ``producers``: value name ->
    (item index, item). Raises ItemError at the first item a prepass fn cannot re-compute:
    another statistic, or a primitive that is neither elementwise nor declared ``prepass``.
    A ranged item (``cols``) re-computes in the prepass fn as in the main fn: its select reads
    the kernel's column table, an operand of both fns.
    The walk (:meth:`LowerCtx.prepass_value`) and ``analyze`` (``coda check``) both ask it."""
    if not isinstance(raw, str) or raw == "acc" or raw in done or raw not in producers:
        return
    idx, op = producers[raw]
    if idx in out:
        return
    p = prims[op.prim]
    if op.prim == "prepass":
        raise ItemError(
            f"'{raw}' is itself a prepass statistic (line {op.loc.line}); QuACK runs one "
            "prepass over the raw accumulator, so a statistic cannot read another",
            hint="compute the second statistic in a later kernel or a host step",
        )
    if not p.in_prepass:
        raise ItemError(
            f"a statistic's input is re-computed from the raw accumulator in the prepass, "
            f"and '{raw}' comes from '{op.prim}' (line {op.loc.line}), which cannot run "
            "there (only loads and elementwise items can)",
            hint="compute the statistic from acc, loads and elementwise items only",
        )
    out[idx] = op
    for key in p.operands:
        arg = op.get(key)
        for x in arg if isinstance(arg, list) else [arg]:
            prepass_slice(x, producers, prims, out, done)


@dataclass(frozen=True)
class Val:
    """An epilogue value in generated code: its expression and form."""

    expr: str
    form: str  # "s" scalar per element | "p" Pair | "deferred" (a table its consumer places)
    tensor: str = ""


class Code(str):
    """Source text passed to :meth:`LowerCtx.op` as a keyword value, inserted as is."""


def forms_join(*vals) -> str:
    return "p" if any(v.form == "p" for v in vals) else "s"


@dataclass(frozen=True)
class Declared:
    """What one kernel's items declared, read once by the walk (``lower/emit.py``)."""

    params: tuple  # ((fn parameter, op expr), ...) in declaration order
    fields: tuple  # Field, ...
    returns: tuple  # ((return key, expr), ...)
    outputs: tuple  # TileStore op exprs
    reduces: tuple  # ((name, op expr), ...)
    outs: tuple  # ((name, op expr), ...)
    extra: tuple  # extra_ops exprs
    globals: tuple  # module-level lines
    imports: frozenset  # names of KERNEL_IMPORTS / MODULE_IMPORTS the text uses
    body: tuple  # fn body lines (indented by 4)
    selects: tuple  # gathered values never stored (an error)
    d: tuple | None
    c: tuple | None
    add_to: str | None
    prepass: Declared | None  # the prepass fn (QuACK's fn2), if a statistic needs one
    prepass_outs: tuple  # ((name, expr), ...) fn2 returns


class LowerCtx:
    """What a primitive's ``lower`` may use. One per kernel (and one for its prepass fn)."""

    def __init__(self, analysis, step, src_lines, mode, rows, width, k, tile, file, prims):
        self._analysis, self._step, self._src = analysis, step, src_lines
        self._mode, self._rows, self._width, self._k = mode, rows, width, k
        self._tile, self._file, self._prims = tuple(tile), file, prims
        self._env: dict = {}
        self._body: list = []
        self._params: dict = {}  # fn param -> op expr
        self._fields: list = []
        self._returns: dict = {}  # return key -> expr
        self._outputs: list = []
        self._reduces: dict = {}
        self._outs: dict = {}
        self._extra: list = []
        self._selects: dict = {}  # value name -> (expr, index tensor), until stored
        self._globals: list = []
        self._imports: set = set()
        self._d = self._c = self._add_to = None
        self._names: set = set()  # temporaries handed out by fresh()
        self._lanes: dict = {}  # pair value expr -> its named fp32 lanes (a, b)
        self._pre = Prepass(self._plain, prims)  # the prepass fn (QuACK's fn2), if asked for
        self._values = {r for op in step.epilogue for r in op.results}
        self._tensor_names = {t.name for t in analysis.tensors}
        self._env["acc"] = Val("acc", "p" if mode == "acc_pair" else "s")

    # -- read accessors ----------------------------------------------------------------------
    mode = property(lambda self: self._mode)  # plain | acc_pair | packed_cd_b16x2
    rows = property(lambda self: self._rows)
    width = property(lambda self: self._width)  # GEMM N
    k = property(lambda self: self._k)
    tile = property(lambda self: self._tile)  # (tile_M, tile_N)
    file = property(lambda self: self._file)
    step_name = property(lambda self: self._step.name)

    def has_d(self) -> bool:
        return self._d is not None

    def has_operand(self, name: str) -> bool:
        return name in self._params

    def info(self, tensor: str):
        return self._analysis.tensor(tensor)

    def n_tiles(self, extent, tile):
        """Tiles of ``tile`` covering ``extent`` (partial-buffer shapes)."""
        return dims.cdiv(extent, tile)

    def sizes(self) -> dict:
        """The static dims' sizes (name -> int), for primitives that fold bounds themselves."""
        return {d.name: d.size for d in self._analysis.spec.dims if d.size is not None}

    def fold(self, expr):
        """A dim expression (``head_dim``, ``3*D``) as an int, or its text if a dim is dynamic."""
        sizes = {d.name: d.size for d in self._analysis.spec.dims if d.size is not None}
        return dims.fold(expr, sizes)

    def constant(self, by) -> float:
        """``dims.constant`` at the spec's dims (a number, or ``1/sqrt(head_dim)``)."""
        return dims.constant(by, {d.name: d.size for d in self._analysis.spec.dims})

    # -- names -------------------------------------------------------------------------------
    @staticmethod
    def ident(name: str) -> str:
        """A spec name in kernel.py (``coda_spec.idents``: clear of its imports and ``_q``)."""
        return idents.ident(name, RESERVED, private="_q")

    def fresh(self, base: str) -> str:
        """A temporary named after a value: ``base`` itself unless a value or tensor of this
        kernel, an operand or an earlier temporary has that name (then ``base_1``, ``base_2``)."""
        taken = {self.ident(x) for x in self._values | self._tensor_names}
        taken |= set(self._params) | self._names | RESERVED
        name, n = base, 0
        while name in taken or keyword.iskeyword(name) or name.startswith("_"):
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    # -- text ----------------------------------------------------------------------------------
    def comment(self, op):
        """The spec line of ``op`` above its statements (the walk calls it)."""
        text = self._src[op.loc.line - 1].strip() if op.loc.line else op.prim
        self._body.append(f"    # {self._file}:{op.loc.line}: {text}")

    def note(self, text: str):
        """A one-line comment in the fn body (what a sink folds, why an operand is unused)."""
        self._body.append(f"    # {text}")

    def line(self, text: str):
        self._body.append(f"    {text}")

    @staticmethod
    def error(message: str, hint: str = "") -> ItemError:
        return ItemError(message, hint=hint)

    # -- imports -------------------------------------------------------------------------------
    def use(self, name: str) -> str:
        """Declare that the text calls ``name`` (a :data:`KERNEL_IMPORTS` name, or a dotted path
        under a :data:`MODULE_IMPORTS` module such as ``cute.math.exp``); returns ``name``."""
        head = name.split(".")[0]
        if name not in SOURCE_OF and head not in MODULE_IMPORTS:
            raise ItemError(f"internal: generated code may not use '{name}' (not importable)")
        self._imports.add(name if name in SOURCE_OF else head)
        return name

    def call(self, fn: str, *args: str) -> str:
        """``fn(args)`` as text, declaring ``fn``."""
        return f"{self.use(fn)}({', '.join(args)})"

    def lanewise(self, fn: str, val: Val) -> str:
        """``fn`` applied to each lane of a pair value (``lanewise(fn, x)``), or ``fn(x)``."""
        if val.form == "p":
            return self.call("lanewise", self.use(fn), val.expr)
        return self.call(fn, val.expr)

    def op(self, cls: str, name: str, **kw) -> str:
        """A QuACK (or coda) epilogue op constructor as text: ``Cls("name", k=v, ...)``; string
        values are quoted unless they are :class:`Code`; declares ``cls``."""

        def show(v):
            return v if isinstance(v, Code) else (f'"{v}"' if isinstance(v, str) else repr(v))

        args = [f'"{name}"', *(f"{k}={show(v)}" for k, v in kw.items())]
        return f"{self.use(cls)}({', '.join(args)})"

    # -- values ------------------------------------------------------------------------------
    def v(self, raw) -> Val:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return Val(repr(float(raw)), "s")
        return self._env[raw]

    def vs(self, raw) -> Val:
        """A value that must be a real expression (not a deferred table)."""
        val = self.v(raw)
        if val.form == "deferred":
            raise ItemError(f"'{raw}' is a per-pair table here; only rope can read it")
        return val

    def let(self, name: str, expr: str, form: str):
        """Emit ``name = expr`` and bind the value ``name`` to it."""
        ident = self.ident(name)
        self.line(f"{ident} = {expr}")
        self._env[name] = Val(ident, form)

    def bind(self, name: str, expr: str, form: str, tensor: str = ""):
        """Bind the value ``name`` to an existing expression (an operand), emitting nothing."""
        self._env[name] = Val(expr, form, tensor)

    def form_of_width(self, width) -> str:
        if self._mode == "acc_pair":
            return "p" if width == self._width else "s"
        if self._mode == "packed_cd_b16x2":
            return "p" if width != self._width else "s"
        return "s"

    def lanes(self, val: Val, base: str = "", names: tuple[str, str] = ("a", "b")):
        """The two fp32 lanes of a pair value, by name.

        A pair whose lanes are already named (unpacked earlier, or built by :meth:`let_pair`
        from two names) reuses them; otherwise this emits ``<base>_<a>, <base>_<b> =
        unpack(<val>)`` once and remembers them. ``base`` defaults to the value's own name;
        ``names`` are the lane suffixes (``("g", "u")`` for an interleaved gate/up pair).
        """
        if val.form != "p":
            raise ItemError("needs adjacent-column pairs here (acc_pair or packed mode)")
        if val.expr in self._lanes:
            return self._lanes[val.expr]
        base = base or (val.expr if val.expr.isidentifier() else "x")
        a, b = (self.fresh(f"{base}_{n}") for n in names)
        self.line(f"{a}, {b} = {self.call('unpack', val.expr)}")
        self._lanes[val.expr] = (a, b)
        return a, b

    def let_pair(self, name: str, a: str, b: str):
        """Emit ``name = pack(a, b)``; when both lanes are names, later readers use them."""
        self.let(name, self.call("pack", a, b), "p")
        if a.isidentifier() and b.isidentifier():
            self._lanes[self.v(name).expr] = (a, b)

    # -- resources ---------------------------------------------------------------------------
    def param(
        self, tensor: str, role: str, op_expr: str, shape: tuple, dtype: str, transform: str = ""
    ) -> str:
        """A fn operand fed from ``tensor`` (once per kernel); returns its parameter name."""
        name = self.ident(tensor)
        if name not in self._params:
            self._params[name] = op_expr
            self._fields.append(Field(name, tensor, role, shape, dtype, transform))
        return name

    def operand(self, name: str, op_expr: str, f: Field):
        """A fn operand that is not a chain tensor's load (a prepass statistic)."""
        if name in self._params:
            raise ItemError(f"'{name}' is already an operand of this kernel")
        self._params[name] = op_expr
        self._fields.append(f)

    def columns(self):
        """The global column index of each accumulator element as a value (fp32, exact up to
        2^24): a ``RowVecLoad`` of the kernel's column table, ``0, 1, ..., N - 1`` over GEMM-N,
        which the runtime fills and keeps per (N, device) (QuACK's fn receives values, not
        coordinates). Declared once per kernel; a ``Pair`` of adjacent columns in ``acc_pair``
        mode, as any full-width row value."""
        if COLUMNS not in self._params:
            self._params[COLUMNS] = self.op("RowVecLoad", COLUMNS)
            self._fields.append(Field(COLUMNS, "", "columns", (1, self._width), "fp32"))
        return Val(COLUMNS, self.form_of_width(self._width))

    def row_indices(self):
        """The global row index of each accumulator element as a value (fp32, exact up to
        2^24): a ``ColVecLoad`` of the kernel's row table, ``0, 1, ..., M - 1`` over GEMM-M,
        which the runtime fills and keeps per (M, device), as it does the column table.
        Declared once per kernel; one value per row (form ``s``)."""
        if ROWS not in self._params:
            self._params[ROWS] = self.op("ColVecLoad", ROWS)
            self._fields.append(Field(ROWS, "", "rows", (1, self._rows), "fp32"))
        return Val(ROWS, "s")

    def add_field(self, f: Field):
        """An EpilogueArguments entry that is no fn operand (a statistic's ``.out`` buffer)."""
        self._fields.append(f)

    def store_d(self, tensor: str, dtype: str, shape: tuple, expr: str, add_to: str | None = None):
        """Write ``expr`` as the GEMM's D (``tensor``), optionally accumulating into ``add_to``."""
        if self._d is not None:
            raise ItemError("the kernel already writes D")
        if add_to is not None and self._c is not None:
            raise ItemError("add_to cannot be combined with a C operand")
        self._d = (tensor, dtype, tuple(shape))
        self._returns["D"] = expr
        self._add_to = add_to

    def bind_c(self, tensor: str, dtype: str, shape: tuple) -> str:
        """Read ``tensor`` as the GEMM's C operand (packed mode); returns the fn parameter."""
        if self._c is not None:
            raise ItemError("packed mode reads one 16-bit pair tile (the GEMM C operand)")
        self._c = (tensor, dtype, tuple(shape))
        return "c"

    def aux_output(self, name: str, tensor: str, shape: tuple, dtype: str, expr: str, gated: bool):
        """An aux ``TileStore`` of ``expr`` to ``tensor``. A gated (half-width, acc_pair) fp32
        output is a ``PairF32Store`` (its bits as the full-width 16-bit tile they are, transform
        ``f32_bits``), an fp8 one a ``PairF8Store`` (both in ``coda_spec.lower.quack_ops``)."""
        transform = F32_BITS if gated and dtype == "fp32" else ""
        if transform:
            store = self.op("PairF32Store", name)
        elif gated and dtype in dtype_names("fp8"):  # QuACK's gated store, 8-bit on sm90
            store = self.op("PairF8Store", name)
        else:
            store = self.op("TileStore", name, **({"gated": True} if gated else {}))
        self._outputs.append(store)
        self._fields.append(Field(name, tensor, "aux", tuple(shape), dtype, transform))
        self._returns[name] = expr

    def reduce(self, name: str, op_expr: str, expr: str, f: Field, what: str):
        """A per-tile reduction sink (``reduces=``) of ``expr``; ``what`` says what it folds and
        into what (a one-line comment in the body). The body is the same at every tile config
        (variants compile one fn), so ``what`` names tile counts symbolically (``tile_N``)."""
        self._reduces[name] = op_expr
        self._sink(name, expr, f, what)

    def out_op(self, name: str, op_expr: str, expr: str, f: Field, what: str = ""):
        """A sink QuACK takes in ``outs=`` (online LSE, per-row select)."""
        self._outs[name] = op_expr
        self._sink(name, expr, f, what)

    def _sink(self, name, expr, f, what):
        self._fields.append(f)
        self._returns[name] = expr
        if what:
            self.note(f"{name}: {what}")

    def extra_op(self, expr: str):
        """An op QuACK runs besides the fn's own (``extra_ops=``), once per kernel."""
        if expr not in self._extra:
            self._extra.append(expr)

    def global_line(self, text: str):
        """A module-level line of kernel.py above this kernel (shared op objects)."""
        if text not in self._globals:
            self._globals.append(text)

    def index_load(self, tensor: str) -> str:
        """The module-level ``ColVecLoad`` of the index tensor ``tensor`` that per-row gathers
        read (an extra op and an ``index`` field, once per kernel); returns its global's name.
        Its field is named after the tensor, unless another item of this kernel reads the
        tensor too (``load_col``, ``onehot``, ``valid``: an fn operand of that name), then
        ``<tensor>_index`` (or a free variant): QuACK's op names are the EpilogueArguments
        fields, one each."""
        for f in self._fields:
            if f.role == "index" and f.tensor == tensor:
                return f"_idx_{f.name}"
        name = self.ident(tensor)
        readers = {
            op.prim
            for op in self._step.epilogue
            for key in self._prims[op.prim].tensors
            if op.get(key) == tensor
        }
        if readers - {"gather_col"}:
            name = self.fresh(f"{name}_index")
        glob = f"_idx_{name}"
        self.global_line(f"{glob} = {self.op('ColVecLoad', name)}")
        self.extra_op(glob)
        self._fields.append(Field(name, tensor, "index", (self._rows,), self.info(tensor).dtype))
        return glob

    def select(self, value: str, expr: str, index: str):
        """A per-row gather of ``expr`` at column ``index[m]``, placed by the store that writes
        ``value`` (QuACK's ``ColVecSelect`` is a sink, not a value)."""
        self._selects[value] = (expr, index)

    def take_select(self, value: str):
        """The pending gather of ``value`` as (expr, index tensor), or None; it is placed now."""
        return self._selects.pop(value, None)

    # -- the prepass fn (QuACK's fn2): :class:`Prepass` --------------------------------------
    def produced(self, name: str, idx: int, op):
        """The walk records that item ``idx`` (``op``) defines ``name`` (prepass slices)."""
        self._pre.produced(name, idx, op)

    def prepass_value(self, raw) -> Val:
        """``raw`` as a value of the prepass fn (:meth:`Prepass.value`); the loads its slice
        re-emitted there become operands of this (the main) fn too, as QuACK requires."""
        val = self._pre.value(raw)
        self._adopt(self._pre.ctx)
        return val

    def prepass_input(self, op, name: str, expr: str):
        """Make the prepass fn compute ``expr`` (a statistic's per-element input, over values
        from :meth:`prepass_value`) under ``op``'s spec line and return it as ``name``."""
        self._pre.input(op, name, expr)
        self._imports |= self._pre.ctx._imports

    def _adopt(self, pre: LowerCtx):
        for f in pre._fields:
            if f.name not in self._params:
                self._params[f.name] = pre._params[f.name]
                self._fields.append(f)
        self._imports |= pre._imports

    def _plain(self) -> LowerCtx:
        """A ``plain`` (one element per call) context of this kernel: the prepass fn's."""
        a = (self._analysis, self._step, self._src, "plain", self._rows, self._width, self._k)
        return LowerCtx(*a, self._tile, self._file, self._prims)

    # -- the result, for the walk ------------------------------------------------------------
    def declared(self) -> Declared:
        pre = self._pre.declared()
        return Declared(
            params=tuple(self._params.items()),
            fields=tuple(self._fields),
            returns=tuple(self._returns.items()),
            outputs=tuple(self._outputs),
            reduces=tuple(self._reduces.items()),
            outs=tuple(self._outs.items()),
            extra=tuple(self._extra),
            globals=tuple(self._globals),
            imports=frozenset(self._imports | (pre.imports if pre else set())),
            body=tuple(self._body),
            selects=tuple(self._selects),
            d=self._d,
            c=self._c,
            add_to=self._add_to,
            prepass=pre,
            prepass_outs=self._pre.outs,
        )


class Prepass:
    """The prepass fn (QuACK's fn2) of one kernel, made on first use.

    QuACK's prepass fn sees only the raw accumulator and declared operands, so "any transform
    the statistics must see is explicit duplicate math in fn2": the items a statistic's input
    depends on (transitively, back to ``acc`` and loads; :func:`prepass_slice`) are lowered a
    second time, in order, into a ``plain`` :class:`LowerCtx` (``make()``) whose body becomes
    fn2 and whose loads become fn2's parameters. Only elementwise items and primitives declared
    ``prepass=True`` (the loads) can be re-emitted; anything else (pairs, reductions, another
    statistic) is refused naming the item. The main kernel's :class:`LowerCtx` holds one and
    adopts the operands its slices declare."""

    def __init__(self, make, prims):
        self._make, self._prims = make, prims
        self.ctx: LowerCtx | None = None
        self._done: set = set()  # item indexes already re-lowered into the prepass
        self._outs: dict = {}  # prepass_outs name -> fn2 return expr
        self._producers: dict = {}  # value name -> (item index, op)

    def produced(self, name: str, idx: int, op):
        self._producers[name] = (idx, op)

    def _context(self) -> LowerCtx:
        if self.ctx is None:
            self.ctx = self._make()
        return self.ctx

    def value(self, raw) -> Val:
        """``raw`` as a value of the prepass fn, re-emitting its definition slice there."""
        pre = self._context()
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return pre.v(raw)
        slice_ = {}
        prepass_slice(raw, self._producers, self._prims, slice_, pre._env)
        for idx in sorted(slice_):
            if idx in self._done:
                continue
            op = slice_[idx]
            pre.comment(op)
            try:
                self._prims[op.prim].lower(pre, op)
            except ItemError as e:
                raise ItemError(
                    f"re-computing '{op.results[0]}' (line {op.loc.line}) in the prepass: "
                    f"{e.message}",
                    hint=e.hint,
                ) from None
            self._done.add(idx)
        return pre.vs(raw)

    def input(self, op, name: str, expr: str):
        """fn2 computes ``expr`` under ``op``'s spec line and returns it as ``name``."""
        pre = self._context()
        pre.comment(op)
        local = pre.fresh(f"{name}_in")
        pre.line(f"{local} = {expr}")
        self._outs[name] = local

    @property
    def outs(self) -> tuple:
        return tuple(self._outs.items())

    def declared(self) -> Declared | None:
        """fn2's declarations, or None when no statistic asked for a prepass."""
        return self.ctx.declared() if self.ctx is not None and self._outs else None
