# Generated from tests/primitives/scale.yaml (spec hash 39da7bfe338e5843) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_scale' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/scale.yaml:11: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/scale.yaml:14: - {scale: acc, by: "1/sqrt(D)", as: y}
    y = acc * 0.125
    # tests/primitives/scale.yaml:15: - {store: y}
    return {"D": y}
