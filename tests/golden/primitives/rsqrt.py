# Generated from tests/primitives/rsqrt.yaml (spec hash 3011ef2421d23161) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_rsqrt' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/rsqrt.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/rsqrt.yaml:13: - {rsqrt: acc, as: y}
    y = cute.math.rsqrt(acc)
    # tests/primitives/rsqrt.yaml:14: - {store: y}
    return {"D": y}
