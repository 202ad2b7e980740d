# Generated from tests/primitives/gather_col.yaml (spec hash ea65039156565f9d) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_gather_col' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, ColVecSelect

# tests/primitives/gather_col.yaml:11: kernel 'k'
_idx_target = ColVecLoad("target")


@gemm_epilogue(outs={"y": ColVecSelect("y", idx_op=_idx_target)}, extra_ops=(_idx_target,))
def coda_k(acc):
    # tests/primitives/gather_col.yaml:14: - {gather_col: acc, index: target, as: y}
    # tests/primitives/gather_col.yaml:15: - {store: y}
    # y: per row m, acc at column target[m] -> (M,) fp32
    return {"y": acc}
