# Generated from tests/primitives/softcap.yaml (spec hash 02bdc6d2612eabcc) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_softcap' for QuACK's sm90 GEMM."""

from quack.activation import tanh
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/softcap.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/softcap.yaml:13: - {softcap: acc, cap: 2.0, as: y}
    y_div = acc / 2.0
    y_tanh = tanh(y_div)
    y = y_tanh * 2.0
    # tests/primitives/softcap.yaml:14: - {store: y}
    return {"D": y}
