# Generated from tests/primitives/erf.yaml (spec hash 1b302c6fccdbbdcb) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_erf' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/erf.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/erf.yaml:13: - {erf: acc, as: y}
    y = cute.math.erf(acc)
    # tests/primitives/erf.yaml:14: - {store: y}
    return {"D": y}
