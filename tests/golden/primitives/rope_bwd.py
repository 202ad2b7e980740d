# Generated from tests/primitives/rope_bwd.yaml (spec hash d9fb8a14e9087bc1) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_rope_bwd' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.quack_private import angle_turns, sincos_turns


# tests/primitives/rope_bwd.yaml:12: kernel 'k'
@gemm_epilogue(ops={"pos": ColVecLoad("pos"), "freqs": RowVecLoad("freqs")}, mode="acc_pair")
def coda_k(acc, pos, freqs):
    # tests/primitives/rope_bwd.yaml:15: - {load_col: pos}
    # tests/primitives/rope_bwd.yaml:16: - {load_row: freqs}
    # tests/primitives/rope_bwd.yaml:17: - {rope_bwd: acc, pos: pos, freqs: freqs, as: y}
    acc_a, acc_b = unpack(acc)
    y_sin, y_cos = sincos_turns(*angle_turns(pos, freqs))
    y = pack(acc_a * y_cos + acc_b * y_sin, acc_b * y_cos - acc_a * y_sin)
    # tests/primitives/rope_bwd.yaml:18: - {store: y}
    return {"D": y}
