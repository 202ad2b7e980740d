# Generated from tests/primitives/swiglu.yaml (spec hash a5ea822cbca08333) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_swiglu' for QuACK's sm90 GEMM."""

from quack.activation import swiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import unpack
from quack.epilogue.ops import TileStore

from coda_spec.lower.quack_ops import PairF8Store


# tests/primitives/swiglu.yaml:11: kernel 'k'
@gemm_epilogue(outputs=(TileStore("y", gated=True), PairF8Store("y8"),), mode="acc_pair")
def coda_k(acc):
    # tests/primitives/swiglu.yaml:14: - {swiglu: acc, as: y}
    acc_g, acc_u = unpack(acc)
    y = swiglu(acc_g, acc_u)
    # tests/primitives/swiglu.yaml:15: - {store: y}
    # tests/primitives/swiglu.yaml:16: - {store: y, to: y8, dtype: fp8_e4m3}
    return {"y": y, "y8": y}
