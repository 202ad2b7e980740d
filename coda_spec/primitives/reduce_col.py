"""`reduce_col`: reduce each column of a tile over its rows (the RMSNorm weight gradient
dgamma = sum_m g * u, bias gradients).

Each CTA tile writes one fp32 partial per column: the buffer is ``(ceil(M / tile_M), N)``,
folded by a chain-level ``finalize`` step. In a host step (one program per row, no atomics: a
column sum across programs is not reproducible with them) a tile is one row: each program writes
its row's per-column terms (``x``, ``x * x``, ``a * b``, ``x``, ``|x|``) to an ``(M, N)`` fp32
buffer, and the finalize folds it over the rows in its own kernel, in a fixed order. That buffer
is M x N fp32: a GEMM epilogue's partials are tile_M times smaller, so prefer one where a GEMM
produces the operand.
"""

from coda_spec.primitives._reduce import (
    SIBLING,
    combine,
    host_terms,
    of_schema,
    operand_tiles,
    reduce_lower,
)
from coda_spec.primitives.base import REDUCTION, Primitive, VType, item_schema

OPS = ("sum", "sumsq", "dot", "max", "absmax")


def _mutants(op):
    kind = op.get("reduce_col")
    return () if kind == "dot" else (op.with_arg("reduce_col", SIBLING[kind]),)


def _host(hc, op):
    """Host kernels: this row's per-column terms, stored (masked past the row's end) to this
    row of the (M, W) partial buffer (``HostCtx.column_partial``)."""
    n, terms = host_terms(hc, op, "reduce_col")
    dst = hc.column_partial(op.results[0], n)
    hc.line(f"tl.store({dst} + {hc.offsets(n)}, {hc.join(terms)}{hc.mask_arg(n, other=None)})")


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
    host=_host,
)
