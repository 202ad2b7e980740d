# Generated from tests/primitives/sub.yaml (spec hash 202a0ce890a2936f) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_sub' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileLoad


# tests/primitives/sub.yaml:11: kernel 'k'
@gemm_epilogue(ops={"res": TileLoad("res")})
def coda_k(acc, res):
    # tests/primitives/sub.yaml:14: - {load_tile: res}
    # tests/primitives/sub.yaml:15: - {sub: [acc, res], as: y}
    y = acc - res
    # tests/primitives/sub.yaml:16: - {store: y}
    return {"D": y}
