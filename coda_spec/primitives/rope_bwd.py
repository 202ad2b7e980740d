"""`rope_bwd`: RoPE backward: rotate pairs by -t (the forward rotation's transpose).

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair (``load_row`` of a W/2 vector; repeat it per head, and use 0 for columns that
must not rotate, such as V in a fused QKV projection).
"""

from coda_spec.primitives._lowering import lanes
from coda_spec.primitives._pairs import rope_infer, rotate
from coda_spec.primitives.base import PAIR, VALUE_REF, Primitive, item_schema


def _lower(lc, op):
    x = lc.v(op.get("rope_bwd"))
    pos = lc.v(op.get("pos"))
    freqs = lc.v(op.get("freqs"))
    if freqs.form != "deferred":
        raise lc.error("freqs must be a load_row of a W/2 frequency vector")
    table = lc.param(
        freqs.tensor,
        "row",
        f'RowVecLoad("{lc.ident(freqs.tensor)}")',
        (1, lc.width),
        "fp32",
        "turns_table",
    )
    a, b = lanes(lc, x, "x")
    s, c = lc.tmp("sin"), lc.tmp("cos")
    lc.line(f"{s}, {c} = _rot._sincos_turns(*_rot._angle_turns({pos.expr}, {table}))")
    lc.let(op.results[0], f"pack({a} * {c} + {b} * {s}, {b} * {c} - {a} * {s})", "p")


PRIMITIVE = Primitive(
    name="rope_bwd",
    family=PAIR,
    summary="RoPE backward: rotate pairs by -t (the forward rotation's transpose).",
    example="- {rope_bwd: dy, pos: pos, freqs: inv_freq, as: dz}",
    schema=item_schema(
        "rope_bwd", VALUE_REF, {"pos": VALUE_REF, "freqs": VALUE_REF}, required=("pos", "freqs")
    ),
    operands=("rope_bwd", "pos", "freqs"),
    infer=rope_infer("rope_bwd"),
    reference=lambda rt, op, ins, tensors: (
        rotate(rt, ins["rope_bwd"], ins["pos"], ins["freqs"], -1.0),
    ),
    mutants=lambda op: (op.with_prim("rope"),),
    lower=_lower,
)
