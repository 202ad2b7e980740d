"""`softcap`: logit soft-capping, cap * tanh(x / cap) (Gemma 2).

Squashes a value smoothly into (-cap, cap): close to the identity while |x| is well below `cap`,
saturating above it. Gemma 2 caps its final logits at 30 (and attention scores at 50) so that
no logit runs away; fused here into the LM head's epilogue, the capped logits are the only ones
ever written. `cap` is an immediate (compiled into the kernel) and must be positive.
"""

from coda_spec.primitives._composite import composite

PRIMITIVE = composite(
    "softcap",
    params={"cap": {"type": "number", "exclusiveMinimum": 0}},
    body="tanh(x / cap) * cap",
    summary="Soft-cap a value into (-cap, cap): cap * tanh(x / cap), as on Gemma 2's logits.",
    example="- {softcap: acc, cap: 30.0, as: logits}",
    siblings=("tanh",),
)
