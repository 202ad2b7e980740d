"""Shared math for reductions (reduce_row, reduce_col, prepass) and their QuACK lowering."""

from __future__ import annotations

from types import MappingProxyType

from coda_spec.errors import ItemError
from coda_spec.finalize import EMPTY_FOLD, REDUCTIONS, partial_fold
from coda_spec.primitives.base import need_tile
from coda_spec.primitives.lower_api import NO_PACKED_PREPASS, Field

SIBLING = {
    "sum": "sumsq",
    "sumsq": "sum",
    "max": "absmax",
    "absmax": "max",
    "logsumexp": "max",
    "dot": "sum",
    "mean": "meansq",
    "meansq": "mean",
}


# Host kernels: each op's per-element term over its operand lanes ({a}; dot: {a} * {b}).
HOST_TERM = {
    "sum": "{a}",
    "sumsq": "{a} * {a}",
    "dot": "{a} * {b}",
    "max": "{a}",
    "absmax": "tl.abs({a})",
}


def host_terms(hc, op, name: str) -> tuple:
    """(lane count, the per-element term of each lane) of reduction item ``op`` (``name``, its
    primitive) in a host kernel."""
    of = op.get("of")
    vals = [hc.value(x) for x in of] if isinstance(of, list) else [hc.value(of)]
    n = hc.lane_count(*vals)
    a, b = hc.spread(vals[0], n), hc.spread(vals[-1], n)
    kind = op.get(name)
    return n, [HOST_TERM[kind].format(a=x, b=y) for x, y in zip(a, b, strict=True)]


def static_group(tc, op, name: str):
    """``op``'s ``group`` folded to its static width: the lowering bakes it into the kernel (a
    constexpr of the statistic, a divisor of tile_N), so a dynamic one is refused here, where
    ``coda build`` would fail."""
    group = op.get("group")
    g = tc.fold(group, "group")
    if not isinstance(g, int):
        raise ItemError(
            f"{name}: group {group!r} is not a static size (it depends on a dynamic dim); the "
            "group width is compiled into the kernel",
            "group",
            "group by a dim with a size under dims: (the head width)",
        )
    return g


def of_schema(ops):
    one = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}
    if "dot" in ops:
        return {"anyOf": [one, {"type": "array", "items": one, "minItems": 2, "maxItems": 2}]}
    return one


def operand_tiles(name, op, ins):
    """The tile(s) a reduction reads, checking 'dot' takes two equal-width tiles."""
    of = ins["of"]
    kind = op.get(name)
    if kind == "dot":
        if not isinstance(of, list):
            raise ItemError(f"{name}: dot needs two values, of: [a, b]", "of")
        a = need_tile(of[0], f"{name} dot", "of")
        b = need_tile(of[1], f"{name} dot", "of")
        if a.width != b.width:
            raise ItemError(f"{name} dot: widths differ ({a.width} vs {b.width})", "of")
        return a
    if isinstance(of, list):
        raise ItemError(f"{name}: '{kind}' reads one value; only dot takes two", "of")
    return need_tile(of, name, "of")


# What a reduction over NOTHING (an empty axis: M = 0 rows) is, the rule the runtime documents:
# the value over nothing of the finalize fold that reads it (``finalize.TABLE``: sums 0, max /
# absmax / logsumexp -inf; torch's logsumexp gives -inf too, its amax refuses an empty axis);
# prepass means (no finalize reads them) are 0 as a finalize mean is: no NaN from 0/0.
EMPTY_VALUE = MappingProxyType(
    {kind: EMPTY_FOLD[partial_fold(kind)] for kind in REDUCTIONS} | {"mean": 0.0, "meansq": 0.0}
)


def combine(rt, kind, of, dim):
    """Reduce ``of`` (a value or [a, b] for dot) along ``dim`` (keepdim). An empty axis gives
    ``EMPTY_VALUE[kind]``."""
    t = rt.torch
    first = of[0] if kind == "dot" else of
    if first.shape[dim] == 0:
        shape = list(first.shape)
        shape[dim] = 1
        return t.full(shape, EMPTY_VALUE[kind], dtype=first.dtype, device=first.device)
    if kind == "dot":
        return (of[0] * of[1]).sum(dim=dim, keepdim=True)
    x = of
    if kind == "sum":
        return x.sum(dim=dim, keepdim=True)
    if kind == "sumsq":
        return (x * x).sum(dim=dim, keepdim=True)
    if kind == "mean":
        return x.mean(dim=dim, keepdim=True)
    if kind == "meansq":
        return (x * x).mean(dim=dim, keepdim=True)
    if kind == "max":
        return x.amax(dim=dim, keepdim=True)
    if kind == "absmax":
        return x.abs().amax(dim=dim, keepdim=True)
    if kind == "logsumexp":
        return t.logsumexp(x, dim=dim, keepdim=True)
    raise ValueError(kind)


def grouped(rt, kind, of, group: int):
    """Per (row, group of `group` columns) reduction -> [M, W/group]."""
    # explicit group count: reshape(rows, -1, group) is ambiguous for 0 rows
    if kind == "dot":
        of = [x.reshape(x.shape[0], x.shape[1] // group, group) for x in of]
    else:
        of = of.reshape(of.shape[0], of.shape[1] // group, group)
    return combine(rt, kind, of, dim=2).squeeze(2)


# A per-column reduction of a half-width value (one per pair) in an acc_pair kernel: QuACK's
# pair sink folds the two lanes into accumulator columns 2j and 2j + 1, so its partials would be
# as wide as the GEMM; analyze refuses it at the item (``check.lowering``), as the lowering does.
HALF_COL = (
    "a per-column reduction of a half-width value is not lowered in an acc_pair kernel",
    "store the value and reduce it in a plain kernel or a host step",
)

COMBINE = {"sum": "add", "sumsq": "add", "dot": "add", "max": "max", "absmax": "max_abs"}

# The per-element input a GroupStat folds, from the statistic's operand(s) ({x}, or {a} and {b}).
STAT_INPUT = {
    "sum": "{x}",
    "mean": "{x}",
    "sumsq": "{x} * {x}",
    "meansq": "{x} * {x}",
    "dot": "{a} * {b}",
    "max": "{x}",
    "absmax": "cute.math.abs({x})",
    "logsumexp": "{x}",
}
# How a GroupStat folds each statistic (``coda_spec.lower.quack_ops.group_stat``'s combines).
STAT_COMBINE = {"max": "max", "absmax": "max", "logsumexp": "lse"}


def whole_row_refusal(config, sizes, what: str) -> str | None:
    """Why ``config`` cannot fold a statistic over whole rows of the kernel (``sizes.width``
    columns) inside one CTA tile, or None: QuACK's prepass groups must divide both GEMM N and
    tile_N, so N must divide tile_N (a tile then holds whole rows, and a tile's columns past
    N form groups of their own, never mixed into a row's statistic). A dynamic N (width 0) is
    ``infer``'s to refuse. ``what`` names the item in the reason."""
    n, tile_n = sizes.width, config.tile_n
    if not n or tile_n % n == 0:
        return None
    why = f"{what} needs each row in one CTA tile: GEMM N = {n} must divide tile_N = {tile_n}"
    # sm90 MMA atoms are at most 256 columns wide (a 128x384 tile fails in CuTe DSL's
    # MmaF16BF16Op, measured 2026-12), so only tiles up to 256 columns are suggested
    fits = [t for t in range(n, 257, n) if t % 16 == 0]
    if not fits:
        return (
            f"{why}, and no sm90 tile_N (a multiple of 16 up to 256) is a multiple of {n}, so "
            "no configs: entry holds a row; store the row and reduce it with reduce_row and a "
            "finalize step"
        )
    config_text = f"128x{fits[0]},cluster=2x1,cooperative"
    return f"{why}; build it at tile_N = {fits[0]} (e.g. configs: ['{config_text}'])"


def folds(kind: str, of, over: str) -> str:
    """What a reduction folds, in words, for its comment: ``sum over columns of x * x``."""
    a, b = (of[0], of[-1]) if isinstance(of, list) else (of, of)
    word = {"sumsq": "sum", "dot": "sum", "absmax": "max", "meansq": "mean"}.get(kind, kind)
    what = {"sumsq": f"{a} * {a}", "meansq": f"{a} * {a}", "dot": f"{a} * {b}"}
    return f"{word} over {over} of " + what.get(kind, f"|{a}|" if kind == "absmax" else a)


def statistic_inputs(op) -> tuple:
    """``Primitive.prepass_of`` of ``prepass`` and of a grouped ``reduce_row``: the values its
    per-(row, group) statistic folds in the prepass (``of``: one, or two for ``dot``)."""
    if op.prim == "reduce_row" and op.get("group") is None:
        return ()
    of = op.get("of")
    return tuple(of) if isinstance(of, list) else (of,)


def group_stat(lc, op, kind: str, name: str, tensor: str, of=None) -> tuple[str, str, int]:
    """Declare a per-(row, group) statistic folded in the kernel's prepass (QuACK's acc prepass
    with coda's ``GroupStat``): its input is computed in the prepass fn from ``of`` (default:
    ``op``'s ``of``; re-emitting the values it reads there), and the main fn gets a parameter
    ``name`` carrying the finalized statistic. Returns (parameter, module-level op object, group
    width)."""
    if lc.mode == "packed_cd_b16x2":
        raise lc.error(*NO_PACKED_PREPASS)
    group = op.get("group")
    g = lc.fold(group) if group is not None else lc.width
    if not isinstance(g, int) or not isinstance(lc.width, int):
        raise lc.error("a per-group statistic needs a static group width and GEMM N")
    if lc.width % g or lc.tile[1] % g:
        raise lc.error(
            f"group {g} must divide GEMM N {lc.width} and tile_N {lc.tile[1]} (the prepass "
            "folds whole groups inside one CTA tile)",
            f"use a tile_N that is a multiple of {g}",
        )
    if lc.has_operand(name):
        raise lc.error(f"'{name}' is already an operand of this kernel")
    of = op.get("of") if of is None else of
    if kind == "dot":
        a, b = (lc.prepass_value(x).expr for x in of)
        expr = STAT_INPUT[kind].format(a=a, b=b)
    else:
        expr = STAT_INPUT[kind].format(x=lc.prepass_value(of).expr)
    if kind == "absmax":
        lc.use("cute")
    lc.prepass_input(op, name, expr)
    combine = STAT_COMBINE.get(kind, "add")
    kw = {"combine": combine} if combine != "add" else {}
    if kind in ("mean", "meansq"):
        kw["mean"] = True
    glob = f"_gs_{lc.step_name}_{name}"
    what = folds(kind, of, f"{g}-column groups")
    lc.global_line(f"# {name}: {what}\n{glob} = {lc.op('GroupStat', name, **kw)}")
    # the group width is baked into the kernel (a compile-time constant): a plain int, no dim text
    lc.operand(name, glob, Field(name, tensor, "group_stat", (int(g),), "int32"))
    return name, glob, g


def grouped_reduce_lower(lc, op, kind: str):
    """reduce_row with ``group``: a prepass GroupStat whose ``.out`` writes the complete
    (M, N / group) statistic (no per-tile partials: groups never straddle tiles)."""
    name = op.results[0]
    field = lc.ident(name)
    stat = lc.fresh(f"{field}_stat")  # the GroupStat's fn parameter: no tensor or value's name
    param, glob, g = group_stat(lc, op, kind, stat, name)
    lc.extra_op(f'{glob}.out("{field}")')
    shape = (lc.rows, lc.width // g)
    lc.add_field(Field(field, name, "group_out", shape, "fp32", fold=partial_fold(kind)))
    what = folds(kind, op.get("of"), f"{g}-column groups")
    lc.note(f"{field}: {what} -> ({shape[0]}, {shape[1]}) fp32 by the prepass ({param} unused)")


def reduce_lower(lc, op, axis: str):
    """Lower reduce_row (axis "row": one value per row, QuACK ColVecReduce) or reduce_col."""
    kind = op.get(op.prim)
    if op.get("group") is not None:
        if axis != "row":
            raise lc.error("grouped column reductions are not lowered")
        return grouped_reduce_lower(lc, op, kind)
    of = op.get("of")
    vals = [lc.vs(x) for x in of] if isinstance(of, list) else [lc.vs(of)]
    name = op.results[0]
    field = lc.ident(name)
    paired = any(v.form == "p" for v in vals)
    scaled = False
    if kind in ("sumsq", "dot") and not paired:
        a, b = (vals[0], vals[0]) if kind == "sumsq" else vals
        expr, scaled = f"({a.expr}, {b.expr})", lc.mode == "plain"
        if not scaled:
            expr = f"{a.expr} * {b.expr}"
    elif paired and kind not in ("sum", "sumsq", "dot"):
        raise lc.error(f"'{kind}' over paired lanes is not lowered yet")
    elif paired:
        a, b = vals[0], (vals[-1] if kind == "dot" else vals[0])  # sum reads a only
        if lc.mode == "acc_pair":
            # QuACK's acc_pair sinks take both lanes (two columns): a Pair of per-lane terms
            expr = a.expr if kind == "sum" else f"{a.expr} * {b.expr}"
        else:
            # packed pairs: one sink value per (even, odd) column pair, so only a row reduction
            # can fold both lanes; it reads the pairs' named fp32 lanes (a plain value is both)
            if axis != "row":
                raise lc.error("a per-column reduction of packed pairs is not lowered")
            (a0, a1), (b0, b1) = (lc.lanes(v) if v.form == "p" else (v.expr,) * 2 for v in (a, b))
            expr = f"{a0} + {a1}" if kind == "sum" else f"{a0} * {b0} + {a1} * {b1}"
    else:
        expr = vals[0].expr
    if lc.mode == "acc_pair" and not paired and axis != "row":
        raise lc.error(*HALF_COL)
    if lc.mode == "acc_pair" and not paired and kind != "logsumexp":
        # A half-width value (one per pair, a gated activation's output): QuACK's acc_pair
        # sinks take both lanes of the pair, so it goes in as a pair that folds to it.
        expr = lc.call("pack", expr, expr if COMBINE[kind] != "add" else "0.0")
    if axis == "row":
        shape = (lc.rows, lc.n_tiles(lc.width, lc.tile[1]))
    else:
        shape = (lc.n_tiles(lc.rows, lc.tile[0]), lc.width)
    role = "colred" if axis == "row" else "rowred"
    f = Field(field, name, role, shape, "fp32", fold=partial_fold(kind))
    # per-tile partials; the text names the tile symbolically (one fn serves every tile config)
    if axis == "row":
        what = f"{folds(kind, of, 'columns')} -> ({lc.rows}, cdiv({lc.width}, tile_N)) partials"
    else:
        what = f"{folds(kind, of, 'rows')} -> (cdiv({lc.rows}, tile_M), {lc.width}) partials"
    if kind == "logsumexp":
        if axis != "row" or paired:
            raise lc.error("online logsumexp needs a plain per-row reduction")
        lc.out_op(field, lc.op("OnlineLSEReduce", field), expr, f, what)
        return
    kw = {"combine": COMBINE[kind]} if COMBINE[kind] != "add" else {}
    if scaled:
        kw["scaled"] = True
    cls = "ColVecReduce" if axis == "row" else "RowVecReduce"
    lc.reduce(field, lc.op(cls, field, **kw), expr, f, what)
