# Generated from tests/primitives/philox.yaml (spec hash bd00c515d541506b) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_philox' for QuACK's sm90 GEMM."""

from cutlass import Int64
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, RowVecLoad, Scalar

from coda_spec.lower.kernel_lib import philox_uniform


# tests/primitives/philox.yaml:12: kernel 'k'
@gemm_epilogue(
    ops={
        "seed": Scalar("seed", dtype=Int64),
        "offset": Scalar("offset", dtype=Int64),
        "rows": ColVecLoad("rows"),
        "columns": RowVecLoad("columns"),
    },
)
def coda_k(acc, seed, offset, rows, columns):
    # tests/primitives/philox.yaml:15: - {philox: acc, seed: seed, offset: offset, as: u}
    u = philox_uniform(seed, offset, rows, columns, 128)
    # tests/primitives/philox.yaml:16: - {mul: [acc, u], as: y}
    y = acc * u
    # tests/primitives/philox.yaml:17: - {store: y}
    return {"D": y}
