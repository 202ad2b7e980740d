# Generated from tests/primitives/swiglu.yaml (spec hash ad6543c7a4138fa4) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_swiglu' for QuACK's sm90 GEMM."""

from quack.activation import swiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import unpack
from quack.epilogue.ops import TileStore


# tests/primitives/swiglu.yaml:10: kernel 'k'
@gemm_epilogue(outputs=(TileStore("y", gated=True),), mode="acc_pair")
def coda_k(acc):
    # tests/primitives/swiglu.yaml:13: - {swiglu: acc, as: y}
    acc_g, acc_u = unpack(acc)
    y = swiglu(acc_g, acc_u)
    # tests/primitives/swiglu.yaml:14: - {store: y}
    return {"y": y}
