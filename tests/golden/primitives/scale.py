# Generated from tests/primitives/scale.yaml (spec hash 7383bd20698f3118) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_scale' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/scale.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/scale.yaml:13: - {scale: acc, by: 0.125, as: y}
    y = acc * 0.125
    # tests/primitives/scale.yaml:14: - {store: y}
    return {"D": y}
