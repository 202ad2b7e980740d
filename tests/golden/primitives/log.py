# Generated from tests/primitives/log.yaml (spec hash 487ad5638784a63c) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_log' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/log.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/log.yaml:13: - {log: acc, as: y}
    y = cute.math.log(acc)
    # tests/primitives/log.yaml:14: - {store: y}
    return {"D": y}
