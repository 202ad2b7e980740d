# Generated from tests/primitives/leaky_relu.yaml (spec hash 4ced9233b20cb12f) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_leaky_relu' for QuACK's sm90 GEMM."""

from quack.activation import relu
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/leaky_relu.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/leaky_relu.yaml:13: - {leaky_relu: acc, slope: 0.1, as: y}
    y_mul = acc * 0.1
    y_relu = relu(acc)
    y_mul_1 = y_relu * 0.9
    y = y_mul + y_mul_1
    # tests/primitives/leaky_relu.yaml:14: - {store: y}
    return {"D": y}
