# Generated from tests/primitives/dgelu.yaml (spec hash 8ad2b7261adb3ac7) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_dgelu' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.activation import tanh
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileLoad, TileStore


# tests/primitives/dgelu.yaml:11: kernel 'k'
@gemm_epilogue(ops={"z": TileLoad("z")}, outputs=(TileStore("ye"),))
def coda_k(acc, z):
    # tests/primitives/dgelu.yaml:14: - {load_tile: z}
    # tests/primitives/dgelu.yaml:15: - {dgelu: [acc, z], as: y}
    y_mul = z * z
    y_mul_1 = 0.044715 * y_mul
    y_mul_2 = y_mul_1 * z
    y_add = z + y_mul_2
    y_mul_3 = 0.7978845608028654 * y_add
    y_tanh = tanh(y_mul_3)
    y_add_1 = 1.0 + y_tanh
    y_mul_4 = 0.5 * y_add_1
    y_mul_5 = 0.3989422804014327 * z
    y_mul_6 = y_tanh * y_tanh
    y_sub = 1.0 - y_mul_6
    y_mul_7 = y_mul_5 * y_sub
    y_mul_8 = 0.134145 * y_mul
    y_add_2 = 1.0 + y_mul_8
    y_mul_9 = y_mul_7 * y_add_2
    y_add_3 = y_mul_4 + y_mul_9
    y = acc * y_add_3
    # tests/primitives/dgelu.yaml:16: - {dgelu: [acc, z], approximate: none, as: ye}
    ye_mul = z * 0.7071067811865476
    ye_erf = cute.math.erf(ye_mul)
    ye_add = 1.0 + ye_erf
    ye_mul_1 = 0.5 * ye_add
    ye_mul_2 = -0.5 * z
    ye_mul_3 = ye_mul_2 * z
    ye_exp = cute.math.exp(ye_mul_3)
    ye_mul_4 = 0.3989422804014327 * ye_exp
    ye_mul_5 = z * ye_mul_4
    ye_add_1 = ye_mul_1 + ye_mul_5
    ye = acc * ye_add_1
    # tests/primitives/dgelu.yaml:17: - {store: y}
    # tests/primitives/dgelu.yaml:18: - {store: ye}
    return {"D": y, "ye": ye}
