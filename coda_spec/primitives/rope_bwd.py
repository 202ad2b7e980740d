"""`rope_bwd`: RoPE backward: rotate pairs by -t (the forward rotation's transpose).

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair (``load_row`` of a W/2 vector; repeat it per head, and use 0 for columns that
must not rotate, such as V in a fused QKV projection).
"""

from coda_spec.primitives._pairs import rope_primitive

PRIMITIVE = rope_primitive(
    "rope_bwd",
    -1.0,
    summary="RoPE backward: rotate pairs by -t (the forward rotation's transpose).",
    example="- {rope_bwd: dy, pos: pos, freqs: inv_freq, as: dz}",
    sibling="rope",
)
