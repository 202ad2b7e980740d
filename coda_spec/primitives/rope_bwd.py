"""`rope_bwd`: RoPE backward: rotate pairs by -t (the forward rotation's transpose).

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair: a W/2 vector, or one head's ``inv_freq [head_dim/2]`` read repeated
(``{load_row: inv_freq, repeat: heads}``). ``cols: [0, "Q+KV"]`` rotates q and k heads only (v
passes through). ``pairs: half, head_dim: hd`` is Hugging Face's rotate-half layout (pairs i and
i + hd/2 of each head): the reference and the math language (``apply_rotary_pos_emb``) have it,
GEMM epilogues and host steps refuse it for now (permute the weights at load instead,
``coda_spec/nn/layout.py``).
"""

from coda_spec.primitives._pairs import rope_primitive

PRIMITIVE = rope_primitive(
    "rope_bwd",
    -1.0,
    summary="RoPE backward: rotate pairs by -t (the forward rotation's transpose).",
    example="- {rope_bwd: dy, pos: pos, freqs: inv_freq, as: dz}",
    sibling="rope",
)
