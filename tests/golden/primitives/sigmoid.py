# Generated from tests/primitives/sigmoid.yaml (spec hash 4455b3fd137f5084) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_sigmoid' for QuACK's sm90 GEMM."""

from quack.activation import sigmoid
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/sigmoid.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/sigmoid.yaml:13: - {sigmoid: acc, as: y}
    y = sigmoid(acc)
    # tests/primitives/sigmoid.yaml:14: - {store: y}
    return {"D": y}
