# Generated from tests/primitives/rope_bwd.yaml (spec hash a46a7d2c1553c4a4) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_rope_bwd' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.quack_ops import HalfPartner
from coda_spec.lower.quack_private import angle_turns, sincos_turns

# tests/primitives/rope_bwd.yaml:17: kernel 'k'
# y_half: rotate_half(acc), heads of 64 columns
_hp_k_y_half = HalfPartner("y_half")


def coda_k_prepass(acc):
    # tests/primitives/rope_bwd.yaml:17: prepass of kernel 'k' (QuACK runs it first,
    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;
    # the values they read are re-computed here from acc and the kernel's loads
    # tests/primitives/rope_bwd.yaml:22: - {rope_bwd: acc, pos: pos, freqs: inv_freq, pairs: half, head_dim: hd, as: y}
    y_half_in = acc
    return {"y_half": y_half_in}


@gemm_epilogue(
    ops={
        "pos": ColVecLoad("pos"),
        "y_half": _hp_k_y_half,
        "inv_freq_hi": RowVecLoad("inv_freq_hi"),
        "inv_freq_lo": RowVecLoad("inv_freq_lo"),
    },
    prepass=coda_k_prepass,
    prepass_outs=("y_half",),
    mode="acc_pair",
)
def coda_k(acc, pos, y_half, inv_freq_hi, inv_freq_lo):
    # tests/primitives/rope_bwd.yaml:20: - {load_col: pos}
    # tests/primitives/rope_bwd.yaml:21: - {load_row: inv_freq, repeat: "N/hd"}
    # tests/primitives/rope_bwd.yaml:22: - {rope_bwd: acc, pos: pos, freqs: inv_freq, pairs: half, head_dim: hd, as: y}
    inv_freq_hi_a, inv_freq_hi_b = unpack(inv_freq_hi)
    inv_freq_lo_a, inv_freq_lo_b = unpack(inv_freq_lo)
    y_f0 = pack(inv_freq_hi_a, inv_freq_lo_a)
    y_sin0, y_cos0 = sincos_turns(*angle_turns(pos, y_f0))
    y_f1 = pack(inv_freq_hi_b, inv_freq_lo_b)
    y_sin1, y_cos1 = sincos_turns(*angle_turns(pos, y_f1))
    y_cos = pack(y_cos0, y_cos1)
    y_sin = pack(y_sin0, y_sin1)
    y = acc * y_cos - y_half * y_sin
    # tests/primitives/rope_bwd.yaml:23: - {store: y}
    return {"D": y}
