# Generated from tests/primitives/onehot.yaml (spec hash 1277a94da1558cec) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_onehot' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.kernel_lib import select


# tests/primitives/onehot.yaml:11: kernel 'k'
@gemm_epilogue(ops={"columns": RowVecLoad("columns"), "target": ColVecLoad("target")})
def coda_k(acc, columns, target):
    # tests/primitives/onehot.yaml:14: - {onehot: target, as: oh}
    oh = select(columns == target, 1.0, 0.0)
    # tests/primitives/onehot.yaml:15: - {sub: [acc, oh], as: y}
    y = acc - oh
    # tests/primitives/onehot.yaml:16: - {store: y}
    return {"D": y}
