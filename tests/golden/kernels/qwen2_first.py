# Generated from specs/qwen2_first.yaml (spec hash 8e10fc4183e08c14) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'qwen2_first' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import (
    ColVecLoad,
    ColVecReduce,
    RowVecLoad,
    RowVecReduce,
    TileLoad,
    TileStore,
)

from coda_spec.lower.quack_private import angle_turns, sincos_turns


# specs/qwen2_first.yaml:45: kernel 'qkv_bias_rope'
@gemm_epilogue(
    ops={
        "r": ColVecLoad("r"),
        "b_qkv": RowVecLoad("b_qkv"),
        "pos": ColVecLoad("pos"),
        "freqs": RowVecLoad("freqs"),
    },
    mode="acc_pair",
)
def coda_qkv_bias_rope(acc, r, b_qkv, pos, freqs):
    # specs/qwen2_first.yaml:48: - {load_col: r}
    # specs/qwen2_first.yaml:49: - {mul: [acc, r], as: zq}               # = rms_norm(x, gamma) @ w_qkv^T
    zq = acc * r
    # specs/qwen2_first.yaml:50: - {load_row: b_qkv}
    # specs/qwen2_first.yaml:51: - {add: [zq, b_qkv], as: zb}            # + the QKV bias, before RoPE
    zb = zq + b_qkv
    # specs/qwen2_first.yaml:52: - {load_col: pos}
    # specs/qwen2_first.yaml:53: - {load_row: freqs}
    # specs/qwen2_first.yaml:54: - {rope: zb, pos: pos, freqs: freqs, as: qkv}   # (a, b) -> (a cos - b sin, a sin + b cos)
    zb_a, zb_b = unpack(zb)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(zb_a * qkv_cos - zb_b * qkv_sin, zb_a * qkv_sin + zb_b * qkv_cos)
    # specs/qwen2_first.yaml:55: - {store: qkv}
    return {"D": qkv}


# specs/qwen2_first.yaml:77: kernel 'qkv_bias_rope_bwd'
@gemm_epilogue(
    ops={
        "pos": ColVecLoad("pos"),
        "d_qkv": TileLoad("d_qkv"),
        "freqs": RowVecLoad("freqs"),
        "r": ColVecLoad("r"),
    },
    reduces={
        "reduce_col_b_qkv": RowVecReduce("reduce_col_b_qkv"),
        "zdz_r_part": ColVecReduce("zdz_r_part"),
    },
    mode="acc_pair",
)
def coda_qkv_bias_rope_bwd(acc, pos, d_qkv, freqs, r):
    # specs/qwen2_first.yaml:80: - {load_col: pos}
    # specs/qwen2_first.yaml:81: - {load_row: freqs}
    # specs/qwen2_first.yaml:82: - {load_tile: d_qkv}
    # specs/qwen2_first.yaml:83: - {rope_bwd: d_qkv, pos: pos, freqs: freqs, as: dzb}  # grad of line 52: {rope: zb, pos: pos, freqs: freqs, as: qkv}
    d_qkv_a, d_qkv_b = unpack(d_qkv)
    dzb_sin, dzb_cos = sincos_turns(*angle_turns(pos, freqs))
    dzb = pack(d_qkv_a * dzb_cos + d_qkv_b * dzb_sin, d_qkv_b * dzb_cos - d_qkv_a * dzb_sin)
    # specs/qwen2_first.yaml:84: - {reduce_col: sum, of: dzb, as: reduce_col_b_qkv}  # grad of line 48: {load_row: b_qkv}
    # reduce_col_b_qkv: sum over rows of dzb -> (cdiv(M, tile_M), 2048) partials
    # specs/qwen2_first.yaml:85: - {load_col: r}
    # specs/qwen2_first.yaml:86: - {mul: [acc, r], as: zq}            # recompute line 47: {mul: [acc, r], as: zq}
    zq = acc * r
    # specs/qwen2_first.yaml:87: - {reduce_row: dot, of: [zq, dzb], as: zdz_r_part}  # grad of line 47: {mul: [acc, r], as: zq}
    # zdz_r_part: sum over columns of zq * dzb -> (M, cdiv(2048, tile_N)) partials
    # specs/qwen2_first.yaml:88: - {store: dzb}
    return {"reduce_col_b_qkv": dzb, "zdz_r_part": zq * dzb, "D": dzb}


# specs/qwen2_first.yaml:91: kernel 'dgrad_qkv_bias_rope'
@gemm_epilogue(
    ops={
        "r": ColVecLoad("r"),
        "x": TileLoad("x"),
        "zdz_r": ColVecLoad("zdz_r"),
        "gamma": RowVecLoad("gamma"),
    },
    outputs=(TileStore("v_h"),),
    reduces={"dgamma_part": RowVecReduce("dgamma_part", scaled=True)},
)
def coda_dgrad_qkv_bias_rope(acc, r, x, zdz_r, gamma):
    # specs/qwen2_first.yaml:94: - {load_col: r}
    # specs/qwen2_first.yaml:95: - {mul: [acc, r], as: dh}            # grad of line 47: {mul: [acc, r], as: zq}
    dh = acc * r
    # specs/qwen2_first.yaml:96: - {load_tile: x}
    # specs/qwen2_first.yaml:97: - {mul: [x, r], as: u_x}             # grad of line 41: {reduce_row: sumsq, of: x, as: ss}
    u_x = x * r
    # specs/qwen2_first.yaml:98: - {load_col: zdz_r}
    # specs/qwen2_first.yaml:99: - {mul: [u_x, zdz_r], as: u_zdz_x}   # grad of line 41
    u_zdz_x = u_x * zdz_r
    # specs/qwen2_first.yaml:100: - {mul: [u_zdz_x, r], as: norm_x}    # grad of line 41
    norm_x = u_zdz_x * r
    # specs/qwen2_first.yaml:101: - {load_row: gamma}
    # specs/qwen2_first.yaml:102: - {mul: [dh, gamma], as: dx}         # grad of line 39: {mul: [x, gamma], as: h}
    dx = dh * gamma
    # specs/qwen2_first.yaml:103: - {reduce_col: dot, of: [dh, x], as: dgamma_part}  # grad of line 39
    # dgamma_part: sum over rows of dh * x -> (cdiv(M, tile_M), 1536) partials
    # specs/qwen2_first.yaml:104: - {sub: [dx, norm_x], as: d_x_sum}
    d_x_sum = dx - norm_x
    # specs/qwen2_first.yaml:105: - {store: d_x_sum, to: d_x}
    # specs/qwen2_first.yaml:106: - {mul: [x, gamma], as: h_r}         # recompute line 39: {mul: [x, gamma], as: h}
    h_r = x * gamma
    # specs/qwen2_first.yaml:107: - {mul: [h_r, r], as: v_h}           # grad of line 47
    v_h = h_r * r
    # specs/qwen2_first.yaml:108: - {store: v_h}
    return {"dgamma_part": (dh, x), "D": d_x_sum, "v_h": v_h}


# specs/qwen2_first.yaml:110: kernel 'wgrad_qkv_bias_rope'
@gemm_epilogue()
def coda_wgrad_qkv_bias_rope(acc):
    # specs/qwen2_first.yaml:113: - {store: acc, to: d_w_qkv}
    return {"D": acc}
