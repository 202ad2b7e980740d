# Generated from specs/f1_residual_rmsnorm.yaml (spec hash 88f19f03a3ca1ec3) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f1_residual_rmsnorm' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecReduce, RowVecLoad, TileLoad, TileStore


# specs/f1_residual_rmsnorm.yaml:19: kernel 'out_proj_residual'
@gemm_epilogue(
    ops={"x": TileLoad("x"), "gamma": RowVecLoad("gamma")},
    outputs=(TileStore("h"),),
    reduces={"ss": ColVecReduce("ss", scaled=True)},
)
def coda_out_proj_residual(acc, x, gamma):
    # specs/f1_residual_rmsnorm.yaml:22: - {load_tile: x}
    # specs/f1_residual_rmsnorm.yaml:23: - {add: [acc, x], as: x1}             # new residual stream
    x1 = acc + x
    # specs/f1_residual_rmsnorm.yaml:24: - {load_row: gamma}
    # specs/f1_residual_rmsnorm.yaml:25: - {mul: [x1, gamma], as: h}           # norm weight now, norm scale r deferred
    h = x1 * gamma
    # specs/f1_residual_rmsnorm.yaml:26: - {reduce_row: sumsq, of: x1, as: ss} # one fp32 partial per row per N-tile
    # ss: sum over columns of x1 * x1 -> (M, cdiv(4096, tile_N)) partials
    # specs/f1_residual_rmsnorm.yaml:27: - {store: x1}
    # specs/f1_residual_rmsnorm.yaml:28: - {store: h}
    return {"ss": (x1, x1), "D": x1, "h": h}
