# Generated from tests/primitives/sqrt.yaml (spec hash 737626ee5a9febce) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_sqrt' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/sqrt.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/sqrt.yaml:13: - {sqrt: acc, as: y}
    y = cute.math.sqrt(acc)
    # tests/primitives/sqrt.yaml:14: - {store: y}
    return {"D": y}
