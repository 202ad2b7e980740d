"""`rope`: RoPE on pairs: (a, b) -> (a cos t - b sin t, a sin t + b cos t), t = pos * freq.

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair (``load_row`` of a W/2 vector; repeat it per head, and use 0 for columns that
must not rotate, such as V in a fused QKV projection).
"""

from coda_spec.primitives._pairs import rope_infer, rotate
from coda_spec.primitives.base import PAIR, VALUE_REF, Primitive, item_schema

PRIMITIVE = Primitive(
    name="rope",
    family=PAIR,
    summary="RoPE on pairs: (a, b) -> (a cos t - b sin t, a sin t + b cos t), t = pos * freq.",
    example="- {rope: q, pos: pos, freqs: inv_freq, as: q_rot}",
    schema=item_schema(
        "rope", VALUE_REF, {"pos": VALUE_REF, "freqs": VALUE_REF}, required=("pos", "freqs")
    ),
    operands=("rope", "pos", "freqs"),
    infer=rope_infer("rope"),
    reference=lambda rt, op, ins, tensors: (
        rotate(rt, ins["rope"], ins["pos"], ins["freqs"], 1.0),
    ),
    mutants=lambda op: (op.with_prim("rope_bwd"),),
)
