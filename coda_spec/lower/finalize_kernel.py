"""Stage ``lower`` (per finalize step): a finalize -> ONE Triton kernel launch.

This module turns a manifest finalize step, plus the field of the kernel step that wrote its
partial buffer, into a :class:`~coda_spec.lower.triton_aot.TritonKernel`: a complete, readable
Triton module (one ``@triton.jit`` entry) and how the runtime binds and launches it (compiled to
a cubin by ``triton_aot`` at build time). Pure text: it imports neither triton nor torch. What a
finalize computes is ``coda_spec/finalize.py``'s ``TABLE`` (each op's fold, its value over
nothing, ``n`` and ``eps``, its Triton text, which this module inserts); the tests' torch
emulation (``tests/emulate.fold_partials``) states the same semantics in torch and is the oracle
of this module's tests.

Contract
--------
:func:`finalize_kernel` is a pure function of manifest-level data: the finalize step dict
(``name``, ``op``, ``of``, ``n``, ``eps``, ``result``, ``line``), the partial's ``role``,
``fold`` and buffer ``shape`` (a kernel step's field for ``of``: ``role``, ``fold``, ``shape``),
the spec file and optionally the manifest's ``dims`` (static dims fold into ``n``).
The partial is a row-major fp32 buffer; what the kernel does per role:

==============  ======================  ===================  =====================================
role            partial buffer          result (fp32)        one program per
==============  ======================  ===================  =====================================
``colred``      (M, n_tiles)            (M,)                 BLOCK_R rows; loops over the tiles
``rowred``      (m_tiles, N)            (N,)                 BLOCK_C columns; loops over the tiles
``group_out``   (M, G), complete        (M, G); (M,) if G=1  BLOCK_R rows; loops over the groups
``exact``       (L,), (L, 1) or (1, L)  (L,)                 BLOCK elements (a host step's partial)
``exact``       (R, C), complete        (R, C)               BLOCK_R rows; loops over the columns
==============  ======================  ===================  =====================================

The tile count is a launch-time ``extent`` argument (it follows the variant that wrote the
buffer; a GEMM that did not launch at M = 0 leaves an empty tile axis), so any count folds,
0 included. Folds (the op's ``fold``: ``sum``, ``max``, ``logsumexp``) then the op (its
``triton`` text, on the mean ``total / n`` when it ``needs_n``), exactly as the reference does
in torch:

* a fold over nothing is the op's ``empty`` (``EMPTY_FOLD``): sum 0, max -inf, logsumexp -inf;
  a mean with ``n = 0`` is 0 (``finalize.mean_of``), so rsqrt_mean is ``rsqrt(eps)``;
* ``logsumexp`` is max-shifted, online over the tile chunks, and shifts by 0 where the running
  max is infinite (torch's rule): all -inf gives -inf, a +inf gives +inf, never NaN from infs;
* NaN propagates through every fold (``max`` too, as ``torch.amax`` does), so a verifier's NaN
  poison in an unwritten partial slot reaches the result;
* ``n``: an int, or a dim expression folded with ``dims``; a static value is a constexpr, a
  dynamic dim (``M``) an i32 ``dim`` argument (without ``dims``, any named ``n`` is one);
* precision: exp/log are Triton's (``ex2``/``lg2`` based), sqrt and division IEEE-rounded;
  results agree with torch's to a few ulp (sums in another order), max exactly.

One divergence, by design: an ``exact`` (R, C) partial with C > 1 keeps its 2-D shape when R is
1 at the call, where the eager runtime's ``1 in buf.shape`` flattens it (no spec makes one).

Grids are ``{"extent": [of, axis], "block": B}``: cdiv of that axis of the partial at the
launch, so nothing static is baked into the grid; a grid of 0 programs (M = 0 rows) launches
nothing and leaves the (empty) result as allocated.

Why a kernel: the eager finalize is two to four torch launches (fold, divide, add, rsqrt) plus
allocations per step between two GEMMs; one launch that reads the partial once is the whole
step, and it needs no torch at run time (the cubin is launched through the driver).
"""

from __future__ import annotations

import textwrap

from coda_spec import idents
from coda_spec.dims import expr_of
from coda_spec.dims import fold as fold_dim
from coda_spec.dtypes import dtype
from coda_spec.finalize import EMPTY_FOLD, FOLD_OPS, OPS, finalize_op
from coda_spec.lower.triton_aot import MODULE_IMPORTS, TritonKernel
from coda_spec.versions import generated_banner

ROLES = ("colred", "rowred", "group_out", "exact")
FOLDED_ROLES = ("colred", "rowred")  # per-tile partials; group_out and exact are complete
TAKEN = ("triton", "tl", "_max_nan")  # names the generated module defines
BLOCK_ELEMS = 2048  # elements per program per loop iteration (16 fp32 a thread at 4 warps)
MAX_BLOCK_ROWS = 1024
MAX_BLOCK_TILES = 128  # colred: the whole tile axis of the usual variants in one iteration
ROWRED_BLOCK_COLS = 64  # N = 4096: 64 programs (more, smaller blocks: more in flight)
ROWRED_BLOCK_TILES = 32
NUM_WARPS = 4


def finalize_kernel(
    step: dict,
    role: str,
    fold: str | None,
    partial_shape: list,
    *,
    spec_file: str,
    dims: dict | None = None,
    line: int | None = None,
) -> TritonKernel:
    """The Triton kernel of one manifest finalize ``step``.

    ``role``/``fold``/``partial_shape``: the producing kernel step's field for ``step["of"]``
    (``field["role"]``, ``field["fold"]``, ``field["shape"]``: ints, dim names and
    ``cdiv(...)``); for a host step's complete partial, role ``"exact"``, fold None and the
    buffer's shape. ``dims``: the manifest's ``dims`` ({name: size, None when dynamic}); with
    it a static ``n`` such as ``"D"`` becomes a constexpr. ``line``: defaults to
    ``step["line"]``. Raises ValueError for a step the runtime could not finalize either."""
    op, name = step["op"], step["name"]
    if op not in OPS:
        raise ValueError(f"finalize step '{name}': unknown op {op!r} (one of {', '.join(OPS)})")
    if role not in ROLES:
        raise ValueError(f"finalize step '{name}': cannot finalize a {role!r} partial")
    if role in FOLDED_ROLES and fold not in FOLD_OPS:
        raise ValueError(f"finalize step '{name}': unknown partial fold {fold!r}")
    if fold in FOLD_OPS and op not in FOLD_OPS[fold]:
        raise ValueError(f"finalize step '{name}': '{op}' cannot fold {fold} partials")
    row = finalize_op(op)
    if row.needs_eps and step.get("eps") is None:
        raise ValueError(f"finalize step '{name}': {op} needs eps")
    if bool(row.second) != bool(step.get("second")):
        what = f"needs its {row.second} partial" if row.second else "reads one partial"
        raise ValueError(f"finalize step '{name}': {op} {what}")
    if step.get("over") is not None and role == "group_out":
        raise ValueError(f"finalize step '{name}': a grouped partial has no over")
    shape = list(partial_shape)
    if role != "exact" and len(shape) != 2:
        raise ValueError(f"finalize step '{name}': a {role} partial is 2-D, not {shape}")
    if not 1 <= len(shape) <= 2:
        raise ValueError(f"finalize step '{name}': a partial is 1-D or 2-D, not {shape}")
    n = _n(step, dims) if row.needs_n else None
    k = _Kernel(step, role, fold, shape, n, spec_file, step.get("line") if line is None else line)
    return k.build()


def _n(step: dict, dims: dict | None):
    """``n`` as an int (a literal: a constexpr) or a dim expression (an i32 argument evaluated
    at the call's dims, static ones included, so a build re-sized to other dims (verify's ragged
    case) divides by the right count)."""
    n = expr_of(step.get("n"))
    if n is None:
        raise ValueError(f"finalize step '{step['name']}': {step['op']} needs n")
    if isinstance(n, str) and dims is not None:
        fold_dim(n, dims)  # a malformed or unknown expression fails here, at build time
    return n


def _literal(value: float) -> str:
    """A float as Triton source text (``float("-inf")`` for an infinity)."""
    return repr(value) if abs(value) != float("inf") else f'float("{value}")'


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _hint(d, default: int) -> int:
    """A static extent to size a block by (the fallback variant's, or ``default``)."""
    return d if isinstance(d, int) and d > 0 else default


class _Kernel:
    """Assembles one finalize kernel: a builder used once, by :func:`finalize_kernel`."""

    def __init__(self, step, role, fold, shape, n, spec_file, line):
        self.step, self.role, self.fold, self.shape, self.n = step, role, fold, shape, n
        self.row = finalize_op(step["op"])
        self.of, self.result = step["of"], step["result"]
        self.second, self.over = step.get("second"), step.get("over")
        if self.over and self.fold is None:  # a host step's complete partial: the op's fold
            self.fold = self.row.fold
        self.where = f"{spec_file}:{line}"
        self.params: list[tuple[str, str, dict, str]] = []  # (param, type, arg, comment)
        self.consts: list[tuple[str, object, str]] = []  # (param, value, comment)

    # -- parameters -------------------------------------------------------------------------
    def param(self, name: str, typ: str, arg: dict, comment: str) -> None:
        self.params.append((name, typ, arg, comment))

    def const(self, name: str, value, comment: str = "") -> None:
        self.consts.append((name, value, comment))

    def grid(self, axis: int, block: int) -> dict:
        """One program per ``block`` entries of the partial's ``axis`` as it is at the launch
        (so a re-sized manifest, verify's ragged dims, needs no rebuild)."""
        return {"extent": [self.of, axis], "block": block}

    def extent(self, name: str, axis: int, comment: str = "") -> None:
        what = f"{self.of}.shape[{axis}]" + (f", {comment}" if comment else "")
        self.param(name, "i32", {"extent": [self.of, axis]}, what)

    def n_and_eps(self) -> None:
        n = self.n
        if self.row.needs_n:
            text = self.step["n"]
            if isinstance(n, int):
                self.const("N", n, "n of the mean" + (f": {text} = {n}" if text != n else ""))
            else:
                self.param("n", "i32", {"dim": n}, f"n of the mean: {n} at the call")
        if self.row.needs_eps:
            self.const("EPS", float(self.step["eps"]))

    # -- code -------------------------------------------------------------------------------
    def op_lines(self, total: str, total2: str | None = None) -> tuple[list[str], str]:
        """The step's op (its table row's Triton text) on the folded ``total`` (and the second
        partial's ``total2``): (lines, value)."""
        row = self.row
        if not row.needs_n:
            y = row.triton.format(x=total, x2=total2, eps="EPS")
            return ([], total) if y == total else ([f"y = {y}"], "y")
        pairs = [("mean", total)] + ([("mean2", total2)] if total2 is not None else [])
        if not isinstance(self.n, int):
            lines = ["# a mean over nothing (n = 0: M = 0 rows) is 0, not 0/0 (finalize.mean_of)"]
            lines += [
                f"{m} = tl.where(n > 0, {t} / tl.maximum(n, 1).to(tl.float32), 0.0)"
                for m, t in pairs
            ]
        elif self.n:
            lines = [f"{m} = {t} / N" for m, t in pairs]
        else:
            lines = ["# n = 0: a mean over nothing is 0"]
            lines += [f"{m} = tl.zeros_like({t})" for m, t in pairs]
        y = row.triton.format(x="mean", x2="mean2", eps="EPS")
        return (lines, "mean") if y == "mean" else (lines + [f"y = {y}"], "y")

    def fold_lines(self, axis: int, width: str, load: list[str]) -> tuple[list[str], str]:
        """The loop folding the tile axis (``axis`` of each block ``x`` that ``load`` reads;
        ``{other}`` in it is the fold's identity): (lines, the folded value)."""
        other = _literal(EMPTY_FOLD[self.fold])
        loop = ["for t0 in range(0, tiles, BLOCK_T):"]
        loop += ["    " + ln.format(other=other) for ln in self.with_second(load)]
        if self.fold == "sum":
            init = [f"acc = tl.zeros([{width}], dtype=tl.float32)  # a sum over no tiles is 0"]
            loop.append(f"    acc += tl.sum(x, axis={axis})")
            if self.second:
                init.append(f"acc2 = tl.zeros([{width}], dtype=tl.float32)")
                loop.append(f"    acc2 += tl.sum(x2, axis={axis})")
            return init + loop, "acc"
        if self.fold == "max":
            init = [f"acc = tl.full([{width}], {other}, tl.float32)  # max over no tiles"]
            loop.append(f"    acc = _max_nan(acc, tl.reduce(x, {axis}, _max_nan))")
            return init + loop, "acc"
        keep = "[:, None]" if axis == 1 else "[None, :]"
        init = [
            "# online logsumexp: m the running max, s = sum exp(x - shift); an infinite max",
            "# shifts by 0 (torch's rule): all -inf (or no tiles) gives log(0) = -inf, not NaN",
            f"m = tl.full([{width}], {other}, tl.float32)",
            f"s = tl.zeros([{width}], dtype=tl.float32)",
        ]
        loop += [
            f"    m_new = _max_nan(m, tl.reduce(x, {axis}, _max_nan))",
            '    shift = tl.where(tl.abs(m_new) == float("inf"), 0.0, m_new)',
            f"    s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift{keep}), axis={axis})",
            "    m = m_new",
        ]
        done = ['lse = tl.log(s) + tl.where(tl.abs(m) == float("inf"), 0.0, m)']
        return init + loop + done, "lse"

    def with_second(self, load: list[str]) -> list[str]:
        """``load`` plus the same load of the second partial (``partial2`` into ``x2``), if the
        op reads one: both partials share the layout (the check made them one step's)."""
        if not self.second:
            return load
        twin = [ln.replace("x = tl.load(partial ", "x2 = tl.load(partial2 ") for ln in load]
        twin = [ln.replace("total = tl.load(partial ", "total2 = tl.load(partial2 ") for ln in twin]
        return load + [ln for ln in twin if ln not in load]

    def totals(self, total: str) -> tuple:
        """(total, the second partial's total or None) as op_lines takes them."""
        return (total, total + "2" if self.second else None)

    def layout(self) -> str:
        if self.over:
            return "all"
        if self.role in FOLDED_ROLES:
            return self.role
        if len(self.shape) == 1 or 1 in self.shape:
            return "flat"
        return "rows"

    def _colred(self):
        rows, tiles = self.shape
        block_t = min(_pow2(_hint(tiles, 32)), MAX_BLOCK_TILES)
        block_r = min(max(BLOCK_ELEMS // block_t, 1), MAX_BLOCK_ROWS)
        self.extent("rows", 0)
        self.extent("tiles", 1, "the tile count of the variant that wrote it (may be 0)")
        self.const("BLOCK_R", block_r)
        self.const("BLOCK_T", block_t)
        fold, total = self.fold_lines(
            1,
            "BLOCK_R",
            [
                "t = t0 + tl.arange(0, BLOCK_T)",
                "ok = row_ok[:, None] & (t < tiles)[None, :]",
                "x = tl.load(partial + row[:, None] * tiles + t[None, :], mask=ok, other={other})",
            ],
        )
        op, y = self.op_lines(*self.totals(total))
        body = [
            "row = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)",
            "row_ok = row < rows",
            *fold,
            *op,
            f"tl.store(result + row, {y}, mask=row_ok)",
        ]
        what = (
            f"per-N-tile partials (colred), folded along the tiles (axis 1) with {self.fold}; "
            "one program per BLOCK_R rows"
        )
        return body, [rows], self.grid(0, block_r), what

    def _rowred(self):
        tiles, cols = self.shape
        block_c = min(_pow2(_hint(cols, ROWRED_BLOCK_COLS)), ROWRED_BLOCK_COLS)
        self.extent("tiles", 0, "the tile count of the variant that wrote it (may be 0)")
        self.extent("cols", 1)
        self.const("BLOCK_T", ROWRED_BLOCK_TILES)
        self.const("BLOCK_C", block_c)
        fold, total = self.fold_lines(
            0,
            "BLOCK_C",
            [
                "t = (t0 + tl.arange(0, BLOCK_T)).to(tl.int64)",
                "ok = (t < tiles)[:, None] & col_ok[None, :]",
                "x = tl.load(partial + t[:, None] * cols + col[None, :], mask=ok, other={other})",
            ],
        )
        op, y = self.op_lines(*self.totals(total))
        body = [
            "col = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)",
            "col_ok = col < cols",
            *fold,
            *op,
            f"tl.store(result + col, {y}, mask=col_ok)",
        ]
        what = (
            f"per-M-tile partials (rowred), folded along the tiles (axis 0) with {self.fold}; "
            "one program per BLOCK_C columns"
        )
        return body, [cols], self.grid(1, block_c), what

    def _flat(self):
        axis = 0 if len(self.shape) == 1 or self.shape[0] != 1 else 1
        size = self.shape[axis]
        self.extent("size", axis)
        self.const("BLOCK", MAX_BLOCK_ROWS)
        op, y = self.op_lines(*self.totals("total"))
        body = [
            "i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
            "ok = i < size",
            *self.with_second(["total = tl.load(partial + i, mask=ok, other=0.0)"]),
            *op,
            f"tl.store(result + i, {y}, mask=ok)",
        ]
        what = (
            f"a complete {self.role} statistic (nothing to fold), one value per element, "
            "flattened; one program per BLOCK elements"
        )
        return body, [size], self.grid(axis, MAX_BLOCK_ROWS), what

    def _rows(self):
        rows, cols = self.shape
        block_c = min(_pow2(_hint(cols, 128)), MAX_BLOCK_TILES)
        block_r = min(max(BLOCK_ELEMS // block_c, 1), MAX_BLOCK_ROWS)
        self.extent("rows", 0)
        self.extent("cols", 1)
        self.const("BLOCK_R", block_r)
        self.const("BLOCK_C", block_c)
        op, y = self.op_lines(*self.totals("total"))
        body = [
            "row = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)",
            "row_ok = row < rows",
            "for c0 in range(0, cols, BLOCK_C):",
            "    col = c0 + tl.arange(0, BLOCK_C)",
            "    ok = row_ok[:, None] & (col < cols)[None, :]",
            "    at = row[:, None] * cols + col[None, :]",
            *(
                "    " + ln
                for ln in self.with_second(["total = tl.load(partial + at, mask=ok, other=0.0)"])
            ),
            *("    " + ln for ln in op),
            f"    tl.store(result + at, {y}, mask=ok)",
        ]
        what = (
            f"a complete {self.role} statistic per (row, column) (nothing to fold); one program "
            "per BLOCK_R rows"
        )
        return body, [rows, cols], self.grid(0, block_r), what

    def _all(self):
        """``over``: every entry of the partial (tiles and rows, or the flat exact one) folds
        into one [] scalar, in one program looping over the flattened buffer in a fixed order
        (a lane-wise fold of BLOCK-wide chunks, then one reduction of the lanes): no atomics,
        so the result is the same bit for bit at every call."""
        self.extent("rows", 0)
        if len(self.shape) == 2:
            self.extent("cols", 1)
            size = "rows.to(tl.int64) * cols"
        else:
            size = "rows.to(tl.int64)"
        self.const("BLOCK", BLOCK_ELEMS)
        other = _literal(EMPTY_FOLD[self.fold])
        load = ["i = i0 + tl.arange(0, BLOCK)", "ok = i < size"]
        load += self.with_second([f"x = tl.load(partial + i, mask=ok, other={other})"])
        body = [f"size = {size}"]
        if self.fold == "sum":
            body += ["acc = tl.zeros([BLOCK], dtype=tl.float32)  # a sum over nothing is 0"]
            step = ["acc += x"]
            done = ["total = tl.sum(acc, axis=0)"]
            if self.second:
                body += ["acc2 = tl.zeros([BLOCK], dtype=tl.float32)"]
                step += ["acc2 += x2"]
                done += ["total2 = tl.sum(acc2, axis=0)"]
        elif self.fold == "max":
            body += [f"acc = tl.full([BLOCK], {other}, tl.float32)  # max over nothing"]
            step = ["acc = _max_nan(acc, x)"]
            done = ["total = tl.reduce(acc, 0, _max_nan)"]
        else:
            body += [
                "# online logsumexp per lane (m the running max, s = sum exp(x - shift)), an",
                "# infinite max shifting by 0 (torch's rule), then the lanes combine the same way",
                f"m = tl.full([BLOCK], {other}, tl.float32)",
                "s = tl.zeros([BLOCK], dtype=tl.float32)",
            ]
            step = [
                "m_new = _max_nan(m, x)",
                'shift = tl.where(tl.abs(m_new) == float("inf"), 0.0, m_new)',
                "s = s * tl.exp(m - shift) + tl.exp(x - shift)",
                "m = m_new",
            ]
            done = [
                "mx = tl.reduce(m, 0, _max_nan)",
                'top = tl.where(tl.abs(mx) == float("inf"), 0.0, mx)',
                "total = tl.log(tl.sum(s * tl.exp(m - top), axis=0)) + top",
            ]
        body += ["for i0 in range(0, size, BLOCK):"]
        body += ["    " + ln for ln in load + step]
        body += done
        op, y = self.op_lines(*self.totals("total"))
        body += [*op, f"tl.store(result, {y})"]
        what = (
            f"every entry (the {self.role} partial flattened) folded with {self.fold} into one "
            "scalar by one program in a fixed order (no atomics: reproducible)"
        )
        return body, [], [1], what

    # -- the kernel and its module ----------------------------------------------------------
    def build(self) -> TritonKernel:
        fp32 = dtype("fp32").triton_ptr
        self.param("partial", fp32, {"tensor": self.of}, "")
        if self.second:
            self.param("partial2", fp32, {"tensor": self.second}, "")
        self.param("result", fp32, {"tensor": self.result}, "")
        body, out_shape, grid, what = getattr(self, f"_{self.layout()}")()
        grid = grid[0] if isinstance(grid, list) else grid
        self.n_and_eps()
        output = {"tensor": self.result, "dtype": "fp32", "shape": out_shape, "init": "empty"}
        entry = idents.ident(self.step["name"], TAKEN)
        return TritonKernel(
            step=self.step["name"],
            source=self.render(entry, body, out_shape, what),
            entry=entry,
            signature=tuple((p, t) for p, t, _, _ in self.params),
            constexprs=tuple((c, v) for c, v, _ in self.consts),
            args=tuple(a for _, _, a, _ in self.params),
            outputs=(output,),
            grid=(grid,),
            num_warps=NUM_WARPS,
        )

    def spec_item(self) -> str:
        """The step as the spec writes it (flow style)."""
        s = self.step
        parts = [f"finalize: {s['op']}", f"of: {s['of']}"]
        if self.second:
            parts.append(f"{self.row.second}: {self.second}")
        if self.over:
            parts.append(f"over: {self.over}")
        if self.row.needs_n and s.get("n") is not None:
            parts.append(f"n: {s['n']}")
        if self.row.needs_eps:
            parts.append(f"eps: {s['eps']}")
        parts.append(f"as: {s['result']}")
        return "{" + ", ".join(parts) + "}"

    def render(self, entry: str, body: list[str], out_shape: list, what: str) -> str:
        part, out = _shape_text(self.shape), _shape_text(out_shape)
        about = f"Reads {self.of} {part} fp32 (row-major), {what}; writes {self.result} {out} fp32."
        consts = "Constexprs: " + ", ".join(f"{c}={v}" for c, v, _ in self.consts) + "."
        lines = [
            f'"""Finalize step {self.step["name"]} ({self.where}). '
            + generated_banner("finalize")[0],
            "",
            f"    {self.spec_item()}",
            "",
            *textwrap.wrap(about, 96),
            *textwrap.wrap(consts, 96),
            '"""',
            "",
            *MODULE_IMPORTS,
            "",
        ]
        if (self.role in FOLDED_ROLES or self.over) and self.fold in ("max", "logsumexp"):
            lines += [
                "",
                "@triton.jit",
                "def _max_nan(a, b):",
                '    """max that propagates NaN, as torch.amax does (tl.max drops it)."""',
                "    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)",
                "",
            ]
        lines += ["", "@triton.jit", f"def {entry}("]
        shapes = {"partial": f"{self.of} {part}", "result": f"{self.result} {out}"}
        if self.second:
            shapes["partial2"] = f"{self.second} {part}"
        for p, t, _, comment in self.params:
            lines.append(f"    {p},  # {t}: " + shapes.get(p, comment))
        for c, _, comment in self.consts:
            lines.append(f"    {c}: tl.constexpr," + (f"  # {comment}" if comment else ""))
        lines += ["):", f"    # {self.where}: {self.spec_item()}"]
        lines += ["    " + ln for ln in body]
        return "\n".join(lines) + "\n"


def _shape_text(shape: list) -> str:
    if not shape:
        return "() (a scalar)"
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
