# Generated from tests/primitives/load_col.yaml (spec hash d77cb64bd5140e53) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_load_col' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad


# tests/primitives/load_col.yaml:11: kernel 'k'
@gemm_epilogue(ops={"r": ColVecLoad("r")})
def coda_k(acc, r):
    # tests/primitives/load_col.yaml:14: - {load_col: r}
    # tests/primitives/load_col.yaml:15: - {mul: [acc, r], as: y}
    y = acc * r
    # tests/primitives/load_col.yaml:16: - {store: y}
    return {"D": y}
