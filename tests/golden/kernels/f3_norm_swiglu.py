# Generated from specs/f3_norm_swiglu.yaml (spec hash fa18c651b9cc68ed) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f3_norm_swiglu' for QuACK's sm90 GEMM."""

from quack.activation import swiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import unpack
from quack.epilogue.ops import ColVecLoad, TileStore


# specs/f3_norm_swiglu.yaml:21: kernel 'gate_up_swiglu'
@gemm_epilogue(ops={"r": ColVecLoad("r")}, outputs=(TileStore("out", gated=True),), mode="acc_pair")
def coda_gate_up_swiglu(acc, r):
    # specs/f3_norm_swiglu.yaml:24: - {load_col: r}
    # specs/f3_norm_swiglu.yaml:25: - {mul: [acc, r], as: z}           # deferred norm: z = rms_norm(h) @ w_gu^T
    z = acc * r
    # specs/f3_norm_swiglu.yaml:26: - {store: z}                       # saved pre-activation (M x 2F)
    # specs/f3_norm_swiglu.yaml:27: - {swiglu: z, as: out}             # silu(z[:, 0::2]) * z[:, 1::2]  (M x F)
    z_g, z_u = unpack(z)
    out = swiglu(z_g, z_u)
    # specs/f3_norm_swiglu.yaml:28: - {store: out}
    return {"D": z, "out": out}
