# Generated from tests/primitives/mul.yaml (spec hash c928de413f71bc77) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_mul' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import RowVecLoad, TileLoad

from coda_spec.lower.kernel_lib import select


# tests/primitives/mul.yaml:12: kernel 'k'
@gemm_epilogue(ops={"u": TileLoad("u"), "columns": RowVecLoad("columns")})
def coda_k(acc, u, columns):
    # tests/primitives/mul.yaml:15: - {load_tile: u}
    # tests/primitives/mul.yaml:16: - {mul: [acc, u], cols: ["F/4", "3*F/4"], as: y}
    y_all = acc * u
    y = select(columns < 96.0, select(columns >= 32.0, y_all, acc), acc)
    # tests/primitives/mul.yaml:17: - {store: y}
    return {"D": y}
