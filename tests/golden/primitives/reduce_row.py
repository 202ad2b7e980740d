# Generated from tests/primitives/reduce_row.yaml (spec hash a21669b22b703894) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_reduce_row' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecReduce


# tests/primitives/reduce_row.yaml:10: kernel 'k'
@gemm_epilogue(reduces={"ss": ColVecReduce("ss", scaled=True)})
def coda_k(acc):
    # tests/primitives/reduce_row.yaml:13: - {reduce_row: sumsq, of: acc, as: ss}
    # ss: sum over columns of acc * acc -> (M, cdiv(128, tile_N)) partials
    return {"ss": (acc, acc)}
