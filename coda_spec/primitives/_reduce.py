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
