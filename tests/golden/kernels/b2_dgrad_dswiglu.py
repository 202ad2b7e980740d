# Generated from specs/b2_dgrad_dswiglu.yaml (spec hash 7907ff73660b1465) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'b2_dgrad_dswiglu' for QuACK's sm90 GEMM."""

from quack.activation import dswiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecReduce, TileStore


# specs/b2_dgrad_dswiglu.yaml:17: kernel 'dgrad_dswiglu'
@gemm_epilogue(
    outputs=(TileStore("h"),),
    reduces={"zdz_part": ColVecReduce("zdz_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_dswiglu(acc, c):
    # specs/b2_dgrad_dswiglu.yaml:20: - {load_tile: z}                        # 2F wide: packed (g, u) pairs, one per acc column
    z = c
    # specs/b2_dgrad_dswiglu.yaml:21: - {dswiglu: acc, z: z, as: [dz, h]}     # dz packed like z (M x 2F); h = silu(g) * u (M x F)
    z_g, z_u = unpack(z)
    dz_g, dz_u, h = dswiglu(z_g, z_u, acc)
    dz = pack(dz_g, dz_u)
    # specs/b2_dgrad_dswiglu.yaml:22: - {store: dz}
    # specs/b2_dgrad_dswiglu.yaml:23: - {store: h}                            # A operand of the weight gradient dW_down = dY^T h
    # specs/b2_dgrad_dswiglu.yaml:24: - {reduce_row: dot, of: [z, dz], as: zdz_part}   # per N-tile partials of sum_k z_k dz_k
    # zdz_part: sum over columns of z * dz -> (M, cdiv(11008, tile_N)) partials
    return {"D": dz, "h": h, "zdz_part": z_g * dz_g + z_u * dz_u}
