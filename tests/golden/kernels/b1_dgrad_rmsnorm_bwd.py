# Generated from specs/b1_dgrad_rmsnorm_bwd.yaml (spec hash 3bcffb8f34854f36) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'b1_dgrad_rmsnorm_bwd' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, RowVecLoad, RowVecReduce, TileLoad, TileStore


# specs/b1_dgrad_rmsnorm_bwd.yaml:29: kernel 'dgrad_rmsnorm_bwd'
@gemm_epilogue(
    ops={
        "x": TileLoad("x"),
        "r": ColVecLoad("r"),
        "zdz": ColVecLoad("zdz"),
        "gamma": RowVecLoad("gamma"),
    },
    outputs=(TileStore("v"),),
    reduces={"dgamma_part": RowVecReduce("dgamma_part", scaled=True)},
)
def coda_dgrad_rmsnorm_bwd(acc, x, r, zdz, gamma):
    # specs/b1_dgrad_rmsnorm_bwd.yaml:32: - {load_tile: x}
    # specs/b1_dgrad_rmsnorm_bwd.yaml:33: - {load_col: r}
    # specs/b1_dgrad_rmsnorm_bwd.yaml:34: - {load_col: zdz}
    # specs/b1_dgrad_rmsnorm_bwd.yaml:35: - {load_row: gamma}
    # specs/b1_dgrad_rmsnorm_bwd.yaml:36: - {mul: [x, r], as: u}                  # u = x * r, the normalized input (recomputed)
    u = x * r
    # specs/b1_dgrad_rmsnorm_bwd.yaml:37: - {mul: [acc, gamma], as: g_gamma}      # g * gamma
    g_gamma = acc * gamma
    # specs/b1_dgrad_rmsnorm_bwd.yaml:38: - {mul: [u, zdz], as: u_zdz}            # u * zdz
    u_zdz = u * zdz
    # specs/b1_dgrad_rmsnorm_bwd.yaml:39: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/b1_dgrad_rmsnorm_bwd.yaml:40: - {mul: [dxn, r], as: dx_local}         # r * (g*gamma - u*zdz): this norm's share of dx
    dx_local = dxn * r
    # specs/b1_dgrad_rmsnorm_bwd.yaml:41: - {store: dx_local, to: dx, add_to: dres}   # dx = dres + ..., a reduce-add into dres
    # specs/b1_dgrad_rmsnorm_bwd.yaml:42: - {mul: [u, gamma], as: v}              # v = u * gamma, A operand of dW_next = dz^T v
    v = u * gamma
    # specs/b1_dgrad_rmsnorm_bwd.yaml:43: - {store: v}
    # specs/b1_dgrad_rmsnorm_bwd.yaml:44: - {reduce_col: dot, of: [acc, u], as: dgamma_part}   # per M-tile partials of sum_m g*u
    # dgamma_part: sum over rows of acc * u -> (cdiv(M, tile_M), 4096) partials
    return {"D": dx_local, "v": v, "dgamma_part": (acc, u)}
