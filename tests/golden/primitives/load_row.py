# Generated from tests/primitives/load_row.yaml (spec hash 4c83eab074477f43) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_load_row' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import RowVecLoad


# tests/primitives/load_row.yaml:12: kernel 'k'
@gemm_epilogue(ops={"gamma": RowVecLoad("gamma"), "beta": RowVecLoad("beta")})
def coda_k(acc, gamma, beta):
    # tests/primitives/load_row.yaml:15: - {load_row: gamma}
    # tests/primitives/load_row.yaml:16: - {load_row: beta, repeat: 4, as: b}
    # tests/primitives/load_row.yaml:17: - {add: [acc, gamma], as: y0}
    y0 = acc + gamma
    # tests/primitives/load_row.yaml:18: - {add: [y0, b], as: y}
    y = y0 + beta
    # tests/primitives/load_row.yaml:19: - {store: y}
    return {"D": y}
