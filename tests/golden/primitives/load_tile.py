# Generated from tests/primitives/load_tile.yaml (spec hash 55db1800c3df9a96) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_load_tile' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileLoad


# tests/primitives/load_tile.yaml:11: kernel 'k'
@gemm_epilogue(ops={"x": TileLoad("x")})
def coda_k(acc, x):
    # tests/primitives/load_tile.yaml:14: - {load_tile: x, as: res}
    res = x
    # tests/primitives/load_tile.yaml:15: - {add: [acc, res], as: y}
    y = acc + res
    # tests/primitives/load_tile.yaml:16: - {store: y}
    return {"D": y}
