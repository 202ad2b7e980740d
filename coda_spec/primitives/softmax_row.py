"""`softmax_row`: a softmax over each row of a tile whose rows fit one CTA tile (a MoE router).

``p = exp(x - lse)`` with ``lse = log(sum_j exp(x_j))`` over the row's N columns, in fp32: the
softmax torch computes (``torch.softmax(x, -1)``), as a tile the rest of the epilogue may read
and store (bf16 router probabilities from ``x @ W_router.T`` with N = 128 experts, say).

The row's statistic is folded in the kernel's accumulator prepass, as ``prepass: logsumexp``
folds it (QuACK's deterministic per-(row, group) fold, with GroupStat's log-add-exp combine:
one pass, no max pass first, no partial buffer and no finalize step), over ``x`` re-computed
in the prepass fn from ``acc`` and loads. So the whole row must lie in one CTA tile: GEMM N
must be static and divide tile_N (``supports``: a build at a config whose tile_N is not a
multiple of N is refused, located, naming tile_N and one that fits; ``coda check`` asks it at
the config a flagless build uses). A tile's columns past N (N < tile_N) form groups of their
own and never enter a row's sum. ``x`` must be computable in the prepass (``acc``, loads and
elementwise items: a ``scale`` by a temperature, a bias, a softcap), and the kernel plain: a
pair kernel's epilogue sees column pairs, and a packed one has no prepass.

A row wider than any tile (N > 512, or no tile_N is a multiple of N) is a two-pass softmax:
store the logits, ``reduce_row: logsumexp`` them and ``finalize`` (cross-entropy's path). There
is no host-step lowering (a host step streams a row in chunks; a softmax needs the row's sum
before its first output) and no derived backward (``coda grad`` refuses it, located: its
backward ``y * (dy - rowsum(dy * y))`` needs a row dot of the incoming gradient before the same
epilogue can use it).
"""

from coda_spec.errors import ItemError
from coda_spec.primitives._reduce import group_stat, whole_row_refusal
from coda_spec.primitives.base import STATEFUL, VALUE_REF, Primitive, VType, item_schema, need_tile


def _infer(tc, op, ins, tensors):
    tile = need_tile(ins["softmax_row"], "softmax_row", "softmax_row")
    if not isinstance(tile.width, int):
        raise ItemError(
            f"softmax_row: the row width {tile.width!r} is not a static size; the row is folded "
            "inside one CTA tile, whose width is compiled in",
            "softmax_row",
            "a softmax runs over a static dim: write the GEMM so that its rows (M) run over the "
            "dynamic dim and its columns (N) over the softmax's",
        )
    return (VType("tile", tile.width),)


def _reference(rt, op, ins, tensors):
    return (rt.torch.softmax(ins["softmax_row"], dim=1),)


def _lower(lc, op):
    """The row's log-sum-exp as a whole-row GroupStat (``"lse"`` combine) over ``x``, then
    ``exp(x - lse)`` per element."""
    name, x = op.results[0], op.get("softmax_row")
    lse, _, _ = group_stat(lc, op, "logsumexp", lc.fresh(f"{lc.ident(name)}_lse"), name, x)
    lc.let(name, f"{lc.use('cute.math.exp')}({lc.vs(x).expr} - {lse})", "s")


PLAIN_ONLY = (
    "softmax_row folds whole rows in a plain kernel's prepass; this kernel's epilogue sees "
    "adjacent column pairs"
)

PRIMITIVE = Primitive(
    name="softmax_row",
    family=STATEFUL,
    summary="Softmax over each row (exp(x - logsumexp(x)), fp32) when the row fits one tile: "
    "GEMM N static and dividing tile_N (a MoE router's experts).",
    example="- {softmax_row: logits, as: probs}",
    schema=item_schema("softmax_row", VALUE_REF),
    operands=("softmax_row",),
    infer=_infer,
    reference=_reference,
    supports=lambda config, sizes, op: whole_row_refusal(config, sizes, "softmax_row"),
    bakes_width=True,
    lower=_lower,
    prepass_of=lambda op: (op.get("softmax_row"),),
    no_mode={"acc_pair": PLAIN_ONLY, "packed_pair": PLAIN_ONLY},
    no_host="a softmax needs the row's sum before its first output, and a host step streams the "
    "row in chunks: store the logits and use reduce_row logsumexp with a finalize step",
)
