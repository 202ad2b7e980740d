# Generated from tests/primitives/exp.yaml (spec hash fa64181770990157) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_exp' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/exp.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/exp.yaml:13: - {exp: acc, as: y}
    y = cute.math.exp(acc)
    # tests/primitives/exp.yaml:14: - {store: y}
    return {"D": y}
