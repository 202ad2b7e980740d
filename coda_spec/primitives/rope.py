"""`rope`: RoPE on pairs: (a, b) -> (a cos t - b sin t, a sin t + b cos t), t = pos * freq.

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair (``load_row`` of a W/2 vector; repeat it per head, and use 0 for columns that
must not rotate, such as V in a fused QKV projection).
"""

from coda_spec.primitives._pairs import rope_primitive

PRIMITIVE = rope_primitive(
    "rope",
    1.0,
    summary="RoPE on pairs: (a, b) -> (a cos t - b sin t, a sin t + b cos t), t = pos * freq.",
    example="- {rope: q, pos: pos, freqs: inv_freq, as: q_rot}",
    sibling="rope_bwd",
)
