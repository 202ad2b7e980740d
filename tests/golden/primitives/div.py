# Generated from tests/primitives/div.yaml (spec hash 7437988c7ae2bbdc) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_div' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad


# tests/primitives/div.yaml:11: kernel 'k'
@gemm_epilogue(ops={"s": ColVecLoad("s")})
def coda_k(acc, s):
    # tests/primitives/div.yaml:14: - {load_col: s}
    # tests/primitives/div.yaml:15: - {div: [acc, s], as: y}
    y = acc / s
    # tests/primitives/div.yaml:16: - {store: y}
    return {"D": y}
