# Generated from tests/primitives/squared_relu.yaml (spec hash 00cebb66e51b7a02) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_squared_relu' for QuACK's sm90 GEMM."""

from quack.activation import relu_sq
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/squared_relu.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/squared_relu.yaml:13: - {squared_relu: acc, as: y}
    y = relu_sq(acc)
    # tests/primitives/squared_relu.yaml:14: - {store: y}
    return {"D": y}
