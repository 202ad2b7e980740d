# Generated from specs/f6_rope.yaml (spec hash 40b93e746c1b5ef0) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f6_rope' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.quack_private import angle_turns, sincos_turns


# specs/f6_rope.yaml:23: kernel 'qkv_rope'
@gemm_epilogue(ops={"pos": ColVecLoad("pos"), "freqs": RowVecLoad("freqs")}, mode="acc_pair")
def coda_qkv_rope(acc, pos, freqs):
    # specs/f6_rope.yaml:26: - {load_col: pos}                  # int32 position, converted to fp32
    # specs/f6_rope.yaml:27: - {load_row: freqs}                # width 3D/2: one per pair
    # specs/f6_rope.yaml:28: - {rope: acc, pos: pos, freqs: freqs, as: qkv}
    acc_a, acc_b = unpack(acc)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(acc_a * qkv_cos - acc_b * qkv_sin, acc_a * qkv_sin + acc_b * qkv_cos)
    # specs/f6_rope.yaml:29: - {store: qkv}
    return {"D": qkv}
