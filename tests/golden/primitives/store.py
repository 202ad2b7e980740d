# Generated from tests/primitives/store.yaml (spec hash aec5747ada21cb38) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_store' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import TileStore


# tests/primitives/store.yaml:14: kernel 'k'
@gemm_epilogue(outputs=(TileStore("y"), TileStore("t"),))
def coda_k(acc):
    # tests/primitives/store.yaml:17: - {store: acc, to: ysum, add_to: base}
    # tests/primitives/store.yaml:18: - {store: acc, to: y, dtype: bf16}
    # tests/primitives/store.yaml:19: - {store: acc, to: t, dtype: bf16}
    return {"D": acc, "y": acc, "t": acc}
