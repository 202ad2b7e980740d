# Generated from tests/primitives/rope.yaml (spec hash a43fa1e7b0e3f55d) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_rope' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.kernel_lib import select
from coda_spec.lower.quack_private import angle_turns, sincos_turns


# tests/primitives/rope.yaml:13: kernel 'k'
@gemm_epilogue(
    ops={
        "pos": ColVecLoad("pos"),
        "inv_freq": RowVecLoad("inv_freq"),
        "columns": RowVecLoad("columns"),
    },
    mode="acc_pair",
)
def coda_k(acc, pos, inv_freq, columns):
    # tests/primitives/rope.yaml:16: - {load_col: pos}
    # tests/primitives/rope.yaml:17: - {load_row: inv_freq, repeat: "F/head_dim"}
    # tests/primitives/rope.yaml:18: - {rope: acc, pos: pos, freqs: inv_freq, cols: [0, "F-head_dim"], as: y}
    acc_a, acc_b = unpack(acc)
    y_all_sin, y_all_cos = sincos_turns(*angle_turns(pos, inv_freq))
    y_all = pack(acc_a * y_all_cos - acc_b * y_all_sin, acc_a * y_all_sin + acc_b * y_all_cos)
    col_a, col_b = unpack(columns)
    y_all_a, y_all_b = unpack(y_all)
    y_a = select(col_a < 120.0, y_all_a, acc_a)
    y_b = select(col_a < 120.0, y_all_b, acc_b)
    y = pack(y_a, y_b)
    # tests/primitives/rope.yaml:19: - {store: y}
    return {"D": y}
