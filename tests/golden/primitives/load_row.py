# Generated from tests/primitives/load_row.yaml (spec hash 97630b6cc1fe310d) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_load_row' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import RowVecLoad


# tests/primitives/load_row.yaml:11: kernel 'k'
@gemm_epilogue(ops={"gamma": RowVecLoad("gamma")})
def coda_k(acc, gamma):
    # tests/primitives/load_row.yaml:14: - {load_row: gamma}
    # tests/primitives/load_row.yaml:15: - {add: [acc, gamma], as: y}
    y = acc + gamma
    # tests/primitives/load_row.yaml:16: - {store: y}
    return {"D": y}
