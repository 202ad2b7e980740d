"""`prepass`: a per-row (or per-row, per-group) statistic computed in a first pass over the
accumulator tile and usable by later items of the SAME epilogue (family 5, stateful).

This is how a per-head RMSNorm (QK-norm) runs inside the QKV GEMM: the prepass sums squares per
(row, head), the epilogue turns them into rstd and scales the tile before RoPE. The statistic must
be complete within one CTA tile, so ``group`` (default: the whole row) must divide tile_N; that
config rule is checked by ``supports()`` at build time. The result is a ``group`` value: one number
per (row, group), broadcast over the group's columns.

``logsumexp`` is the row's (or group's) ``log(sum(exp(x)))``, folded in one pass as QuACK folds
a max (``GroupStat``'s ``"lse"`` combine): ``exp(x - lse)`` is then a softmax in the same
epilogue, which ``softmax_row`` spells in one item. A whole-row statistic needs GEMM N to divide
tile_N, which is what QuACK's prepass geometry asks.
"""

from coda_spec.errors import ItemError
from coda_spec.primitives._reduce import (
    SIBLING,
    group_stat,
    grouped,
    static_group,
    statistic_inputs,
)
from coda_spec.primitives.base import (
    DIM_REF,
    STATEFUL,
    VALUE_REF,
    Primitive,
    VType,
    item_schema,
    need_tile,
)

OPS = ("sum", "sumsq", "mean", "meansq", "max", "absmax", "logsumexp")


def _infer(tc, op, ins, tensors):
    tile = need_tile(ins["of"], "prepass", "of")
    g = tile.width if op.get("group") is None else static_group(tc, op, "prepass")
    if isinstance(tile.width, int) and isinstance(g, int) and tile.width % g:
        raise ItemError(
            f"prepass: width {tile.width} is not a multiple of group {g}",
            "group",
            "per-head statistics need N % head_dim == 0",
        )
    return (VType("group", tile.width, g),)


def _reference(rt, op, ins, tensors):
    x = ins["of"]
    g = rt.fold(op.get("group", x.shape[1]))
    stat = grouped(rt, op.get("prepass"), x, g)
    return (stat.repeat_interleave(g, dim=1),)


def _lower(lc, op):
    """QuACK's accumulator prepass with coda's ``GroupStat`` (``coda_spec.lower.quack_ops``): the
    prepass fn returns the statistic's per-element input (``x``, ``x * x`` or ``|x|``), re-computing
    ``of`` there from ``acc`` and loads when it is not ``acc`` itself; QuACK folds it per (row,
    group) deterministically and hands the finalized statistic (a mean divides by ``group``) to
    the epilogue fn as an operand. In ``acc_pair`` mode that operand is a ``Pair`` whose lanes are
    equal when ``group`` is even (a column pair never straddles a group), so later math uses lane
    ``a`` only."""
    name = op.results[0]
    param, _, g = group_stat(lc, op, op.get("prepass"), lc.ident(name), name)
    if lc.mode == "acc_pair" and g % 2 == 0:
        lc.note(f"({param} arrives as a Pair of equal lanes: a column pair lies in one group)")
        lc.bind(name, f"{param}.a", "s")
    else:
        lc.bind(name, param, "p" if lc.mode == "acc_pair" else "s")


def _supports(config, sizes, op):
    group = op.get("group")
    if group is not None and config.tile_n % sizes.fold(group):
        return f"prepass group {group} does not divide tile_N {config.tile_n}"
    if group is None and config.tile_n < sizes.width:
        return f"a whole-row prepass needs the row in one tile (tile_N >= {sizes.width})"
    return None


PRIMITIVE = Primitive(
    name="prepass",
    family=STATEFUL,
    summary="Per-row (or per-`group`) statistic of a tile, usable later in the same epilogue: "
    "sum, sumsq, mean, meansq, max, absmax, logsumexp.",
    example="- {prepass: meansq, of: acc, group: head_dim, as: ms}",
    schema=item_schema(
        "prepass", {"enum": list(OPS)}, {"of": VALUE_REF, "group": DIM_REF}, required=("of",)
    ),
    operands=("of",),
    infer=_infer,
    reference=_reference,
    mutants=lambda op: (op.with_arg("prepass", SIBLING[op.get("prepass")]),),
    supports=_supports,
    bakes=lambda op, where: () if op.get("group") is None else (op.get("group"),),
    lower=_lower,
    prepass_of=statistic_inputs,
    no_host="a per-row statistic used by later items of the same body needs the whole row before "
    "the first chunk is processed: a second pass over the row",
)
