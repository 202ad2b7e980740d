# Generated from tests/primitives/dropout.yaml (spec hash c086141ecbd0bf76) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_dropout' for QuACK's sm90 GEMM."""

from cutlass import Int64
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, RowVecLoad, Scalar

from coda_spec.lower.kernel_lib import philox_uniform, select


# tests/primitives/dropout.yaml:12: kernel 'k'
@gemm_epilogue(
    ops={
        "seed": Scalar("seed", dtype=Int64),
        "offset": Scalar("offset", dtype=Int64),
        "rows": ColVecLoad("rows"),
        "columns": RowVecLoad("columns"),
    },
)
def coda_k(acc, seed, offset, rows, columns):
    # tests/primitives/dropout.yaml:15: - {philox: acc, seed: seed, offset: offset, as: u}
    u = philox_uniform(seed, offset, rows, columns, 128)
    # tests/primitives/dropout.yaml:16: - {dropout: [acc, u], p: 0.25, as: y}
    y = select(u >= 0.25, acc * 1.3333333333333333, 0.0)
    # tests/primitives/dropout.yaml:17: - {store: y}
    return {"D": y}
