# Generated from tests/primitives/reduce_col.yaml (spec hash 83f00f42b95b9af3) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_reduce_col' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import RowVecReduce, TileLoad


# tests/primitives/reduce_col.yaml:11: kernel 'k'
@gemm_epilogue(ops={"u": TileLoad("u")}, reduces={"part": RowVecReduce("part", scaled=True)})
def coda_k(acc, u):
    # tests/primitives/reduce_col.yaml:14: - {load_tile: u}
    # tests/primitives/reduce_col.yaml:15: - {reduce_col: dot, of: [acc, u], as: part}
    # part: sum over rows of acc * u -> (cdiv(M, tile_M), 128) partials
    return {"part": (acc, u)}
