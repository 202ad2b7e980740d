"""`reduce_row`: reduce each row of a tile over its columns (sum of squares for RMSNorm, a row
dot for zdz, an online log-sum-exp for cross-entropy).

Inside the kernel each CTA tile writes one fp32 partial per row (no atomics): the partial buffer
is ``(M, ceil(N / tile_N))``, or ``(M, N / group)`` for a per-head ``group`` reduction (whole
groups per tile). A chain-level ``finalize`` step folds the partials into the statistic.
``logsumexp`` keeps an online (max, sum of exp) pair per row, so it needs no prepass (family 5).
``sumsq`` and ``dot`` fold with one fused multiply-add per element, never rounding the product.
"""

from coda_spec.primitives._reduce import (
    SIBLING,
    combine,
    grouped,
    of_schema,
    operand_tiles,
    reduce_lower,
)
from coda_spec.primitives.base import (
    DIM_REF,
    REDUCTION,
    Primitive,
    TypeProblem,
    VType,
    item_schema,
)

OPS = ("sum", "sumsq", "dot", "max", "absmax", "logsumexp")


def _infer(tc, op, ins, tensors):
    tile = operand_tiles("reduce_row", op, ins)
    group = op.get("group")
    if group is None:
        return (VType("rowpart", tile.width),)
    g = tc.fold(group, "group")
    if isinstance(tile.width, int) and isinstance(g, int) and tile.width % g:
        raise TypeProblem(
            f"reduce_row: width {tile.width} is not a multiple of group {g}",
            "group",
            "per-head reductions need N % head_dim == 0",
        )
    if op.get("reduce_row") == "logsumexp":
        raise TypeProblem("reduce_row: grouped logsumexp is not supported", "group")
    return (VType("rowpart", tile.width, g),)


def _reference(rt, op, ins, tensors):
    kind, group = op.get("reduce_row"), op.get("group")
    if group is None:
        return (combine(rt, kind, ins["of"], dim=1),)
    return (grouped(rt, kind, ins["of"], rt.fold(group)),)


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
)
