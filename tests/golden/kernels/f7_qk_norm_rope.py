# Generated from specs/f7_qk_norm_rope.yaml (spec hash e2825513ffc4c9bf) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f7_qk_norm_rope' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.quack_ops import GroupStat
from coda_spec.lower.quack_private import angle_turns, sincos_turns

# specs/f7_qk_norm_rope.yaml:33: kernel 'qk_norm_rope'
# ms_acc: mean over 128-column groups of acc * acc
_gs_qk_norm_rope_ms_acc = GroupStat("ms_acc", mean=True)


def coda_qk_norm_rope_prepass(acc):
    # specs/f7_qk_norm_rope.yaml:33: prepass of kernel 'qk_norm_rope' (QuACK runs it first,
    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;
    # the values they read are re-computed here from acc and the kernel's loads
    # specs/f7_qk_norm_rope.yaml:36: - {prepass: meansq, of: acc, group: head_dim, as: ms_acc}  # per (row, head) mean(acc^2)
    ms_acc_in = acc * acc
    return {"ms_acc": ms_acc_in}


@gemm_epilogue(
    ops={
        "ms_acc": _gs_qk_norm_rope_ms_acc,
        "r": ColVecLoad("r"),
        "wn": RowVecLoad("wn"),
        "pos": ColVecLoad("pos"),
        "freqs": RowVecLoad("freqs"),
    },
    prepass=coda_qk_norm_rope_prepass,
    prepass_outs=("ms_acc",),
    mode="acc_pair",
)
def coda_qk_norm_rope(acc, ms_acc, r, wn, pos, freqs):
    # specs/f7_qk_norm_rope.yaml:36: - {prepass: meansq, of: acc, group: head_dim, as: ms_acc}  # per (row, head) mean(acc^2)
    # (ms_acc arrives as a Pair of equal lanes: a column pair lies in one group)
    # specs/f7_qk_norm_rope.yaml:37: - {load_col: r}
    # specs/f7_qk_norm_rope.yaml:38: - {mul: [acc, r], as: z}           # deferred input norm
    z = acc * r
    # specs/f7_qk_norm_rope.yaml:39: - {mul: [r, r], as: r2}
    r2 = r * r
    # specs/f7_qk_norm_rope.yaml:40: - {mul: [ms_acc, r2], as: ms}      # mean(z^2) = r^2 mean(acc^2), per head
    ms = ms_acc.a * r2
    # specs/f7_qk_norm_rope.yaml:41: - {add: [ms, 1.0e-6], as: ms_eps}
    ms_eps = ms + 1e-06
    # specs/f7_qk_norm_rope.yaml:42: - {rsqrt: ms_eps, as: head_rstd}
    head_rstd = cute.math.rsqrt(ms_eps)
    # specs/f7_qk_norm_rope.yaml:43: - {mul: [z, head_rstd], as: zn}    # per-head RMSNorm ...
    zn = z * head_rstd
    # specs/f7_qk_norm_rope.yaml:44: - {load_row: wn}
    # specs/f7_qk_norm_rope.yaml:45: - {mul: [zn, wn], as: zw}          # ... and its weight
    zw = zn * wn
    # specs/f7_qk_norm_rope.yaml:46: - {load_col: pos}
    # specs/f7_qk_norm_rope.yaml:47: - {load_row: freqs}
    # specs/f7_qk_norm_rope.yaml:48: - {rope: zw, pos: pos, freqs: freqs, as: qk}
    zw_a, zw_b = unpack(zw)
    qk_sin, qk_cos = sincos_turns(*angle_turns(pos, freqs))
    qk = pack(zw_a * qk_cos - zw_b * qk_sin, zw_a * qk_sin + zw_b * qk_cos)
    # specs/f7_qk_norm_rope.yaml:49: - {store: qk}
    return {"D": qk}
