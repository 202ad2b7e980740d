# Generated from tests/primitives/square.yaml (spec hash 33c939d7ac38668d) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_square' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/square.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/square.yaml:13: - {square: acc, as: y}
    y = acc * acc
    # tests/primitives/square.yaml:14: - {store: y}
    return {"D": y}
