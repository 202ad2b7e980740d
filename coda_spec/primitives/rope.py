"""`rope`: RoPE on pairs: (a, b) -> (a cos t - b sin t, a sin t + b cos t), t = pos * freq.

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair: a W/2 vector, or one head's ``inv_freq [head_dim/2]`` read repeated
(``{load_row: inv_freq, repeat: heads}``). ``cols: [0, "Q+KV"]`` rotates q and k heads only (v
passes through). ``pairs: half, head_dim: hd`` is Hugging Face's rotate-half layout (pairs i and
i + hd/2 of each head, the math language's ``apply_rotary_pos_emb``); ``freqs`` is the same W/2
vector (pair j of head h reads frequency h * hd/2 + j). Host steps lower it for a power-of-two
head_dim (a chunk of whole heads, reshaped to [heads, 2, hd/2]: ``_pairs.half_host``); GEMM
epilogues lower it when a CTA tile holds whole heads and each epilogue subtile lies in half a
head (``_pairs.half_lower``: a ``HalfPartner`` operand gives ``rotate_half(x)`` from a register
stash the accumulator prepass fills, so x must be re-computable there: no statistic upstream).
"""

from coda_spec.primitives._pairs import rope_primitive

PRIMITIVE = rope_primitive(
    "rope",
    1.0,
    summary="RoPE on pairs: (a, b) -> (a cos t - b sin t, a sin t + b cos t), t = pos * freq.",
    example="- {rope: q, pos: pos, freqs: inv_freq, as: q_rot}",
    sibling="rope_bwd",
)
