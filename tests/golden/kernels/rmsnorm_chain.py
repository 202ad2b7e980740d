# Generated from specs/rmsnorm_chain.yaml (spec hash 0a8c768eda6fdd7e) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'rmsnorm_chain' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, ColVecReduce, RowVecLoad, TileLoad, TileStore


# specs/rmsnorm_chain.yaml:14: kernel 'out_proj'
@gemm_epilogue(
    ops={"x": TileLoad("x"), "gamma": RowVecLoad("gamma")},
    outputs=(TileStore("h"),),
    reduces={"ss": ColVecReduce("ss", scaled=True)},
)
def coda_out_proj(acc, x, gamma):
    # specs/rmsnorm_chain.yaml:17: - {load_tile: x}
    # specs/rmsnorm_chain.yaml:18: - {add: [acc, x], as: x1}
    x1 = acc + x
    # specs/rmsnorm_chain.yaml:19: - {load_row: gamma}
    # specs/rmsnorm_chain.yaml:20: - {mul: [x1, gamma], as: h}
    h = x1 * gamma
    # specs/rmsnorm_chain.yaml:21: - {reduce_row: sumsq, of: x1, as: ss}  # per-tile partials of sum(x1^2)
    # ss: sum over columns of x1 * x1 -> (M, cdiv(4096, tile_N)) partials
    # specs/rmsnorm_chain.yaml:22: - {store: x1}
    # specs/rmsnorm_chain.yaml:23: - {store: h}
    return {"ss": (x1, x1), "D": x1, "h": h}


# specs/rmsnorm_chain.yaml:25: kernel 'up_proj'
@gemm_epilogue(ops={"r": ColVecLoad("r")})
def coda_up_proj(acc, r):
    # specs/rmsnorm_chain.yaml:28: - {load_col: r}
    # specs/rmsnorm_chain.yaml:29: - {mul: [acc, r], as: out}
    out = acc * r
    # specs/rmsnorm_chain.yaml:30: - {store: out}
    return {"D": out}
