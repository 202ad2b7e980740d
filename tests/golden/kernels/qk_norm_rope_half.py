# Generated from tests/specs_extra/qk_norm_rope_half.yaml (spec hash 6f65f2ae734d6fe1) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'qk_norm_rope_half' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad

from coda_spec.lower.kernel_lib import select
from coda_spec.lower.quack_ops import GroupStat, HalfPartner
from coda_spec.lower.quack_private import angle_turns, sincos_turns

# tests/specs_extra/qk_norm_rope_half.yaml:26: kernel 'qkv_norm_rope_half'
# ms: mean over 128-column groups of acc * acc
_gs_qkv_norm_rope_half_ms = GroupStat("ms", mean=True)
# qk_rot_all_half: rotate_half(qk_w), heads of 128 columns
_hp_qkv_norm_rope_half_qk_rot_all_half = HalfPartner("qk_rot_all_half")


def coda_qkv_norm_rope_half_prepass(acc, gamma_q, gamma_k, columns):
    # tests/specs_extra/qk_norm_rope_half.yaml:26: prepass of kernel 'qkv_norm_rope_half' (QuACK runs it first,
    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;
    # the values they read are re-computed here from acc and the kernel's loads
    # tests/specs_extra/qk_norm_rope_half.yaml:29: - {prepass: meansq, of: acc, group: head_dim, as: ms}   # per (row, head) mean(acc^2)
    ms_in = acc * acc
    # tests/specs_extra/qk_norm_rope_half.yaml:32: - {load_row: gamma_q, repeat: "(Q+2*KV)/head_dim", as: gq}
    # tests/specs_extra/qk_norm_rope_half.yaml:33: - {load_row: gamma_k, repeat: "(Q+2*KV)/head_dim", as: gk}
    # tests/specs_extra/qk_norm_rope_half.yaml:34: - {mul: [acc, gq], cols: [0, Q], as: q_w}               # q_norm.weight on q heads
    q_w_all = acc * gamma_q
    q_w = select(columns < 2048.0, q_w_all, acc)
    # tests/specs_extra/qk_norm_rope_half.yaml:35: - {mul: [q_w, gk], cols: [Q, "Q+KV"], as: qk_w}         # k_norm.weight on k heads
    qk_w_all = q_w * gamma_k
    qk_w = select(columns < 2560.0, select(columns >= 2048.0, qk_w_all, q_w), q_w)
    # tests/specs_extra/qk_norm_rope_half.yaml:38: - {rope: qk_w, pos: pos, freqs: inv_freq, pairs: half, head_dim: head_dim, cols: [0, "Q+KV"], as: qk_rot}
    qk_rot_all_half_in = qk_w
    return {"ms": ms_in, "qk_rot_all_half": qk_rot_all_half_in}


@gemm_epilogue(
    ops={
        "ms": _gs_qkv_norm_rope_half_ms,
        "gamma_q": RowVecLoad("gamma_q"),
        "gamma_k": RowVecLoad("gamma_k"),
        "columns": RowVecLoad("columns"),
        "pos": ColVecLoad("pos"),
        "qk_rot_all_half": _hp_qkv_norm_rope_half_qk_rot_all_half,
        "inv_freq_hi": RowVecLoad("inv_freq_hi"),
        "inv_freq_lo": RowVecLoad("inv_freq_lo"),
    },
    prepass=coda_qkv_norm_rope_half_prepass,
    prepass_outs=("ms", "qk_rot_all_half"),
    mode="acc_pair",
)
def coda_qkv_norm_rope_half(
    acc, ms, gamma_q, gamma_k, columns, pos, qk_rot_all_half, inv_freq_hi, inv_freq_lo
):
    # tests/specs_extra/qk_norm_rope_half.yaml:29: - {prepass: meansq, of: acc, group: head_dim, as: ms}   # per (row, head) mean(acc^2)
    # (ms arrives as a Pair of equal lanes: a column pair lies in one group)
    # tests/specs_extra/qk_norm_rope_half.yaml:30: - {add: [ms, 1.0e-6], as: ms_eps}
    ms_eps = ms.a + 1e-06
    # tests/specs_extra/qk_norm_rope_half.yaml:31: - {rsqrt: ms_eps, as: head_rstd}
    head_rstd = cute.math.rsqrt(ms_eps)
    # tests/specs_extra/qk_norm_rope_half.yaml:32: - {load_row: gamma_q, repeat: "(Q+2*KV)/head_dim", as: gq}
    # tests/specs_extra/qk_norm_rope_half.yaml:33: - {load_row: gamma_k, repeat: "(Q+2*KV)/head_dim", as: gk}
    # tests/specs_extra/qk_norm_rope_half.yaml:34: - {mul: [acc, gq], cols: [0, Q], as: q_w}               # q_norm.weight on q heads
    q_w_all = acc * gamma_q
    col_a, col_b = unpack(columns)
    q_w_all_a, q_w_all_b = unpack(q_w_all)
    acc_a, acc_b = unpack(acc)
    q_w_a = select(col_a < 2048.0, q_w_all_a, acc_a)
    q_w_b = select(col_a < 2048.0, q_w_all_b, acc_b)
    q_w = pack(q_w_a, q_w_b)
    # tests/specs_extra/qk_norm_rope_half.yaml:35: - {mul: [q_w, gk], cols: [Q, "Q+KV"], as: qk_w}         # k_norm.weight on k heads
    qk_w_all = q_w * gamma_k
    qk_w_all_a, qk_w_all_b = unpack(qk_w_all)
    qk_w_a = select(col_a < 2560.0, select(col_a >= 2048.0, qk_w_all_a, q_w_a), q_w_a)
    qk_w_b = select(col_a < 2560.0, select(col_a >= 2048.0, qk_w_all_b, q_w_b), q_w_b)
    qk_w = pack(qk_w_a, qk_w_b)
    # tests/specs_extra/qk_norm_rope_half.yaml:36: - {load_col: pos}
    # tests/specs_extra/qk_norm_rope_half.yaml:37: - {load_row: inv_freq, repeat: "(Q+2*KV)/head_dim"}     # one frequency per pair
    # tests/specs_extra/qk_norm_rope_half.yaml:38: - {rope: qk_w, pos: pos, freqs: inv_freq, pairs: half, head_dim: head_dim, cols: [0, "Q+KV"], as: qk_rot}
    inv_freq_hi_a, inv_freq_hi_b = unpack(inv_freq_hi)
    inv_freq_lo_a, inv_freq_lo_b = unpack(inv_freq_lo)
    qk_rot_all_f0 = pack(inv_freq_hi_a, inv_freq_lo_a)
    qk_rot_all_sin0, qk_rot_all_cos0 = sincos_turns(*angle_turns(pos, qk_rot_all_f0))
    qk_rot_all_f1 = pack(inv_freq_hi_b, inv_freq_lo_b)
    qk_rot_all_sin1, qk_rot_all_cos1 = sincos_turns(*angle_turns(pos, qk_rot_all_f1))
    qk_rot_all_cos = pack(qk_rot_all_cos0, qk_rot_all_cos1)
    qk_rot_all_sin = pack(qk_rot_all_sin0, qk_rot_all_sin1)
    qk_rot_all = qk_w * qk_rot_all_cos + qk_rot_all_half * qk_rot_all_sin
    qk_rot_all_a, qk_rot_all_b = unpack(qk_rot_all)
    qk_rot_a = select(col_a < 2560.0, qk_rot_all_a, qk_w_a)
    qk_rot_b = select(col_a < 2560.0, qk_rot_all_b, qk_w_b)
    qk_rot = pack(qk_rot_a, qk_rot_b)
    # tests/specs_extra/qk_norm_rope_half.yaml:39: - {mul: [qk_rot, head_rstd], cols: [0, "Q+KV"], as: qkv}  # the norm's rstd, per head
    qkv_all = qk_rot * head_rstd
    qkv_all_a, qkv_all_b = unpack(qkv_all)
    qkv_a = select(col_a < 2560.0, qkv_all_a, qk_rot_a)
    qkv_b = select(col_a < 2560.0, qkv_all_b, qk_rot_b)
    qkv = pack(qkv_a, qkv_b)
    # tests/specs_extra/qk_norm_rope_half.yaml:40: - {store: qkv}
    return {"D": qkv}
