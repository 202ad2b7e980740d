"""`reduce_row`: reduce each row of a tile over its columns (sum of squares for RMSNorm, a row
dot for zdz, an online log-sum-exp for cross-entropy).

Inside the kernel each CTA tile writes one fp32 partial per row (no atomics): the partial buffer
is ``(M, ceil(N / tile_N))``, or ``(M, N / group)`` for a per-head ``group`` reduction (whole
groups per tile). A chain-level ``finalize`` step folds the partials into the statistic.
``logsumexp`` keeps an online (max, sum of exp) pair per row, so it needs no prepass (family 5).
``sumsq`` and ``dot`` fold with one fused multiply-add per element, never rounding the product.
"""

from coda_spec.errors import ItemError
from coda_spec.primitives._reduce import (
    SIBLING,
    combine,
    grouped,
    host_terms,
    of_schema,
    operand_tiles,
    reduce_lower,
    static_group,
    statistic_inputs,
)
from coda_spec.primitives.base import DIM_REF, REDUCTION, Primitive, VType, item_schema

OPS = ("sum", "sumsq", "dot", "max", "absmax", "logsumexp")


def _infer(tc, op, ins, tensors):
    tile = operand_tiles("reduce_row", op, ins)
    group = op.get("group")
    if group is None:
        return (VType("rowpart", tile.width),)
    g = static_group(tc, op, "reduce_row")
    if isinstance(tile.width, int) and isinstance(g, int) and tile.width % g:
        raise ItemError(
            f"reduce_row: width {tile.width} is not a multiple of group {g}",
            "group",
            "per-head reductions need N % head_dim == 0",
        )
    if op.get("reduce_row") == "logsumexp":
        raise ItemError("reduce_row: grouped logsumexp is not supported", "group")
    return (VType("rowpart", tile.width, g),)


def _reference(rt, op, ins, tensors):
    kind, group = op.get("reduce_row"), op.get("group")
    if group is None:
        return (combine(rt, kind, ins["of"], dim=1),)
    return (grouped(rt, kind, ins["of"], rt.fold(group)),)


NEG_INF = "float('-inf')"


def _max_of(terms: list) -> str:
    if len(terms) == 1:
        return terms[0]
    half = len(terms) // 2
    return f"tl.maximum({_max_of(terms[:half])}, {_max_of(terms[half:])})"


def _host(hc, op):
    """Host kernels: a [BLOCK] fp32 accumulator across the row's chunks (slots past the row's
    end masked out), folded to the exact per-row value after the loop and written as the
    partial (the runtime keeps host partials "exact")."""
    kind = op.get("reduce_row")
    if op.get("group") is not None:
        raise hc.error(
            "reduces per group of columns; per-(row, group) reductions are not lowered to host "
            "kernels",
            "reduce per head in a GEMM epilogue, or without group",
        )
    name = op.results[0]
    ident = hc.ident(name)
    if kind == "logsumexp":
        v = hc.value(op.get("of"))
        _host_logsumexp(hc, name, ident, hc.spread(v, hc.lane_count(v)))
        return
    _, terms = host_terms(hc, op, "reduce_row")
    acc = hc.fresh(f"{ident}_acc")
    if kind in ("max", "absmax"):
        hc.pre(f"{acc} = tl.full([BLOCK], {NEG_INF}, tl.float32)")
        hc.line(f"{acc} = tl.maximum({acc}, {hc.masked(_max_of(terms), NEG_INF)})")
        hc.post(f"{ident} = tl.max({acc}, axis=0)")
    else:
        hc.pre(f"{acc} = tl.zeros([BLOCK], dtype=tl.float32)")
        hc.line(f"{acc} += {hc.masked(' + '.join(terms), '0.0')}")
        hc.post(f"{ident} = tl.sum({acc}, axis=0)")
    hc.partial(name, ident)


def _host_logsumexp(hc, name, ident, lanes):
    """Online log-sum-exp per slot (running max m, sum of exp(x - m)), folded after the loop.
    A slot that has seen only -inf keeps m = -inf; its reference point 0 keeps exp() at 0."""
    m, s = hc.fresh(f"{ident}_max"), hc.fresh(f"{ident}_sum")
    new, ref = hc.fresh(f"{ident}_new"), hc.fresh(f"{ident}_ref")
    hc.pre(f"{m} = tl.full([BLOCK], {NEG_INF}, tl.float32)")
    hc.pre(f"{s} = tl.zeros([BLOCK], dtype=tl.float32)")
    hc.line(f"{new} = tl.maximum({m}, {hc.masked(_max_of(list(lanes)), NEG_INF)})")
    hc.line(f"{ref} = tl.where({new} == {NEG_INF}, 0.0, {new})")
    exps = " + ".join(f"tl.exp({x} - {ref})" for x in lanes)
    hc.line(f"{s} = {s} * tl.exp({m} - {ref}) + {hc.masked(exps, '0.0')}")
    hc.line(f"{m} = {new}")
    top, top_ref = hc.fresh(f"{ident}_top"), hc.fresh(f"{ident}_top_ref")
    hc.post(f"{top} = tl.max({m}, axis=0)")
    hc.post(f"{top_ref} = tl.where({top} == {NEG_INF}, 0.0, {top})")
    hc.post(f"{ident} = {top} + tl.log(tl.sum({s} * tl.exp({m} - {top_ref}), axis=0))")
    hc.partial(name, ident)


def _mutants(op):
    kind = op.get("reduce_row")
    if kind == "dot":
        return ()
    return (op.with_arg("reduce_row", SIBLING[kind]),)


PRIMITIVE = Primitive(
    name="reduce_row",
    family=REDUCTION,
    summary="Reduce each row over columns: sum, sumsq, dot, max, absmax, logsumexp; "
    "optionally per `group` of columns (per head). Needs a `finalize` step.",
    example="- {reduce_row: sumsq, of: x1, as: ss}",
    schema=item_schema(
        "reduce_row",
        {"enum": list(OPS)},
        {"of": of_schema(OPS), "group": DIM_REF},
        required=("of",),
    ),
    operands=("of",),
    infer=_infer,
    reference=_reference,
    mutants=_mutants,
    lower=lambda lc, op: reduce_lower(lc, op, "row"),
    prepass_of=statistic_inputs,
    bakes=lambda op, where: () if op.get("group") is None else (op.get("group"),),
    host=_host,
)
