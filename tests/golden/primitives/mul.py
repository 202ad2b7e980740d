# Generated from tests/primitives/mul.yaml (spec hash 626057f6d3791e64) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_mul' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileLoad


# tests/primitives/mul.yaml:12: kernel 'k'
@gemm_epilogue(ops={"u": TileLoad("u")})
def coda_k(acc, u):
    # tests/primitives/mul.yaml:15: - {load_tile: u}
    # tests/primitives/mul.yaml:16: - {mul: [acc, u], as: y}
    y = acc * u
    # tests/primitives/mul.yaml:17: - {store: y}
    return {"D": y}
