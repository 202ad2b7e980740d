# Generated from specs/f6_swiglu.yaml (spec hash 6828b389cff26b0a) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f6_swiglu' for QuACK's sm90 GEMM."""

from quack.activation import swiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import unpack
from quack.epilogue.ops import TileStore


# specs/f6_swiglu.yaml:15: kernel 'gate_up_swiglu'
@gemm_epilogue(outputs=(TileStore("out", gated=True),), mode="acc_pair")
def coda_gate_up_swiglu(acc):
    # specs/f6_swiglu.yaml:18: - {store: acc, to: z}              # saved pre-activation (M x 2F)
    # specs/f6_swiglu.yaml:19: - {swiglu: acc, as: out}           # silu(acc[:, 0::2]) * acc[:, 1::2]  (M x F)
    acc_g, acc_u = unpack(acc)
    out = swiglu(acc_g, acc_u)
    # specs/f6_swiglu.yaml:20: - {store: out}
    return {"D": acc, "out": out}
