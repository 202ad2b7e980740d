"""`dswiglu`: SwiGLU backward: packed (dg, du) pairs and the recomputed silu(g) * u.

dg = dy * u * act'(g), du = dy * act(g). The saved z is read as packed 16-bit pairs (one 32-bit
lane per (g, u)), and dz is written the same way, so the kernel runs in packed-pair mode.
"""

from coda_spec.primitives._pairs import dgated_primitive

PRIMITIVE = dgated_primitive(
    "dswiglu",
    "silu",
    summary="SwiGLU backward: packed (dg, du) pairs and the recomputed silu(g) * u.",
    example="- {dswiglu: acc, z: z, as: [dz, out]}",
    sibling="dgeglu",
)
