# Generated from tests/primitives/abs.yaml (spec hash cae297536366ffc1) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_abs' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/abs.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/abs.yaml:13: - {abs: acc, as: y}
    y = cute.math.abs(acc)
    # tests/primitives/abs.yaml:14: - {store: y}
    return {"D": y}
