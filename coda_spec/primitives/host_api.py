"""The host-lowering API: everything a primitive's ``host(hc, op)`` may use, and nothing else.

Why here (``coda_spec/primitives/host_api.py``)
------------------------------------
Primitives write the Triton text of a host step's items against this module, so it sits on the
primitives' floor beside :mod:`coda_spec.primitives.lower_api` (what a primitive's ``lower`` may
use),
below the primitives; ``coda_spec/lower/host_kernel.py`` (the scheduler and the kernel's
assembly) runs the primitives and sits above them. It imports no primitive, no compiler, no
torch and no triton: generation is pure text.

Contract
--------
:class:`HostCtx` is one host step's kernel being written: a primitive reads values
(:meth:`HostCtx.value`, :class:`HVal`: one expression per *lane*), binds its results
(:meth:`HostCtx.let`, :meth:`HostCtx.let_block`, :meth:`HostCtx.finish`), reaches chain tensors
through pointer parameters (:meth:`HostCtx.ptr`, :meth:`HostCtx.out`, :meth:`HostCtx.row_ptr`,
:meth:`HostCtx.index`), and emits statements in a *phase*: before the loop over a row
(``PRE``: per-row loads, accumulators), inside it (``LOOP``: per-column values, chunk by chunk)
or after it (``POST``: finished reductions). A refusal is an :class:`~coda_spec.errors.ItemError`
(:meth:`HostCtx.error`); ``host_kernel`` adds the location. The slot / lane layout these methods
implement is described in ``coda_spec/lower/host_kernel.py`` ("Kernel shape").
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass

from coda_spec import dims as dimmod
from coda_spec import idents
from coda_spec.dtypes import dtype
from coda_spec.errors import ItemError

PRE, LOOP, POST = 0, 1, 2  # where a statement runs: before, inside, after the loop over a row
WIDE = ("tile", "row")  # kinds with one value per column (lanes); col and scalar are per row

# Names the kernel itself uses; a spec value with one of these names is renamed with a trailing _.
RESERVED = frozenset(
    {"tl", "triton", "row", "start", "slot", "mask", "SLOTS", "BLOCK", "float", "range"}
    | {f"{x}{n}" for x in ("cols", "mask") for n in (2, 4, 8, 16)}
)


@dataclass
class HVal:
    """A value of the body: ``lanes`` are expressions (names) -- one per lane for tiles and row
    vectors, exactly one for per-row (col) values and scalars. ``phase``: where it is known."""

    kind: str
    lanes: tuple
    phase: int
    op: object = None  # the item that defined it (for the second-pass error)

    @property
    def expr(self) -> str:
        return self.lanes[0]

    @property
    def wide(self) -> bool:
        return self.kind in WIDE


class HostCtx:
    """What a primitive's ``host(hc, op)`` may use: values, tensors, layout and emission.

    Statements go to the current item's phase (:meth:`line`) or explicitly before the loop
    (:meth:`pre`: loads of per-row values, accumulators) or after it (:meth:`post`: finishing a
    reduction). Every statement is preceded by a comment naming the spec line it came from."""

    def __init__(self, checked, step, info, slots: int, block: int):
        self.checked, self.step, self.info = checked, step, info
        self.file = checked.spec.file
        self.src_lines = checked.source.lines
        self.slots, self.block = slots, block
        self.needs_mask = True  # SLOTS is a launch argument: any width, a ragged last chunk
        self.kinds = dict(info.values)  # value name -> VType (partials are chain tensors)
        self.env: dict = {}
        self.lines: dict = {PRE: [], LOOP: [], POST: []}
        self.head: list = []  # per-chunk setup (slot, mask, lane offsets), top of the loop
        self.reads: dict = {}  # chain tensor -> parameter, in first-use order
        self.writes: dict = {}
        self.row_ptrs: dict = {}
        self.indexes: dict = {}
        self.offsets_: dict = {}
        self.partials: dict = {}  # partial tensor -> its per-row value (after the loop)
        self.column_partials: list = []  # reduce_col partials: (rows, W) fp32 per-row terms
        self.dims: list = []  # (parameter, dim expression, comment): i32 launch arguments
        self.op = None  # the item being lowered (None: the step itself)
        self.phase = PRE
        self._last = {PRE: "", LOOP: "", POST: ""}  # last comment per phase
        self.names = set(RESERVED)
        for op in step.body:  # the spec's own names stay as written; temporaries avoid them
            self.names.update(self.ident(r) for r in op.results)

    # -- names -------------------------------------------------------------------------------
    @staticmethod
    def ident(name: str) -> str:
        """A spec name in the host kernel (``coda_spec.idents``: clear of its own names)."""
        return idents.ident(name, RESERVED)

    def fresh(self, base: str) -> str:
        """A new kernel-local name: ``base`` unless taken, else ``base_2``, ``base_3``..."""
        name, n = base, 1
        while name in self.names or keyword.iskeyword(name):
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        return name

    # -- emission ----------------------------------------------------------------------------
    def spec_comment(self) -> str:
        """``# <file>:<line>: <yaml>`` of the current item (of the step when there is none)."""
        line = (self.op if self.op is not None else self.step).loc.line
        text = self.src_lines[line - 1].strip() if 0 < line <= len(self.src_lines) else ""
        return f"# {self.file}:{line}: {text}"

    def line(self, text: str, phase: int | None = None) -> None:
        """Emit ``text`` in ``phase`` (default: the current item's), under its spec comment."""
        phase = self.phase if phase is None else phase
        comment = self.spec_comment()
        if self._last[phase] != comment:
            self.lines[phase].append(comment)
            self._last[phase] = comment
        self.lines[phase].append(text)

    def pre(self, text: str) -> None:
        self.line(text, PRE)

    def post(self, text: str) -> None:
        self.line(text, POST)

    def error(self, message: str, hint: str = "") -> ItemError:
        return ItemError(message, hint=hint)

    # -- values ------------------------------------------------------------------------------
    def value(self, raw) -> HVal:
        """An operand: a value of the body or a number literal (a scalar)."""
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return HVal("scalar", (repr(float(raw)),), PRE)
        return self.env[raw]

    @staticmethod
    def lane_count(*vals: HVal) -> int:
        return max((len(v.lanes) for v in vals if v.wide), default=1)

    def spread(self, val: HVal, n: int) -> tuple:
        """``val``'s lanes, a per-row value or scalar repeated to ``n`` lanes."""
        if not val.wide:
            return (val.expr,) * n
        if len(val.lanes) != n:
            raise self.error(f"operands have {len(val.lanes)} and {n} lanes (widths differ)")
        return val.lanes

    def kind(self, name: str) -> str:
        return self.kinds[name].kind

    def value_type(self, name: str):
        """The ``VType`` of body value ``name``, as ``analyze`` typed it."""
        return self.kinds[name]

    def declare(self, name: str, vt) -> None:
        """Give a temporary its type before it is bound (an item lowered as several
        primitives' statements, ``primitives._composite``, names its intermediate values)."""
        self.kinds[name] = vt

    def lanes_of(self, width) -> int:
        if not isinstance(width, int) or width % self.slots:
            raise self.error(f"width {width} is not a multiple of the step's {self.slots} slots")
        return width // self.slots

    def value_lanes(self, name: str) -> int:
        """How many lanes the body value ``name`` has (1 for per-row values and scalars)."""
        vt = self.kinds[name]
        return self.lanes_of(vt.width) if vt.kind in WIDE else 1

    def let(self, name: str, exprs, phase: int | None = None) -> HVal:
        """Bind body value ``name`` to ``exprs`` (one per lane), emitting one assignment each."""
        exprs = [exprs] if isinstance(exprs, str) else list(exprs)
        kind = self.kind(name)
        phase = self._phase_of(kind, phase)
        if len(exprs) != self.value_lanes(name):
            raise self.error(f"'{name}' needs {self.value_lanes(name)} lanes, got {len(exprs)}")
        targets = self._lane_names(name, len(exprs))
        for target, expr in zip(targets, exprs, strict=True):
            self.line(f"{target} = {expr}", phase)
        val = HVal(kind, tuple(targets), phase, self.op)
        self.env[name] = val
        return val

    def finish(self, name: str, expr: str) -> HVal:
        """Bind per-row value ``name`` after the loop (a gather or reduction, finished)."""
        return self.let(name, expr, POST)

    def let_block(self, name: str, block: str) -> HVal:
        """Bind tile ``name`` to a loaded chunk ``block``: L * BLOCK contiguous columns (``L`` =
        its lanes), reshaped to [BLOCK, 2, ..., 2] and split into lanes (even, odd) by halves."""
        lanes = self.value_lanes(name)
        targets = self._lane_names(name, lanes)
        if lanes == 1:
            self.line(f"{targets[0]} = {block}")
        else:
            shape = "[BLOCK" + ", 2" * (lanes.bit_length() - 1) + "]"
            if lanes == 2:
                self._split(targets, f"tl.reshape({block}, {shape})")
            else:
                tmp = self.fresh(f"{self.ident(name)}_block")
                self.line(f"{tmp} = tl.reshape({block}, {shape})")
                self._split(targets, tmp)
        val = HVal(self.kind(name), tuple(targets), LOOP, self.op)
        self.env[name] = val
        return val

    def _split(self, targets: list, expr: str) -> None:
        if len(targets) == 2:
            self.line(f"{targets[0]}, {targets[1]} = tl.split({expr})")
            return
        even = self.fresh(f"{targets[0]}_even")
        odd = self.fresh(f"{targets[0]}_odd")
        self.line(f"{even}, {odd} = tl.split({expr})")
        self._split(targets[0::2], even)
        self._split(targets[1::2], odd)

    def _lane_names(self, name: str, lanes: int) -> list:
        base = self.ident(name)
        if lanes == 1:
            return [base]
        return [self.fresh(f"{base}_{i}") for i in range(lanes)]

    def _phase_of(self, kind: str, phase: int | None) -> int:
        if kind in WIDE:
            return LOOP
        phase = self.phase if phase is None else phase
        if phase == LOOP:
            raise self.error("a per-row value computed inside the loop must be finished after it")
        return phase

    # -- layout ------------------------------------------------------------------------------
    def offsets(self, lanes: int) -> str:
        """In-row column offsets of the current chunk for an ``lanes``-lane value: ``slot`` for
        one lane, else ``cols<L>``, the chunk's L * BLOCK contiguous columns (one flat range, so
        a load or store of the chunk is one contiguous, vectorisable access)."""
        if lanes == 1:
            return "slot"
        if lanes not in self.offsets_:
            name = f"cols{lanes}"
            self.offsets_[lanes] = name
            self.head.append(f"{name} = start * {lanes} + tl.arange(0, {lanes} * BLOCK)")
            if self.needs_mask:
                self.head.append(f"mask{lanes} = {name} < {lanes} * SLOTS")
        return self.offsets_[lanes]

    def mask_arg(self, lanes: int, other: str | None = "0.0") -> str:
        """``, mask=...`` (and ``other``) for a load/store of an ``lanes``-lane chunk, or ''."""
        if not self.needs_mask:
            return ""
        self.offsets(lanes)
        mask = "mask" if lanes == 1 else f"mask{lanes}"
        return f", mask={mask}" + (f", other={other}" if other is not None else "")

    def masked(self, expr: str, fill: str) -> str:
        """``expr`` with the slots past the row's end replaced by ``fill`` (reductions)."""
        return f"tl.where(mask, {expr}, {fill})" if self.needs_mask else expr

    @staticmethod
    def column(lanes: int, lane: int) -> str:
        """The column index (within its tile) of lane ``lane`` of an ``lanes``-lane value."""
        return "slot" if lanes == 1 else f"(slot * {lanes} + {lane})"

    def join(self, lanes: tuple) -> str:
        """The chunk's L * BLOCK columns from L lanes (the inverse of :meth:`let_block`)."""

        def tree(xs):
            if len(xs) == 1:
                return xs[0]
            return f"tl.join({tree(xs[0::2])}, {tree(xs[1::2])})"

        if len(lanes) == 1:
            return lanes[0]
        return f"tl.reshape({tree(list(lanes))}, [{len(lanes)} * BLOCK])"

    # -- chain tensors -----------------------------------------------------------------------
    def constant(self, by) -> float:
        """``dims.constant`` at the spec's dims (a number, or ``1/sqrt(head_dim)``)."""
        return dimmod.constant(by, {d.name: d.size for d in self.checked.spec.dims})

    def info_of(self, tensor: str):
        return self.checked.analysis.tensor(tensor)

    def fp32(self, expr: str, tensor: str) -> str:
        """``expr`` (loaded from ``tensor``) converted to fp32 unless it already is."""
        return expr if self.info_of(tensor).dtype == "fp32" else f"{expr}.to(tl.float32)"

    def cast(self, expr: str, tensor: str) -> str:
        """fp32 ``expr`` rounded to ``tensor``'s dtype for a store (round to nearest even)."""
        name = self.info_of(tensor).dtype
        if name == "fp32":
            return expr
        row = dtype(name)
        if row.kind == "fp8":
            return self._fp8(expr, row)
        return f"{_atom(expr)}.to({row.triton})"

    def _fp8(self, expr: str, row) -> str:
        """fp32 ``expr`` rounded to fp8 as ``coda_spec.dtypes.round_to`` does (the module's
        docstring says why it is not a bare ``.to``): clamp to +-max_finite (NaN kept), add and
        subtract ``1.5 * 2**23`` fp8 spacings (the fp32 adder rounds to nearest even at that
        spacing: ``2**(e - mantissa_bits)`` for the value's exponent ``e``, at least the
        smallest normal one), put the sign back (so -0 stays -0), then convert the exactly
        representable value. Temporaries go on lines before the store that uses the result."""
        big = f"{row.max_finite!r}"
        c, bits, mag = self.fresh("sat"), self.fresh("sat_bits"), self.fresh("sat_mag")
        emin = 127 + row.min_exponent
        self.line(f"{c} = tl.clamp({expr}, -{big}, {big}, propagate_nan=tl.PropagateNan.ALL)")
        self.line(f"{bits} = {c}.to(tl.int32, bitcast=True)")
        spacing = f"tl.maximum(({bits} >> 23) & 255, {emin})"
        magic = f"(({spacing} + {23 - row.mantissa_bits}) << 23).to(tl.float32, bitcast=True) * 1.5"
        self.line(f"{mag} = {magic}")
        self.line(f"{mag} = (tl.abs({c}) + {mag}) - {mag}")
        signed = f"({mag}.to(tl.int32, bitcast=True) | ({bits} & -2147483648))"
        return f"{signed}.to(tl.float32, bitcast=True).to({row.triton})"

    def ptr(self, tensor: str) -> str:
        """The pointer parameter of a chain tensor the body reads."""
        if tensor not in self.reads:
            self.reads[tensor] = self.fresh(f"{self.ident(tensor)}_ptr")
        return self.reads[tensor]

    def out(self, tensor: str) -> str:
        """The pointer parameter of a chain tensor the kernel writes (an output buffer)."""
        if tensor not in self.writes:
            self.writes[tensor] = self.fresh(f"{self.ident(tensor)}_ptr")
        return self.writes[tensor]

    def row_ptr(self, tensor: str, write: bool = False) -> str:
        """A pointer to this program's row of 2-D ``tensor`` (int64 offset, before the loop)."""
        if tensor not in self.row_ptrs:
            info = self.info_of(tensor)
            base = self.out(tensor) if write else self.ptr(tensor)
            name = self.fresh(f"{self.ident(tensor)}_row")
            lanes = self.lanes_of(info.shape[1])
            stride = "SLOTS" if lanes == 1 else f"(SLOTS * {lanes})"
            self.pre(f"{name} = {base} + row * {stride}")  # row stride: {info.shape[1]} now
            self.row_ptrs[tensor] = name
        return self.row_ptrs[tensor]

    def dim_arg(self, name: str, expr: str, comment: str) -> str:
        """An i32 parameter bound to dim expression ``expr`` at the call (a static dim is an
        argument, not a constant, so a re-sized manifest runs the same cubin)."""
        param = self.fresh(name)
        self.dims.append((param, expr, comment))
        return param

    def index(self, tensor: str) -> str:
        """This row's entry of an integer index tensor (loaded once, before the loop)."""
        if tensor not in self.indexes:
            name = self.fresh(f"{self.ident(tensor)}_idx")
            self.pre(f"{name} = tl.load({self.ptr(tensor)} + row)")
            self.indexes[tensor] = name
        return self.indexes[tensor]

    def column_partial(self, tensor: str, lanes: int) -> str:
        """A pointer to this program's row of the (rows, W) fp32 buffer that holds a column
        reduction's per-row terms (``reduce_col``: a finalize folds it over the rows, as it
        folds a GEMM's per-tile partials; here a tile is one row)."""
        self.column_partials.append(tensor)
        name = self.fresh(f"{self.ident(tensor)}_row")
        stride = "SLOTS" if lanes == 1 else f"(SLOTS * {lanes})"
        self.pre(f"{name} = {self.out(tensor)} + row * {stride}")
        return name

    def partial(self, tensor: str, expr: str) -> None:
        """Record a finished per-row partial (a name bound after the loop) and write it."""
        self.partials[tensor] = expr
        self.post(f"tl.store({self.out(tensor)} + row, {expr})")


def _atom(expr: str) -> str:
    """``expr`` parenthesized unless it is one name or call (no operator at top level)."""
    depth = 0
    for ch in expr:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if depth == 0 and ch == " ":
            return f"({expr})"
    return expr
