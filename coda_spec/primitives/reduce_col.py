"""`reduce_col`: reduce each column of a tile over its rows (the RMSNorm weight gradient
dgamma = sum_m g * u, bias gradients).

Each CTA tile writes one fp32 partial per column: the buffer is ``(ceil(M / tile_M), N)``,
folded by a chain-level ``finalize`` step.
"""

from coda_spec.primitives._reduce import SIBLING, combine, of_schema, operand_tiles, reduce_lower
from coda_spec.primitives.base import REDUCTION, Primitive, VType, item_schema

OPS = ("sum", "sumsq", "dot", "max", "absmax")


def _mutants(op):
    kind = op.get("reduce_col")
    return () if kind == "dot" else (op.with_arg("reduce_col", SIBLING[kind]),)


PRIMITIVE = Primitive(
    name="reduce_col",
    family=REDUCTION,
    summary="Reduce each column over rows: sum, sumsq, dot, max, absmax. Needs a `finalize`.",
    example="- {reduce_col: dot, of: [acc, u], as: dgamma_part}",
    schema=item_schema("reduce_col", {"enum": list(OPS)}, {"of": of_schema(OPS)}, required=("of",)),
    operands=("of",),
    infer=lambda tc, op, ins, tensors: (
        VType("colpart", operand_tiles("reduce_col", op, ins).width),
    ),
    reference=lambda rt, op, ins, tensors: (combine(rt, op.get("reduce_col"), ins["of"], 0),),
    mutants=_mutants,
    lower=lambda lc, op: reduce_lower(lc, op, "col"),
    no_host="a column reduction sums over rows, across programs; a host kernel runs one program "
    "per row, so reduce the columns in a GEMM epilogue instead",
)
