# Generated from tests/primitives/gelu.yaml (spec hash d36b56d037214079) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_gelu' for QuACK's sm90 GEMM."""

from quack.activation import gelu_tanh_approx
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/gelu.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/gelu.yaml:13: - {gelu: acc, as: y}
    y = gelu_tanh_approx(acc)
    # tests/primitives/gelu.yaml:14: - {store: y}
    return {"D": y}
