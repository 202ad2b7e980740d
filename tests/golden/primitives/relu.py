# Generated from tests/primitives/relu.yaml (spec hash 8a69eda73c0d5ea2) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_relu' for QuACK's sm90 GEMM."""

from quack.activation import relu
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/relu.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/relu.yaml:13: - {relu: acc, as: y}
    y = relu(acc)
    # tests/primitives/relu.yaml:14: - {store: y}
    return {"D": y}
