"""Column ranges: an item that applies to a range of the step's columns only (``cols:``).

Spelling and meaning
--------------------
An elementwise item, or ``rope``/``rope_bwd``, may carry ``cols: [lo, hi]``: two dim expressions
(or integers; ``0`` is allowed) folding to ``0 <= lo < hi <= W``, W the step's width (GEMM N in a
kernel). Inside the half-open range the item computes as usual; outside it, its result is its
FIRST operand, unchanged::

    - {mul: [z, head_rstd], cols: [0, "Q+KV"], as: zn}   # q and k heads normalized, v as is

So the first operand and the result must both be tiles as wide as the step: that is what "passes
through" means, with nothing to broadcast. ``coda check`` refuses (located at ``cols``) a range
whose bounds do not fold to integers (a dynamic dim), are out of bounds or empty, a result or
first operand that is not such a tile, odd bounds in a pair kernel (``acc_pair``: the epilogue
sees adjacent-column pairs, and a pair is never split by a range; ``rope``'s own pairs need even
bounds in every step) and ranges in ``packed_pair`` kernels (which read no column table). A
ranged item inside a ``prepass`` statistic's input (or rotate-half RoPE's, re-computed in the
prepass fn too) is fine: the prepass fn reads the column table as the main fn does.

Lowering
--------
The primitive computes its full-width result (as without ``cols``), then the result is selected
per element from the global column: ``select(col < hi, y, x)`` and/or ``select(col >= lo, ...)``
(one compare and one select per bound that is not the tile's edge; a range starting at 0 needs
one). In a GEMM epilogue the column is the kernel's column table (``LowerCtx.columns``, the
``col_index`` machinery: QuACK's fn sees values, not coordinates), in ``acc_pair`` mode the even
lane's column decides both lanes (bounds are even). Bounds are compile-time constants in the
epilogue; in host steps they are i32 launch arguments (``HostCtx.dim_arg``), like every shape.
The reference is ``torch.where`` over ``arange(W)``.

Mutants (``coda check --math``): the item without its range, and the range shrunk by one pair at
its upper end; a spec whose equivalence does not pin the range's bounds does not prove it.
"""

from __future__ import annotations

from dataclasses import replace

from coda_spec import dims as dimmod
from coda_spec.errors import ItemError
from coda_spec.primitives.base import PAIR, Primitive

COLS = {
    "type": "array",
    "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]},
    "minItems": 2,
    "maxItems": 2,
    "description": "apply the item to columns [lo, hi) only; elsewhere the result is the first "
    "operand (dim expressions)",
}
# Why packed kernels take no range (they read no column table; ``_loads.NO_PACKED_TABLE``).
NO_PACKED_RANGE = (
    "a column range selects by the kernel's column table, which a packed_pair kernel does not "
    "read in coda 1"
)


def fold_bound(expr, sizes: dict) -> int:
    """A range bound as an int (``0`` allowed); raises ``DimError`` when it does not fold."""
    if isinstance(expr, int) and not isinstance(expr, bool):
        if expr < 0:
            raise dimmod.DimError(f"a column bound must be >= 0, not {expr}")
        return expr
    if isinstance(expr, str) and expr.strip() == "0":
        return 0
    out = dimmod.fold(expr, dict(sizes))
    if not isinstance(out, int):
        raise dimmod.DimError(
            f"column bound {expr!r} depends on the dynamic dim '{out}'",
            "a column range needs static bounds: give the dim a size under dims:",
        )
    return int(out)


def bounds(op, sizes: dict) -> tuple[int, int] | None:
    """``op``'s column range as ints, or None when it has none (raises ``ItemError`` at
    ``cols`` when a bound does not fold)."""
    cols = op.get("cols")
    if cols is None:
        return None
    try:
        lo, hi = (fold_bound(x, sizes) for x in cols)
    except dimmod.DimError as e:
        raise ItemError(f"cols: {e}", "cols", e.hint) from e
    return lo, hi


def _first(op):
    raw = op.get(op.prim)
    return raw[0] if isinstance(raw, list) else raw


def _check(tc, op, ins, results, pair: bool) -> None:
    lo, hi = bounds(op, tc.sizes)
    width = tc.width
    if not isinstance(width, int):
        raise ItemError(
            f"cols: the step's width {width} is dynamic; a column range needs a static width",
            "cols",
        )
    if not 0 <= lo < hi <= width:
        raise ItemError(
            f"cols: [{lo}, {hi}) is not a non-empty range of the step's {width} columns",
            "cols",
            f"bounds satisfy 0 <= lo < hi <= {width}",
        )
    if pair and (lo % 2 or hi % 2):
        raise ItemError(
            f"cols: [{lo}, {hi}) splits a column pair; '{op.prim}' rotates adjacent pairs",
            "cols",
            "give even bounds (a head boundary)",
        )
    r = results[0]
    if r.kind != "tile" or r.width != width:
        raise ItemError(
            f"cols: a ranged item's result must be a tile as wide as the step ({width}); "
            f"'{op.prim}' makes {r.show()}",
            "cols",
            "apply the range to an item over full-width tiles",
        )
    raw = op.get(op.prim)
    first = ins[op.prim][0] if isinstance(raw, list) else ins[op.prim]
    if first.kind != "tile" or first.width != width:
        raise ItemError(
            f"cols: outside the range the result is the first operand, '{_first(op)}', "
            f"which must be a tile as wide as the step ({width}); it is {first.show()}",
            "cols",
            "put the tile first (mul: [tile, scale], not [scale, tile])",
        )


def range_refusal(op, mode: str, sizes: dict) -> ItemError | None:
    """Why a kernel of pairing ``mode`` cannot lower ``op``'s range, or None (asked by
    ``check.lowering`` once the mode is known, and by the lowering)."""
    if op.get("cols") is None:
        return None
    if mode == "packed_pair":
        return ItemError(NO_PACKED_RANGE, hint="compute it in a host step or a plain kernel")
    if mode == "acc_pair":
        try:
            lo, hi = bounds(op, sizes)
        except ItemError:
            return None  # reported by the typing walk
        if lo % 2 or hi % 2:
            return ItemError(
                f"cols: [{lo}, {hi}) splits a column pair of this acc_pair kernel (its "
                "epilogue sees adjacent columns together)",
                hint="give even bounds",
            )
    return None


def _reference(p: Primitive):
    def reference(rt, op, ins, tensors):
        out = p.reference(rt, op, ins, tensors)
        rng = bounds(op, rt.sizes)
        if rng is None:
            return out
        y, x = out[0], ins[op.prim][0] if isinstance(op.get(op.prim), list) else ins[op.prim]
        j = rt.torch.arange(y.shape[-1], device=y.device).reshape(1, -1)
        keep = (j >= rng[0]) & (j < rng[1])
        return (rt.torch.where(keep, y, x),) + tuple(out[1:])

    return reference


def _lower(p: Primitive):
    def lower(lc, op):
        if op.get("cols") is None:
            return p.lower(lc, op)
        lo, hi = bounds(op, lc.sizes())
        result = op.results[0]
        full = lc.fresh(f"{lc.ident(result)}_all")
        p.lower(lc, replace(op, args=tuple(a for a in op.args if a[0] != "cols"), results=(full,)))
        y, x, cols = lc.v(full), lc.vs(_first(op)), lc.columns()
        conds = ([f"{{c}} >= {float(lo)!r}"] if lo > 0 else []) + (
            [f"{{c}} < {float(hi)!r}"] if hi < lc.width else []
        )

        def pick(c, ya, xa):
            for cond in conds:
                ya = lc.call("select", cond.format(c=c), ya, xa)
            return ya

        if y.form == "p":
            ca, _ = lc.lanes(cols, "col")
            (ya, yb), (xa, xb) = lc.lanes(y), lc.lanes(x)
            a, b = lc.fresh(f"{lc.ident(result)}_a"), lc.fresh(f"{lc.ident(result)}_b")
            lc.line(f"{a} = {pick(ca, ya, xa)}")
            lc.line(f"{b} = {pick(ca, yb, xb)}")
            lc.let_pair(result, a, b)
        else:
            lc.let(result, pick(cols.expr, y.expr, x.expr), "s")

    return lower


def _host(p: Primitive):
    def host(hc, op):
        if op.get("cols") is None:
            return p.host(hc, op)
        result = op.results[0]
        full = hc.fresh(f"{hc.ident(result)}_all")
        hc.declare(full, hc.value_type(result))
        p.host(hc, replace(op, args=tuple(a for a in op.args if a[0] != "cols"), results=(full,)))
        y, x = hc.value(full), hc.value(_first(op))
        lo_expr, hi_expr = op.get("cols")
        lo_at, _ = bounds(op, hc.checked.spec.dim_sizes())
        hi = hc.dim_arg(f"{hc.ident(result)}_hi", str(hi_expr), "column range end")
        keep = "({c} < " + hi + ")"
        if lo_at > 0:
            lo = hc.dim_arg(f"{hc.ident(result)}_lo", str(lo_expr), "column range start")
            keep = "({c} >= " + lo + ") & " + keep
        n = len(y.lanes)
        out = []
        for lane, (ya, xa) in enumerate(zip(y.lanes, hc.spread(x, n), strict=True)):
            c = hc.column(n, lane)
            out.append(f"tl.where({keep.format(c=c)}, {ya}, {xa})")
        hc.let(result, out)

    return host


def _mutants(p: Primitive):
    def mutants(op):
        base = p.mutants(op)
        cols = op.get("cols")
        if cols is None:
            return base
        dropped = replace(op, args=tuple(a for a in op.args if a[0] != "cols"))
        shrunk = op.with_arg("cols", [cols[0], f"({cols[1]})-2"])
        return (*base, dropped, shrunk)

    return mutants


def ranged(p: Primitive) -> Primitive:
    """``p`` with an optional ``cols:`` range (module doc): schema, typing, reference, both
    lowerings and mutants."""
    schema = dict(p.schema)
    schema["properties"] = {**p.schema["properties"], "cols": COLS}
    pair = p.family == PAIR

    def infer(tc, op, ins, tensors):
        results = p.infer(tc, op, ins, tensors)
        if op.get("cols") is not None:
            _check(tc, op, ins, results, pair)
        return results

    def item_refusal(op, where, sizes):
        no = range_refusal(op, where, sizes)
        return no if no is not None else p.item_refusal(op, where, sizes)

    def bakes(op, where):
        """A kernel compiles its range's bounds in (a host kernel takes them as i32 arguments)."""
        bounds = op.get("cols") if where == "kernel" else None
        return p.bakes(op, where) + tuple(b for b in bounds or () if isinstance(b, str))

    return replace(
        p,
        schema=schema,
        infer=infer,
        item_refusal=item_refusal,
        bakes=bakes,
        reference=_reference(p),
        mutants=_mutants(p),
        lower=_lower(p) if p.lower is not None else None,
        host=_host(p) if p.host is not None else None,
    )
