"""Per-step typing for ``analyze``: walk kernels, host steps and finalizes in order.

Part of stage ``analyze``. Each epilogue item is typed by its primitive's ``infer`` (dispatch on
``op.prim`` via the registry, operands resolved through the primitive's declared ports, ``TypeCtx``
from ``check.facts``). The walker tracks which chain tensors exist at each point, which have been
consumed in place (``add_to``), and which reduction partials still wait for a finalize; what it
produces are ``TensorInfo``/``StepInfo`` records (``check.facts``). The 16-byte TMA row rule reads
element sizes from the one dtype table (``coda_spec.dtypes``).
"""

from __future__ import annotations

from coda_spec.check.facts import (
    UNKNOWN_PARTIAL,
    Partial,
    StepInfo,
    TensorInfo,
    TypeCtx,
    flat,
    load_hint,
    shape_expr,
)
from coda_spec.check.gemm import gemm_shape, tma_rule
from coda_spec.check.lowering import epilogue_refusals, host_refusals
from coda_spec.check.writes import finalize_step, store_item
from coda_spec.errors import Diagnostic, ItemError, did_you_mean
from coda_spec.finalize import ops_folding
from coda_spec.primitives.base import (
    FP8_DTYPES,
    INDEX_DTYPES,
    MASK_DTYPES,
    PAIR,
    VType,
    double,
    half,
)


def _fp8_input(t) -> bool:
    """An fp8 tensor the spec declares (not one a store wrote): read as a GEMM operand only."""
    return t.origin == "input" and t.dtype in FP8_DTYPES


def _first_fold(kind: str) -> str:
    """The finalize a hint suggests for a ``kind`` partial (``sum`` for an unknown kind)."""
    return (ops_folding(kind) or ("sum",))[0]


class StepWalker:
    def __init__(self, src, sizes, prims, diags, warnings, outputs, forward=None):
        self.src, self.sizes, self.prims = src, sizes, prims
        self.diags, self.warnings, self.outputs = diags, warnings, outputs
        self.forward = forward or {}  # backward only: forward tensors (to explain 'save')
        self.produced: list[TensorInfo] = []
        self.read: set = set()
        self.consumed: dict = {}  # name -> (step, new name)
        self.finalized: set = set()
        self.rows = None  # rows of the step being walked (for load hints)
        self.width_src = None  # (tensor, dim index) the step's width comes from (for notes)
        self.vector_over = None  # a host step over a vector: its name (no per-column values)
        self.unknown: set = set()  # unknown tensor names, reported once at their first use
        # Where this walker's outputs are declared (the backward walker gets the forward tensors).
        self.out_section = ("outputs",) if forward is None else ("backward", "outputs")

    # -- helpers -------------------------------------------------------------------------------
    def err(self, path, msg, hint="", key=False):
        self.diags.append(self.src.diag(path, msg, hint, key=key))

    def note(self, path, msg, hint=""):
        """A note explaining the error just reported, at a second place (a declaration)."""
        self.diags.append(self.src.diag(path, msg, hint, severity="note"))

    def tensor(self, name, scope, path, quiet):
        """Resolve a chain tensor reference or report why it cannot be read here."""
        if name in scope:
            self.read.add(name)
            if scope[name].shape == ("?",):  # written by a step that failed (see _failed)
                return None
            return scope[name]
        if name in self.consumed:
            step, new, how, line = self.consumed[name]
            if how == "over":
                self.err(
                    path,
                    f"'{name}' was written over by step '{step}' (store {new} over: {name}, "
                    f"line {line})",
                    f"read '{name}' before that store, or store '{new}' without over:",
                )
            else:
                self.err(
                    path,
                    f"'{name}' was accumulated into in place by step '{step}'",
                    f"read its new name '{new}'",
                )
        elif name in quiet or name in self.unknown:  # reported already, or explained elsewhere
            return None
        elif name in self.forward:
            self.err(
                path,
                f"'{name}' is a forward tensor not listed in backward.save",
                "add it to backward.save, or recompute it",
            )
        else:
            self.err(path, f"unknown tensor '{name}'", did_you_mean(name, scope))
            self.unknown.add(name)
        return None

    # -- steps -----------------------------------------------------------------------------------
    def walk(self, steps, scope, quiet) -> tuple:
        out = []
        for step in steps:
            if step.kind == "finalize":
                out.append(finalize_step(self, step, scope, quiet))
            else:
                out.append(self.epilogue_step(step, scope, quiet))
        for t in self.produced:
            if t.origin == "partial" and t.name not in self.finalized:
                op = _first_fold(t.partial.reduce if t.partial else "sum")
                self.err(
                    t.loc.path,
                    f"reduction '{t.name}' is never finalized",
                    f"add a step: - {{finalize: {op}, of: {t.name}, as: ...}}",
                )
        return tuple(out)

    def epilogue_step(self, step, scope, quiet):
        is_kernel = step.kind == "kernel"
        env: dict = {}
        self.vector_over = None
        if is_kernel:
            shape = gemm_shape(self, step, scope, quiet)
            if shape is None:
                return self._failed(step, scope)
            rows, width, k, dtype, operands = shape
            env["acc"] = [VType("tile", width), step.gemm.loc, True]
            b = step.gemm.b
            self.width_src = (
                scope.get(b.name),
                0 if b.transposed else 1,
                "the accumulator width {w} is the GEMM's N",
            )
            ops = step.epilogue
        else:
            over = self.tensor(step.over, scope, step.loc.path + ("over",), quiet)
            if over is None:
                return self._failed(step, scope)
            if _fp8_input(over):
                self.err(
                    step.loc.path + ("over",),
                    f"host step '{step.name}' iterates over the {over.dtype} input "
                    f"'{step.over}'; coda 1 reads fp8 inputs only as GEMM operands",
                    "use it as a: or b: of a kernel's gemm, or declare it bf16",
                )
                return self._failed(step, scope)
            if len(over.shape) not in (1, 2):
                self.err(
                    step.loc.path + ("over",),
                    f"host steps iterate over the rows of a matrix or the elements of a vector; "
                    f"'{step.over}' has rank {len(over.shape)}",
                )
                return self._failed(step, scope)
            rows, k, operands = over.shape[0], None, ()
            if len(over.shape) == 2:
                width = over.shape[1]
                self.width_src = (over, 1, f"host step '{step.name}' is {{w}} wide")
            else:  # over a vector [M]: one row per element, no columns (per-row values only)
                width, self.vector_over = None, step.over
            dtype = over.dtype if over.dtype not in INDEX_DTYPES + MASK_DTYPES else "fp32"
            ops = step.body
        tc = TypeCtx(rows, width, self.sizes, is_kernel)
        self.rows = rows
        reads, writes, wrote = [], [], False
        for op in ops:
            wrote |= self._op(step, op, env, scope, quiet, tc, dtype, reads, writes)
        if not wrote:
            outs = [n for n in env if n in self.outputs]
            self.err(
                step.loc.path,
                f"step '{step.name}' writes nothing",
                f"add `- {{store: {outs[0]}}}`" if outs else "add a store or a reduction",
            )
        # an item with two results (dswiglu's [dz, out]) runs for the one that is used: its other
        # result (the recomputed activation coda grad names out_r) is no dead code
        live = {loc.path for _t, loc, used in env.values() if used and loc is not None}
        for name, (_t, loc, used) in env.items():
            if not used and loc.path not in live:
                self.warnings.append(
                    Diagnostic(
                        self.src.file,
                        loc.line,
                        loc.col,
                        self.src.diag(loc.path, "").path,
                        f"value '{name}' is never used",
                        severity="warning",
                    )
                )
        mode = self._mode(step, env, ops, width)
        if is_kernel:
            epilogue_refusals(self, ops, mode, width, scope, env)
        else:
            host_refusals(self, ops)
        values = tuple((n, v[0]) for n, v in env.items())
        return StepInfo(
            step.name,
            step.kind,
            tuple(dict.fromkeys(reads)),
            tuple(writes),
            rows,
            width,
            k,
            mode,
            values,
            operands,
        )

    def _width_note(self, width):
        """Point at where an (odd) step width is declared: the tensor whose shape sets it."""
        info, idx, what = self.width_src or (None, 0, "")
        if info is None or not isinstance(width, int):
            return
        if info.origin != "input":
            by = f" by step '{info.producer}'" if info.producer else ""
            what = what.format(w=width)
            self.note(info.loc.path, f"{what}: the width of '{info.name}', written here{by}")
            return
        expr = shape_expr(self.src.data, info.name, idx)
        shown = f" ({expr})" if isinstance(expr, str) else ""
        hint = f"make it even, e.g. {width + 1}"
        if isinstance(expr, str) and expr.isidentifier():
            hint = f"make {expr} even under dims:, e.g. {expr}: {width + 1}"
        self.note(
            ("tensors", info.name, "shape", idx),
            f"{what.format(w=width)}: dim {idx} of '{info.name}'{shown}, declared here",
            hint,
        )

    def _failed(self, step, scope):
        """The step could not be typed (error already reported): register what it writes with
        unknown shapes so that later steps and the outputs check do not cascade."""
        ops = step.ops
        for op in ops:
            p = self.prims[op.prim]
            if p.results == "none":
                names, origin = [op.get("to")], "stored"
            elif p.family == "reduction":
                names, origin = list(op.results), "partial"
            else:
                continue
            for name in names:
                if name in scope:
                    continue
                part = UNKNOWN_PARTIAL if origin == "partial" else None
                dtype = self.outputs.get(name, "fp32")
                info = TensorInfo(name, ("?",), dtype, origin, step.name, op.loc, partial=part)
                self.produced.append(info)
                self.finalized.add(name)
                scope[name] = info
        return StepInfo(step.name, step.kind, (), ())

    def _mode(self, step, env, ops, width):
        widths = {v[0].width for v in env.values() if v[0].kind == "tile"}
        narrow, wide = half(width) in widths, double(width) in widths
        if narrow and wide:
            self.err(
                step.loc.path,
                "a kernel cannot mix half-width (pair) and double-width (packed) tiles",
            )
        if wide:
            return "packed_pair"
        if narrow or any(self.prims[o.prim].family == PAIR for o in ops):
            return "acc_pair"
        return "plain"

    def _operand(self, raw, path, env, scope, later, loc=None):
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return VType("scalar")
        if raw in env:
            env[raw][2] = True
            return env[raw][0]
        if raw == "acc":
            self.err(path, "host steps have no accumulator 'acc'", "load a tile instead")
        elif raw in later:
            self.err(
                path,
                f"value '{raw}' is used before it is defined (line {later[raw]})",
                "move this item after its definition",
            )
            return None
        elif raw in scope and scope[raw].origin == "partial":
            self.err(
                path,
                f"'{raw}' is a reduction partial; only a finalize step can read it",
                "finalize it in a later step, e.g. - {finalize: "
                f"{_first_fold(scope[raw].partial.reduce)}, of: {raw}, as: ...}}",
            )
        elif raw in scope:
            self.err(
                path,
                f"'{raw}' is a chain tensor, not an epilogue value",
                load_hint(scope[raw], self.rows),
            )
        else:
            hint = did_you_mean(raw, list(env)) or ("values so far: " + ", ".join(env))
            self.err(path, f"unknown value '{raw}'", hint)
        if loc is not None:  # reported once per epilogue, as C compilers do; later uses are quiet
            env[raw] = [VType("unknown"), loc, True]
        return None

    def _op(self, step, op, env, scope, quiet, tc, dtype, reads, writes) -> bool:
        p = self.prims[op.prim]
        path = op.loc.path
        ops = step.ops
        idx = ops.index(op)
        later = {r: o.loc.line for o in ops[idx + 1 :] for r in o.results}
        ins, ok = {}, True
        for key in p.operands:
            raw = op.get(key)
            if isinstance(raw, list):
                vals = [
                    self._operand(x, path + (key, i), env, scope, later, op.loc)
                    for i, x in enumerate(raw)
                ]
                ok &= all(v is not None for v in vals)
                ins[key] = vals
            elif raw is not None:
                ins[key] = self._operand(raw, path + (key,), env, scope, later, op.loc)
                ok &= ins[key] is not None
        tensors = {}
        for key in p.tensors:
            raw = op.get(key)
            if raw is not None:
                tensors[key] = self.tensor(raw, scope, path + (key,), quiet)
                ok &= tensors[key] is not None
                reads.append(raw)
                t = tensors[key]
                if t is not None and key != "add_to" and _fp8_input(t):
                    self.err(
                        path + (key,),
                        f"'{raw}' is an {t.dtype} input; coda 1 reads fp8 inputs only as GEMM "
                        "operands (QuACK's k-major fp8 A and B), not in "
                        + ("a GEMM epilogue" if tc.has_acc else "a host step"),
                        "use it as a: or b: of a kernel's gemm, or declare it bf16",
                    )
                    ok = False
                elif t is not None and tc.has_acc and key != "add_to" and t.dtype in FP8_DTYPES:
                    self.err(
                        path + (key,),
                        f"'{raw}' is {t.dtype}; a GEMM epilogue reads no fp8 tile in coda 1 "
                        "(QuACK 0.6.5's epilogue tile loads are 16- and 32-bit)",
                        "read it in a host step, or store it in bf16 too",
                    )
                    ok = False
        results = None
        poisoned = any(v.kind == "unknown" for v in flat(ins.values()))
        if poisoned:  # an earlier error already explains this item; stay quiet
            results = (VType("unknown"),) * max(len(op.results), 1)
        elif ok and self.vector_over and (matrix := _matrix_read(p, op, tensors)):
            self.err(
                path + (op.prim,),
                f"'{matrix}' has columns; a host step over the vector '{self.vector_over}' has "
                "none (every value is per row)",
                f"iterate over a matrix instead: over: {matrix}",
            )
        elif ok:
            try:
                results = p.infer(tc, op, ins, tensors)
            except ItemError as e:
                self.err(path + ((e.key,) if e.key else ()), e.message, e.hint)
                if e.width is not None and e.width == tc.width:
                    self._width_note(e.width)
            if results and self.vector_over and any(r.kind in COLUMNS for r in results):
                self.err(
                    path + (op.prim,),
                    f"'{op.prim}' makes a per-column value; a host step over the vector "
                    f"'{self.vector_over}' has no columns (every value is per row)",
                    "iterate over a matrix whose columns it spans instead (over: <matrix>)",
                )
                results = (VType("unknown"),) * len(results)
        if p.results == "none":
            vt = results[0] if results is not None else VType("unknown")
            store_item(self, step, op, vt, tensors, scope, tc, dtype, writes, quiet)
            return True
        if results is not None and len(results) != len(op.results):
            self.err(path + ("as",), f"'{op.prim}' has {len(results)} results; name each in as")
            results = None
        self._bind(step, op, results, env, scope, p, tc, writes)
        if results and p.tensors and op.prim.startswith("load_tile"):
            tma_rule(self, results[0].width, tensors[p.tensors[0]].dtype, path, "the loaded tile")
        return p.family == "reduction"

    def _bind(self, step, op, results, env, scope, p, tc, writes):
        for i, name in enumerate(op.results):
            path = op.loc.path + ("as",) + ((i,) if len(op.results) > 1 else ())
            is_load = bool(p.tensors) and op.get(p.tensors[0]) == name
            if name == "acc":
                self.err(path, "'acc' is the accumulator; choose another name")
                continue
            if name in env:
                self.err(
                    path,
                    f"'{name}' is already defined in this epilogue (line {env[name][1].line})",
                    "every value is named once",
                )
                continue
            if name in scope and not is_load:
                self.err(path, f"'{name}' shadows chain tensor '{name}'", "choose a new name")
                env[name] = [VType("unknown"), op.loc, True]  # reported; keep later uses quiet
                continue
            vt = results[i] if results else VType("unknown")
            if vt.kind in ("rowpart", "colpart"):
                self._partial(step, op, name, vt, tc, scope, writes)
                continue
            env[name] = [vt, op.loc, False]

    def _partial(self, step, op, name, vt, tc, scope, writes):
        if vt.kind == "rowpart":
            shape = (
                (tc.rows,)
                if not vt.group
                else (
                    tc.rows,
                    vt.width // vt.group
                    if isinstance(vt.width, int) and isinstance(vt.group, int)  # may be dynamic
                    else "?",
                )
            )
        else:
            shape = (vt.width,)
        info = TensorInfo(
            name,
            shape,
            "fp32",
            "partial",
            step.name,
            op.loc,
            partial=Partial(vt.kind, op.get(op.prim), vt.width, vt.group, tc.rows),
        )
        self.produced.append(info)
        scope[name] = info
        writes.append(name)


COLUMNS = ("tile", "row", "group")  # value kinds with one value per column (a vector has none)


def _matrix_read(p, op, tensors) -> str | None:
    """The name of a matrix (a chain tensor with columns) that item ``op`` reads, if any."""
    return next(
        (op.get(k) for k, t in tensors.items() if t is not None and len(t.shape) >= 2), None
    )
