"""Shared math for reductions (reduce_row, reduce_col, prepass)."""

from __future__ import annotations

from coda_spec.primitives.base import TypeProblem, need_tile

# op -> how finalize may fold its partials
FOLDS = {
    "sum": ("sum", "mean", "rsqrt_mean"),
    "sumsq": ("sum", "mean", "rsqrt_mean"),
    "dot": ("sum", "mean", "rsqrt_mean"),
    "max": ("max",),
    "absmax": ("max",),
    "logsumexp": ("logsumexp",),
}
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
            raise TypeProblem(f"{name}: dot needs two values, of: [a, b]", "of")
        a = need_tile(of[0], f"{name} dot", "of")
        b = need_tile(of[1], f"{name} dot", "of")
        if a.width != b.width:
            raise TypeProblem(f"{name} dot: widths differ ({a.width} vs {b.width})", "of")
        return a
    if isinstance(of, list):
        raise TypeProblem(f"{name}: '{kind}' reads one value; only dot takes two", "of")
    return need_tile(of, name, "of")


def combine(rt, kind, of, dim):
    """Reduce ``of`` (a value or [a, b] for dot) along ``dim`` (keepdim)."""
    t = rt.torch
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
    if kind == "dot":
        of = [x.reshape(x.shape[0], -1, group) for x in of]
    else:
        of = of.reshape(of.shape[0], -1, group)
    return combine(rt, kind, of, dim=2).squeeze(2)


COMBINE = {"sum": "add", "sumsq": "add", "dot": "add", "max": "max", "absmax": "max_abs"}
PARTIAL_FOLD = {
    "sum": "sum",
    "sumsq": "sum",
    "dot": "sum",
    "max": "max",
    "absmax": "max",
    "logsumexp": "logsumexp",
}


def reduce_lower(lc, op, axis: str):
    """Lower reduce_row (axis "row": one value per row, QuACK ColVecReduce) or reduce_col."""
    from coda_spec.lower.emit import Field

    kind = op.get(op.prim)
    if op.get("group") is not None:
        raise lc.error(
            "grouped (per-head) reductions are not lowered yet",
            "compute per-head statistics in a host step or without group",
        )
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
    elif kind in ("sumsq", "dot"):
        a, b = (vals[0], vals[0]) if kind == "sumsq" else vals
        la, lb = (f"Pair._lift({a.expr})", f"Pair._lift({b.expr})")
        expr = f"{la}[0] * {lb}[0] + {la}[1] * {lb}[1]"
    elif paired:
        if kind != "sum":
            raise lc.error(f"'{kind}' over paired lanes is not lowered yet")
        expr = f"{vals[0].expr}.a + {vals[0].expr}.b"
    else:
        expr = vals[0].expr
    if axis == "row":
        shape = (lc.rows, lc.n_tiles(lc.width, lc.tile[1]))
    else:
        shape = (lc.n_tiles(lc.rows, lc.tile[0]), lc.width)
    if kind == "logsumexp":
        if axis != "row" or paired:
            raise lc.error("online logsumexp needs a plain per-row reduction")
        lc.outs[field] = f'OnlineLSEReduce("{field}")'
    else:
        cls = "ColVecReduce" if axis == "row" else "RowVecReduce"
        args = [f'"{field}"']
        if COMBINE[kind] != "add":
            args.append(f'combine="{COMBINE[kind]}"')
        if scaled:
            args.append("scaled=True")
        lc.reduces[field] = f"{cls}({', '.join(args)})"
    role = "colred" if axis == "row" else "rowred"
    lc.add_field(Field(field, name, role, shape, "fp32", fold=PARTIAL_FOLD[kind]))
    lc.returns[field] = expr
