# Generated from tests/primitives/rope_bwd.yaml (spec hash 68c7990c7bc5e5fd) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_rope_bwd' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.quack_private import angle_turns, sincos_turns


# tests/primitives/rope_bwd.yaml:14: kernel 'k'
@gemm_epilogue(ops={"pos": ColVecLoad("pos"), "inv_freq": RowVecLoad("inv_freq")}, mode="acc_pair")
def coda_k(acc, pos, inv_freq):
    # tests/primitives/rope_bwd.yaml:17: - {load_col: pos}
    # tests/primitives/rope_bwd.yaml:18: - {load_row: inv_freq, repeat: "F/head_dim"}
    # tests/primitives/rope_bwd.yaml:19: - {rope_bwd: acc, pos: pos, freqs: inv_freq, as: y}
    acc_a, acc_b = unpack(acc)
    y_sin, y_cos = sincos_turns(*angle_turns(pos, inv_freq))
    y = pack(acc_a * y_cos + acc_b * y_sin, acc_b * y_cos - acc_a * y_sin)
    # tests/primitives/rope_bwd.yaml:20: - {store: y}
    return {"D": y}
