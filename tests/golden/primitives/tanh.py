# Generated from tests/primitives/tanh.yaml (spec hash 98462aafb8c531cb) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_tanh' for QuACK's sm90 GEMM."""

from quack.activation import tanh
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/tanh.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/tanh.yaml:13: - {tanh: acc, as: y}
    y = tanh(acc)
    # tests/primitives/tanh.yaml:14: - {store: y}
    return {"D": y}
