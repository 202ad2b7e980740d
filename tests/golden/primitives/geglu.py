# Generated from tests/primitives/geglu.yaml (spec hash f86264be7026f046) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_geglu' for QuACK's sm90 GEMM."""

from quack.activation import geglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import unpack
from quack.epilogue.ops import TileStore


# tests/primitives/geglu.yaml:10: kernel 'k'
@gemm_epilogue(outputs=(TileStore("y", gated=True),), mode="acc_pair")
def coda_k(acc):
    # tests/primitives/geglu.yaml:13: - {geglu: acc, as: y}
    acc_g, acc_u = unpack(acc)
    y = geglu(acc_g, acc_u)
    # tests/primitives/geglu.yaml:14: - {store: y}
    return {"y": y}
