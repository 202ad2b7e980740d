# Generated from tests/primitives/dgeglu.yaml (spec hash 5dc8769828eef98b) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_dgeglu' for QuACK's sm90 GEMM."""

from quack.activation import dgeglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import TileStore


# tests/primitives/dgeglu.yaml:11: kernel 'k'
@gemm_epilogue(outputs=(TileStore("y"),), mode="packed_cd_b16x2")
def coda_k(acc, c):
    # tests/primitives/dgeglu.yaml:14: - {load_tile: z}
    z = c
    # tests/primitives/dgeglu.yaml:15: - {dgeglu: acc, z: z, as: [dz, y]}
    z_g, z_u = unpack(z)
    dz_g, dz_u, y = dgeglu(z_g, z_u, acc)
    dz = pack(dz_g, dz_u)
    # tests/primitives/dgeglu.yaml:16: - {store: dz}
    # tests/primitives/dgeglu.yaml:17: - {store: y}
    return {"D": dz, "y": y}
