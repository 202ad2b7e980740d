# Generated from tests/primitives/add.yaml (spec hash 56c50fdea287bcf1) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_add' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileLoad


# tests/primitives/add.yaml:12: kernel 'k'
@gemm_epilogue(ops={"res": TileLoad("res")})
def coda_k(acc, res):
    # tests/primitives/add.yaml:15: - {load_tile: res}
    # tests/primitives/add.yaml:16: - {add: [acc, res], as: y}
    y = acc + res
    # tests/primitives/add.yaml:17: - {store: y}
    return {"D": y}
