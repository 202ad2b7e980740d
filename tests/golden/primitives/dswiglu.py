# Generated from tests/primitives/dswiglu.yaml (spec hash bce65726b221d94c) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_dswiglu' for QuACK's sm90 GEMM."""

from quack.activation import dswiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import TileStore


# tests/primitives/dswiglu.yaml:11: kernel 'k'
@gemm_epilogue(outputs=(TileStore("y"),), mode="packed_cd_b16x2")
def coda_k(acc, c):
    # tests/primitives/dswiglu.yaml:14: - {load_tile: z}
    z = c
    # tests/primitives/dswiglu.yaml:15: - {dswiglu: acc, z: z, as: [dz, y]}
    z_g, z_u = unpack(z)
    dz_g, dz_u, y = dswiglu(z_g, z_u, acc)
    dz = pack(dz_g, dz_u)
    # tests/primitives/dswiglu.yaml:16: - {store: dz}
    # tests/primitives/dswiglu.yaml:17: - {store: y}
    return {"D": dz, "y": y}
