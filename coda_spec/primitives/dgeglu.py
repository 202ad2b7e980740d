"""`dgeglu`: GeGLU backward: packed (dg, du) pairs and the recomputed gelu_tanh(g) * u.

dg = dy * u * act'(g), du = dy * act(g). The saved z is read as packed 16-bit pairs (one 32-bit
lane per (g, u)), and dz is written the same way, so the kernel runs in packed-pair mode. The
tanh GELU only, as `geglu` (its docstring says why there is no `approximate:` key).
"""

from coda_spec.primitives._pairs import dgated_primitive

PRIMITIVE = dgated_primitive(
    "dgeglu",
    "gelu",
    summary="GeGLU backward: packed (dg, du) pairs and the recomputed gelu_tanh(g) * u.",
    example="- {dgeglu: acc, z: z, as: [dz, out]}",
    sibling="dswiglu",
)
