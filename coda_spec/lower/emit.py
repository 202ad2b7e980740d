"""Stage ``lower`` (per kernel): epilogue items -> the body of a QuACK ``@gemm_epilogue`` fn.

Contract with QuACK 0.6.5 (``quack/epilogue/frontend.py`` is the authority)
--------------------------------------------------------------------------
* The fn is ``fn(acc, <operands>) -> {"D": ..., <sinks>: ...}``, called per accumulator element
  (``plain``), per adjacent column pair (``acc_pair``: full-width values are ``Pair``s, half-width
  values are scalars) or per element with a 16-bit C/D read and written as pairs at twice GEMM-N
  (``packed_cd_b16x2``: the fn parameter must be named ``c``).
* Every operand's op is pinned with ``ops=``: ``TileLoad`` (M x N), ``RowVecLoad`` ((1, N)),
  ``ColVecLoad`` ((1, M)), ``Scalar`` (device pointer). Ranks are fixed at compile time, so the
  manifest records the exact buffer shape the runtime must pass (a view of the user's tensor).
* Sinks: ``TileStore`` aux outputs (``gated=True`` for half-width outputs in acc_pair),
  ``ColVecReduce``/``RowVecReduce`` per-tile partials ((M, n_tiles) / (m_tiles, N), fp32;
  ``scaled=True`` folds a product with one FMA), ``OnlineLSEReduce`` (per-tile LSE),
  ``ColVecSelect`` (per-row gather; rows whose index is out of range are never written).
* ``add_to_output`` is a ``.gemm()`` argument with ``C=None``, so only D can accumulate.
* Prepass (``prepass=fn2, prepass_outs=(names,)``): ``fn2(acc, <operands>)`` runs per element
  over the RAW accumulator before the epilogue and feeds per-(row, group) statistics
  (``GroupStat``, coda's ``GroupedColStatsBase``; ``coda_spec.lower.quack_ops``). fn2 sees only
  ``acc`` and operands the main fn also declares, so any value a statistic reads is re-computed
  in fn2 from its definition slice (:meth:`LowerCtx.prepass_value`). The main fn receives the
  finalized statistic as a value operand (a ``Pair`` with equal lanes in ``acc_pair`` mode);
  ``op.out(name)`` in ``extra_ops`` writes it to an (M, N / group) fp32 buffer. Not with packed
  C (``packed_cd_b16x2``), which QuACK 0.6.5 refuses.

Each primitive's ``lower(lc, op)`` emits text through :class:`LowerCtx` and declares the
resources it needs; nothing here imports quack, cutlass or torch.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field

from coda_spec.errors import Diagnostic, SpecError

RESERVED = {"acc", "c", "D", "cute", "cutlass", "gemm_epilogue", "Pair", "pack", "unpack"}


class LowerError(Exception):
    """The QuACK lowering cannot express an item (refused before compiling, exit 2)."""

    def __init__(self, message: str, key: str | None = None, hint: str = ""):
        super().__init__(message)
        self.message, self.key, self.hint = message, key, hint


@dataclass(frozen=True)
class Field:
    """One entry of the kernel's EpilogueArguments, fed from (or written to) a chain tensor."""

    name: str  # the QuACK op name (= the EpilogueArguments field)
    tensor: str  # chain tensor
    # tile | row | col | scalar | index | aux | colred | rowred | lse | select
    # | group_stat (a GroupStat op: the int group width, shape (group,), baked in at compile
    #   time; None at run time) | group_out (its finalized per-(row, group) values, complete)
    role: str
    shape: tuple  # buffer shape passed to the kernel (ints and dynamic dim names)
    dtype: str
    transform: str = ""  # runtime view/conversion: "" | "turns_table" | "to_fp32"
    fold: str = ""  # partial buffers: how a finalize folds them (sum | max | logsumexp)


@dataclass(frozen=True)
class LoweredKernel:
    step: str
    symbol: str  # fn name in kernel.py and exported function name
    mode: str  # plain | acc_pair | packed_cd_b16x2
    a: tuple  # (tensor, transposed)
    b: tuple
    m: object  # rows (int or dynamic dim name)
    n: object  # GEMM N
    k: object
    d: tuple | None  # (tensor, dtype, shape) written as D
    c: tuple | None  # (tensor, dtype, shape) read as C (packed mode)
    add_to: str | None  # D accumulates into this chain tensor (in place)
    fields: tuple  # tuple[Field, ...] in declaration order
    decorator: str
    globals: tuple  # module-level lines this kernel needs
    params: tuple  # fn parameter names after acc
    body: tuple  # source lines (already indented by 4)
    line: int


@dataclass
class _Val:
    expr: str
    form: str  # "s" scalar per element | "p" Pair | "deferred" (a table its consumer places)
    tensor: str = ""


@dataclass
class LowerCtx:
    """What a primitive's ``lower`` may use. One per kernel."""

    analysis: object
    step: object
    src_lines: list
    mode: str
    rows: object
    width: object
    k: object
    tile: tuple  # (tile_M, tile_N)
    file: str
    env: dict = field(default_factory=dict)
    body: list = field(default_factory=list)
    params: dict = field(default_factory=dict)  # fn param -> op expr
    fields: list = field(default_factory=list)
    returns: dict = field(default_factory=dict)  # return key -> expr
    outputs: list = field(default_factory=list)  # TileStore op exprs
    reduces: dict = field(default_factory=dict)
    outs: dict = field(default_factory=dict)
    extra: list = field(default_factory=list)
    selects: dict = field(default_factory=dict)  # value name -> pending ColVecSelect
    globals: list = field(default_factory=list)  # module-level lines (shared op objects)
    d: tuple | None = None
    c: tuple | None = None
    add_to: str | None = None
    tmp_count: int = 0
    prims: dict = field(default_factory=dict)  # the primitive registry (prepass re-lowering)
    producers: dict = field(default_factory=dict)  # value name -> (item index, op)
    pre: LowerCtx | None = None  # the prepass fn's context (plain mode), created on first use
    pre_done: set = field(default_factory=set)  # item indexes already re-lowered into `pre`
    pre_outs: dict = field(default_factory=dict)  # prepass_outs name -> fn2 return expr
    lanes: dict = field(default_factory=dict)  # pair value expr -> its named fp32 lanes (a, b)
    names: set = field(default_factory=set)  # temporaries handed out by tmp() and fresh()

    # -- names -------------------------------------------------------------------------------
    @staticmethod
    def ident(name: str) -> str:
        if name in RESERVED or keyword.iskeyword(name) or name.startswith("_q"):
            return f"{name}_"
        return name

    def tmp(self, base: str) -> str:
        self.tmp_count += 1
        name = f"{base}_{self.tmp_count}"
        self.names.add(name)
        return name

    def fresh(self, base: str) -> str:
        """A readable temporary: ``base`` itself unless a value or tensor of this kernel, an
        operand or an earlier temporary has that name (then ``tmp(base)``)."""
        values = {r for op in self.step.epilogue for r in op.results}
        tensors = {t.name for t in self.analysis.tensors}
        taken = {self.ident(x) for x in values | tensors} | set(self.params) | self.names
        if base in taken or base in RESERVED or keyword.iskeyword(base) or base.startswith("_"):
            return self.tmp(base)
        self.names.add(base)
        return base

    def comment(self, op):
        text = self.src_lines[op.loc.line - 1].strip() if op.loc.line else op.prim
        self.body.append(f"    # {self.file}:{op.loc.line}: {text}")

    def line(self, text: str):
        self.body.append(f"    {text}")

    @staticmethod
    def error(message: str, hint: str = "") -> LowerError:
        return LowerError(message, hint=hint)

    @staticmethod
    def val(expr: str, form: str, tensor: str = "") -> _Val:
        return _Val(expr, form, tensor)

    # -- values ------------------------------------------------------------------------------
    def v(self, raw) -> _Val:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return _Val(repr(float(raw)), "s")
        val = self.env[raw]
        return val

    def vs(self, raw) -> _Val:
        """A value that must be a real expression (not a deferred table)."""
        val = self.v(raw)
        if val.form == "deferred":
            raise LowerError(f"'{raw}' is a per-pair table here; only rope can read it")
        return val

    def let(self, name: str, expr: str, form: str):
        ident = self.ident(name)
        self.line(f"{ident} = {expr}")
        self.env[name] = _Val(ident, form)

    def form_of_width(self, width) -> str:
        if self.mode == "acc_pair":
            return "p" if width == self.width else "s"
        if self.mode == "packed_cd_b16x2":
            return "p" if width != self.width else "s"
        return "s"

    # -- resources ---------------------------------------------------------------------------
    def info(self, tensor: str):
        return self.analysis.tensor(tensor)

    def param(
        self, tensor: str, role: str, op_expr: str, shape: tuple, dtype: str, transform: str = ""
    ) -> str:
        name = self.ident(tensor)
        if name not in self.params:
            self.params[name] = op_expr
            self.fields.append(Field(name, tensor, role, shape, dtype, transform))
        return name

    def add_field(self, f: Field):
        self.fields.append(f)

    def n_tiles(self, extent, tile) -> object:
        from coda_spec import dims

        return dims.cdiv(extent, tile)

    def fold(self, expr):
        """A dim expression (``head_dim``, ``3*D``) as an int, or its text if a dim is dynamic."""
        from coda_spec import dims

        sizes = {d.name: d.size for d in self.analysis.spec.dims if d.size is not None}
        return dims.fold(expr, sizes)

    # -- the prepass fn (QuACK's fn2) --------------------------------------------------------
    def prepass_value(self, raw) -> _Val:
        """``raw`` as a value of the prepass fn, re-emitting its definition slice there.

        QuACK's prepass fn sees only the raw accumulator and declared operands, so "any transform
        the statistics must see is explicit duplicate math in fn2": the items ``raw`` depends on
        (transitively, back to ``acc`` and loads) are lowered a second time, in order, into the
        prepass context, a ``plain`` (one element per call) :class:`LowerCtx` whose body becomes
        fn2 and whose loads become fn2's parameters (also operands of the main fn, as QuACK
        requires). Only loads and elementwise items can be re-emitted; anything else (pairs,
        reductions, another statistic) is refused naming the item.
        """
        if self.pre is None:
            self.pre = LowerCtx(
                self.analysis,
                self.step,
                self.src_lines,
                "plain",
                self.rows,
                self.width,
                self.k,
                self.tile,
                self.file,
                prims=self.prims,
            )
            self.pre.env["acc"] = _Val("acc", "s")
        pre = self.pre
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return pre.v(raw)
        slice_ = {}
        self._slice(raw, slice_)
        for idx in sorted(slice_):
            if idx in self.pre_done:
                continue
            op = slice_[idx]
            pre.comment(op)
            try:
                self.prims[op.prim].lower(pre, op)
            except LowerError as e:
                raise LowerError(
                    f"re-computing '{op.results[0]}' (line {op.loc.line}) in the prepass: "
                    f"{e.message}",
                    hint=e.hint,
                ) from None
            self.pre_done.add(idx)
        for f in pre.fields:  # loads the slice re-emitted are operands of the main fn too
            if f.name not in self.params:
                self.params[f.name] = pre.params[f.name]
                self.fields.append(f)
        return pre.vs(raw)

    def _slice(self, raw, out: dict):
        if not isinstance(raw, str) or raw == "acc" or raw in (self.pre.env if self.pre else {}):
            return
        idx, op = self.producers[raw]
        if idx in out:
            return
        p = self.prims[op.prim]
        if op.prim == "prepass":
            raise LowerError(
                f"'{raw}' is itself a prepass statistic (line {op.loc.line}); QuACK runs one "
                "prepass over the raw accumulator, so a statistic cannot read another",
                hint="compute the second statistic in a later kernel or a host step",
            )
        if p.family != "elementwise" and op.prim not in PREPASS_LOADS:
            raise LowerError(
                f"a statistic's input is re-computed from the raw accumulator in the prepass, "
                f"and '{raw}' comes from '{op.prim}' (line {op.loc.line}), which cannot run "
                "there (only loads and elementwise items can)",
                hint="compute the statistic from acc, loads and elementwise items only",
            )
        out[idx] = op
        for key in p.operands:
            arg = op.get(key)
            for x in arg if isinstance(arg, list) else [arg]:
                self._slice(x, out)

    def prepass_out(self, name: str, expr: str):
        """Make the prepass fn return ``expr`` (a statistic's per-element input) as ``name``."""
        self.pre_outs[name] = expr


PREPASS_LOADS = ("load_col", "load_row", "load_scalar", "load_tile")


def forms_join(*vals) -> str:
    return "p" if any(v.form == "p" for v in vals) else "s"


def lower_kernel(analysis, step, info, src_lines, file, config, prims) -> LoweredKernel:
    """Lower one kernel step (``info`` is its StepInfo). Raises SpecError on unsupported items."""
    mode = {"plain": "plain", "acc_pair": "acc_pair", "packed_pair": "packed_cd_b16x2"}[info.mode]
    lc = LowerCtx(
        analysis,
        step,
        src_lines,
        mode,
        info.rows,
        info.width,
        info.k,
        (config.tile_m, config.tile_n),
        file,
        prims=prims,
    )
    lc.env["acc"] = _Val("acc", "p" if mode == "acc_pair" else "s")
    problems = []
    for idx, op in enumerate(step.epilogue):
        p = prims[op.prim]
        reason = p.supports(config, op)
        if reason is None and p.lower is None:
            reason = f"'{op.prim}' has no GEMM-epilogue lowering yet (it runs in host steps)"
        if reason is not None:  # later items depend on this one: stop at the first
            problems.append(_diag(file, op, f"cannot lower '{op.prim}': {reason}"))
            return _fail(problems)
        lc.comment(op)
        try:
            p.lower(lc, op)
        except LowerError as e:
            problems.append(_diag(file, op, f"cannot lower '{op.prim}': {e.message}", e.hint))
            return _fail(problems)
        for r in op.results:
            lc.producers[r] = (idx, op)
    if problems:
        return _fail(problems)
    for name in lc.selects:
        problems.append(
            Diagnostic(
                file,
                step.loc.line,
                step.loc.col,
                step.name,
                f"gathered value '{name}' is never stored",
            )
        )
    if problems:
        return _fail(problems)
    return _finish(lc, step, config)


def _diag(file, op, message, hint=""):
    from coda_spec.errors import format_path

    return Diagnostic(file, op.loc.line, op.loc.col, format_path(op.loc.path), message, hint)


def _fail(problems):
    raise SpecError(problems)


def _mapping(key: str, items: dict) -> str:
    """``key={...}`` on one line, or one entry per line when that is long (readability)."""
    entries = [f'"{k}": {v}' for k, v in items.items()]
    one = f"{key}={{{', '.join(entries)}}}"
    if len(one) <= 90:
        return one
    return f"{key}={{\n" + "".join(f"        {e},\n" for e in entries) + "    }"


def _prepass_fn(lc: LowerCtx, step, fn2: str) -> str:
    """The prepass fn's source (a module-level global of the kernel, above its decorator)."""
    ret = ", ".join(f'"{k}": {v}' for k, v in lc.pre_outs.items())
    lines = [
        f"def {fn2}({', '.join(['acc', *lc.pre.params])}):",
        f"    # {lc.file}:{step.loc.line}: prepass of kernel '{step.name}' (QuACK runs it first,",
        "    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;",
        "    # the values they read are re-computed here from acc and the kernel's loads",
        *lc.pre.body,
        f"    return {{{ret}}}",
    ]
    return "\n\n" + "\n".join(lines) + "\n\n"


def _finish(lc: LowerCtx, step, config) -> LoweredKernel:
    ret = ", ".join(f'"{k}": {v}' for k, v in lc.returns.items())
    lc.line(f"return {{{ret}}}")
    args = [_mapping("ops", lc.params)]
    if lc.outputs:
        args.append("outputs=(" + ", ".join(lc.outputs) + ",)")
    if lc.reduces:
        args.append(_mapping("reduces", lc.reduces))
    if lc.outs:
        args.append(_mapping("outs", lc.outs))
    if lc.extra:
        args.append("extra_ops=(" + ", ".join(lc.extra) + ",)")
    if lc.pre_outs:
        fn2 = f"coda_{step.name}_prepass"
        lc.globals.append(_prepass_fn(lc, step, fn2))
        args.append(f"prepass={fn2}")
        args.append("prepass_outs=(" + ", ".join(f'"{k}"' for k in lc.pre_outs) + ",)")
    if lc.mode != "plain":
        args.append(f'mode="{lc.mode}"')
    deco = "@gemm_epilogue(\n" + "".join(f"    {a},\n" for a in args) + ")"
    g = step.gemm
    params = tuple(lc.params)
    if lc.c is not None:
        params = ("c",) + tuple(p for p in params if p != "c")
    return LoweredKernel(
        step=step.name,
        symbol=f"coda_{step.name}",
        mode=lc.mode,
        a=(g.a.name, g.a.transposed),
        b=(g.b.name, g.b.transposed),
        m=lc.rows,
        n=lc.width,
        k=lc.k,
        d=lc.d,
        c=lc.c,
        add_to=lc.add_to,
        fields=tuple(lc.fields),
        decorator=deco,
        globals=tuple(lc.globals),
        params=params,
        body=tuple(lc.body),
        line=step.loc.line,
    )
