# Generated from tests/primitives/col_index.yaml (spec hash b8ebd219201f85c6) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_col_index' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import RowVecLoad


# tests/primitives/col_index.yaml:10: kernel 'k'
@gemm_epilogue(ops={"columns": RowVecLoad("columns")})
def coda_k(acc, columns):
    # tests/primitives/col_index.yaml:13: - {col_index: acc, as: j}
    j = columns
    # tests/primitives/col_index.yaml:14: - {mul: [acc, j], as: y}
    y = acc * j
    # tests/primitives/col_index.yaml:15: - {store: y}
    return {"D": y}
