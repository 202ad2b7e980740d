# Generated from tests/primitives/gelu.yaml (spec hash 599100b796895e25) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_gelu' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.activation import gelu_tanh_approx
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileStore


# tests/primitives/gelu.yaml:10: kernel 'k'
@gemm_epilogue(outputs=(TileStore("ye"),))
def coda_k(acc):
    # tests/primitives/gelu.yaml:13: - {gelu: acc, as: y}
    y = gelu_tanh_approx(acc)
    # tests/primitives/gelu.yaml:14: - {gelu: acc, approximate: none, as: ye}
    ye_mul = acc * 0.5
    ye_mul_1 = acc * 0.7071067811865476
    ye_erf = cute.math.erf(ye_mul_1)
    ye_add = 1.0 + ye_erf
    ye = ye_mul * ye_add
    # tests/primitives/gelu.yaml:15: - {store: y}
    # tests/primitives/gelu.yaml:16: - {store: ye}
    return {"D": y, "ye": ye}
