"""`rope_bwd`: RoPE backward: rotate pairs by -t (the forward rotation's transpose).

``pos`` is a per-row value (``load_col`` of positions) and ``freqs`` a per-column value with one
frequency per pair: a W/2 vector, or one head's ``inv_freq [head_dim/2]`` read repeated
(``{load_row: inv_freq, repeat: heads}``). ``cols: [0, "Q+KV"]`` rotates q and k heads only (v
passes through). ``pairs: half, head_dim: hd`` is Hugging Face's rotate-half layout (pairs i and
i + hd/2 of each head, the math language's ``apply_rotary_pos_emb``); ``freqs`` is the same W/2
vector (pair j of head h reads frequency h * hd/2 + j). Host steps lower it for a power-of-two
head_dim (a chunk of whole heads, reshaped to [heads, 2, hd/2]: ``_pairs.half_host``). GEMM
epilogues refuse it: QuACK 0.6.5's epilogue fn sees one element or one adjacent column pair at a
time, never columns hd/2 apart (rotate in a host step, or permute the q/k weights at load to
adjacent pairs, ``coda_spec/nn/layout.py``).
"""

from coda_spec.primitives._pairs import rope_primitive

PRIMITIVE = rope_primitive(
    "rope_bwd",
    -1.0,
    summary="RoPE backward: rotate pairs by -t (the forward rotation's transpose).",
    example="- {rope_bwd: dy, pos: pos, freqs: inv_freq, as: dz}",
    sibling="rope",
)
