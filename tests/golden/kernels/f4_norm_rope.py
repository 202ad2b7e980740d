# Generated from specs/f4_norm_rope.yaml (spec hash a7bdb50b918ceebc) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f4_norm_rope' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.quack_private import angle_turns, sincos_turns


# specs/f4_norm_rope.yaml:32: kernel 'qkv_rope'
@gemm_epilogue(
    ops={"r": ColVecLoad("r"), "pos": ColVecLoad("pos"), "freqs": RowVecLoad("freqs")},
    mode="acc_pair",
)
def coda_qkv_rope(acc, r, pos, freqs):
    # specs/f4_norm_rope.yaml:35: - {load_col: r}
    # specs/f4_norm_rope.yaml:36: - {mul: [acc, r], as: z}           # deferred norm
    z = acc * r
    # specs/f4_norm_rope.yaml:37: - {load_col: pos}                  # int32 position, converted to fp32
    # specs/f4_norm_rope.yaml:38: - {load_row: freqs}                # width 3D/2: one per pair
    # specs/f4_norm_rope.yaml:39: - {rope: z, pos: pos, freqs: freqs, as: qkv}
    z_a, z_b = unpack(z)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(z_a * qkv_cos - z_b * qkv_sin, z_a * qkv_sin + z_b * qkv_cos)
    # specs/f4_norm_rope.yaml:40: - {store: qkv}
    return {"D": qkv}
