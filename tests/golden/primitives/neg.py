# Generated from tests/primitives/neg.yaml (spec hash 6bf7d4f82a60fcaa) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_neg' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/neg.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/neg.yaml:13: - {neg: acc, as: y}
    y = -acc
    # tests/primitives/neg.yaml:14: - {store: y}
    return {"D": y}
