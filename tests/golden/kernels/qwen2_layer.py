# Generated from specs/qwen2_layer.yaml (spec hash ac5172698ad8313e) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'qwen2_layer' for QuACK's sm90 GEMM."""

from quack.activation import dswiglu, swiglu
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


# specs/qwen2_layer.yaml:42: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/qwen2_layer.yaml:45: - {load_tile: x0}
    # specs/qwen2_layer.yaml:46: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/qwen2_layer.yaml:47: - {load_row: gamma1}
    # specs/qwen2_layer.yaml:48: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/qwen2_layer.yaml:49: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(1536, tile_N)) partials
    # specs/qwen2_layer.yaml:50: - {store: x1}
    # specs/qwen2_layer.yaml:51: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/qwen2_layer.yaml:53: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/qwen2_layer.yaml:56: - {load_col: r1}
    # specs/qwen2_layer.yaml:57: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/qwen2_layer.yaml:58: - {store: z1}                           # saved pre-activation (for dSwiGLU)
    # specs/qwen2_layer.yaml:59: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/qwen2_layer.yaml:60: - {store: act}
    return {"D": z1, "act": act}


# specs/qwen2_layer.yaml:61: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma2": RowVecLoad("gamma2")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma2):
    # specs/qwen2_layer.yaml:64: - {load_tile: x1}
    # specs/qwen2_layer.yaml:65: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/qwen2_layer.yaml:66: - {load_row: gamma2}
    # specs/qwen2_layer.yaml:67: - {mul: [x2, gamma2], as: h2}
    h2 = x2 * gamma2
    # specs/qwen2_layer.yaml:68: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(1536, tile_N)) partials
    # specs/qwen2_layer.yaml:69: - {store: x2}
    # specs/qwen2_layer.yaml:70: - {store: h2}
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/qwen2_layer.yaml:72: kernel 'qkv_bias_rope'
@gemm_epilogue(
    ops={
        "r2": ColVecLoad("r2"),
        "b_qkv": RowVecLoad("b_qkv"),
        "pos": ColVecLoad("pos"),
        "freqs": RowVecLoad("freqs"),
    },
    mode="acc_pair",
)
def coda_qkv_bias_rope(acc, r2, b_qkv, pos, freqs):
    # specs/qwen2_layer.yaml:75: - {load_col: r2}
    # specs/qwen2_layer.yaml:76: - {mul: [acc, r2], as: zq}              # = rms_norm(x2, gamma2) @ w_qkv^T
    zq = acc * r2
    # specs/qwen2_layer.yaml:77: - {load_row: b_qkv}
    # specs/qwen2_layer.yaml:78: - {add: [zq, b_qkv], as: zb}            # + the QKV bias, before RoPE
    zb = zq + b_qkv
    # specs/qwen2_layer.yaml:79: - {load_col: pos}
    # specs/qwen2_layer.yaml:80: - {load_row: freqs}
    # specs/qwen2_layer.yaml:81: - {rope: zb, pos: pos, freqs: freqs, as: qkv}   # (a, b) -> (a cos - b sin, a sin + b cos)
    zb_a, zb_b = unpack(zb)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(zb_a * qkv_cos - zb_b * qkv_sin, zb_a * qkv_sin + zb_b * qkv_cos)
    # specs/qwen2_layer.yaml:82: - {store: qkv}
    return {"D": qkv}


# specs/qwen2_layer.yaml:118: kernel 'qkv_bias_rope_bwd'
@gemm_epilogue(
    ops={
        "pos": ColVecLoad("pos"),
        "d_qkv": TileLoad("d_qkv"),
        "freqs": RowVecLoad("freqs"),
        "r2": ColVecLoad("r2"),
    },
    reduces={
        "reduce_col_b_qkv": RowVecReduce("reduce_col_b_qkv"),
        "zdz_r2_part": ColVecReduce("zdz_r2_part"),
    },
    mode="acc_pair",
)
def coda_qkv_bias_rope_bwd(acc, pos, d_qkv, freqs, r2):
    # specs/qwen2_layer.yaml:121: - {load_col: pos}
    # specs/qwen2_layer.yaml:122: - {load_row: freqs}
    # specs/qwen2_layer.yaml:123: - {load_tile: d_qkv}
    # specs/qwen2_layer.yaml:124: - {rope_bwd: d_qkv, pos: pos, freqs: freqs, as: dzb}  # grad of line 81: {rope: zb, pos: pos, freqs: freqs, as: qkv}
    d_qkv_a, d_qkv_b = unpack(d_qkv)
    dzb_sin, dzb_cos = sincos_turns(*angle_turns(pos, freqs))
    dzb = pack(d_qkv_a * dzb_cos + d_qkv_b * dzb_sin, d_qkv_b * dzb_cos - d_qkv_a * dzb_sin)
    # specs/qwen2_layer.yaml:125: - {reduce_col: sum, of: dzb, as: reduce_col_b_qkv}  # grad of line 77: {load_row: b_qkv}
    # reduce_col_b_qkv: sum over rows of dzb -> (cdiv(M, tile_M), 2048) partials
    # specs/qwen2_layer.yaml:126: - {load_col: r2}
    # specs/qwen2_layer.yaml:127: - {mul: [acc, r2], as: zq}           # recompute line 76: {mul: [acc, r2], as: zq}
    zq = acc * r2
    # specs/qwen2_layer.yaml:128: - {reduce_row: dot, of: [zq, dzb], as: zdz_r2_part}  # grad of line 76: {mul: [acc, r2], as: zq}
    # zdz_r2_part: sum over columns of zq * dzb -> (M, cdiv(2048, tile_N)) partials
    # specs/qwen2_layer.yaml:129: - {store: dzb}
    return {"reduce_col_b_qkv": dzb, "zdz_r2_part": zq * dzb, "D": dzb}


# specs/qwen2_layer.yaml:132: kernel 'dgrad_qkv_bias_rope'
@gemm_epilogue(
    ops={
        "r2": ColVecLoad("r2"),
        "x2": TileLoad("x2"),
        "zdz_r2": ColVecLoad("zdz_r2"),
        "gamma2": RowVecLoad("gamma2"),
    },
    outputs=(TileStore("v_h2"),),
    reduces={"dgamma2_part": RowVecReduce("dgamma2_part", scaled=True)},
)
def coda_dgrad_qkv_bias_rope(acc, r2, x2, zdz_r2, gamma2):
    # specs/qwen2_layer.yaml:135: - {load_col: r2}
    # specs/qwen2_layer.yaml:136: - {mul: [acc, r2], as: dh2}          # grad of line 76: {mul: [acc, r2], as: zq}
    dh2 = acc * r2
    # specs/qwen2_layer.yaml:137: - {load_tile: x2}
    # specs/qwen2_layer.yaml:138: - {mul: [x2, r2], as: u_x2}          # grad of line 68: {reduce_row: sumsq, of: x2, as: ss2}
    u_x2 = x2 * r2
    # specs/qwen2_layer.yaml:139: - {load_col: zdz_r2}
    # specs/qwen2_layer.yaml:140: - {mul: [u_x2, zdz_r2], as: u_zdz_x2}  # grad of line 68
    u_zdz_x2 = u_x2 * zdz_r2
    # specs/qwen2_layer.yaml:141: - {mul: [u_zdz_x2, r2], as: norm_x2}  # grad of line 68
    norm_x2 = u_zdz_x2 * r2
    # specs/qwen2_layer.yaml:142: - {load_row: gamma2}
    # specs/qwen2_layer.yaml:143: - {mul: [dh2, gamma2], as: dx2_by_h2}  # grad of line 67: {mul: [x2, gamma2], as: h2}
    dx2_by_h2 = dh2 * gamma2
    # specs/qwen2_layer.yaml:144: - {reduce_col: dot, of: [dh2, x2], as: dgamma2_part}  # grad of line 67
    # dgamma2_part: sum over rows of dh2 * x2 -> (cdiv(M, tile_M), 1536) partials
    # specs/qwen2_layer.yaml:145: - {sub: [dx2_by_h2, norm_x2], as: dx2_delta}
    dx2_delta = dx2_by_h2 - norm_x2
    # specs/qwen2_layer.yaml:146: - {store: dx2_delta, to: dx2, add_to: d_x2}
    # specs/qwen2_layer.yaml:147: - {mul: [x2, gamma2], as: h2_r}      # recompute line 67: {mul: [x2, gamma2], as: h2}
    h2_r = x2 * gamma2
    # specs/qwen2_layer.yaml:148: - {mul: [h2_r, r2], as: v_h2}        # grad of line 76
    v_h2 = h2_r * r2
    # specs/qwen2_layer.yaml:149: - {store: v_h2}
    return {"dgamma2_part": (dh2, x2), "D": dx2_delta, "v_h2": v_h2}


# specs/qwen2_layer.yaml:151: kernel 'wgrad_qkv_bias_rope'
@gemm_epilogue()
def coda_wgrad_qkv_bias_rope(acc):
    # specs/qwen2_layer.yaml:154: - {store: acc, to: d_w_qkv}
    return {"D": acc}


# specs/qwen2_layer.yaml:155: kernel 'dgrad_down_proj'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz_r1_part": ColVecReduce("zdz_r1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_proj(acc, c):
    # specs/qwen2_layer.yaml:158: - {load_tile: z1}
    z1 = c
    # specs/qwen2_layer.yaml:159: - {dswiglu: acc, z: z1, as: [dz1, act_r]}  # grad of line 59: {swiglu: z1, as: act}
    z1_g, z1_u = unpack(z1)
    dz1_g, dz1_u, act_r = dswiglu(z1_g, z1_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/qwen2_layer.yaml:160: - {reduce_row: dot, of: [z1, dz1], as: zdz_r1_part}  # grad of line 57: {mul: [acc, r1], as: z1}
    # zdz_r1_part: sum over columns of z1 * dz1 -> (M, cdiv(8960, tile_N)) partials
    # specs/qwen2_layer.yaml:161: - {store: dz1}
    # specs/qwen2_layer.yaml:162: - {store: act_r}
    return {"zdz_r1_part": z1_g * dz1_g + z1_u * dz1_u, "D": dz1, "act_r": act_r}


# specs/qwen2_layer.yaml:164: kernel 'wgrad_down_proj'
@gemm_epilogue()
def coda_wgrad_down_proj(acc):
    # specs/qwen2_layer.yaml:167: - {store: acc, to: d_w_down}
    return {"D": acc}


# specs/qwen2_layer.yaml:168: kernel 'dgrad_gate_up'
@gemm_epilogue(
    ops={
        "r1": ColVecLoad("r1"),
        "x1": TileLoad("x1"),
        "zdz_r1": ColVecLoad("zdz_r1"),
        "gamma1": RowVecLoad("gamma1"),
    },
    outputs=(TileStore("v_h1"),),
    reduces={"dgamma1_part": RowVecReduce("dgamma1_part", scaled=True)},
)
def coda_dgrad_gate_up(acc, r1, x1, zdz_r1, gamma1):
    # specs/qwen2_layer.yaml:171: - {load_col: r1}
    # specs/qwen2_layer.yaml:172: - {mul: [acc, r1], as: dh1}          # grad of line 57: {mul: [acc, r1], as: z1}
    dh1 = acc * r1
    # specs/qwen2_layer.yaml:173: - {load_tile: x1}
    # specs/qwen2_layer.yaml:174: - {mul: [x1, r1], as: u_x1}          # grad of line 49: {reduce_row: sumsq, of: x1, as: ss1}
    u_x1 = x1 * r1
    # specs/qwen2_layer.yaml:175: - {load_col: zdz_r1}
    # specs/qwen2_layer.yaml:176: - {mul: [u_x1, zdz_r1], as: u_zdz_x1}  # grad of line 49
    u_zdz_x1 = u_x1 * zdz_r1
    # specs/qwen2_layer.yaml:177: - {mul: [u_zdz_x1, r1], as: norm_x1}  # grad of line 49
    norm_x1 = u_zdz_x1 * r1
    # specs/qwen2_layer.yaml:178: - {load_row: gamma1}
    # specs/qwen2_layer.yaml:179: - {mul: [dh1, gamma1], as: dx1}      # grad of line 48: {mul: [x1, gamma1], as: h1}
    dx1 = dh1 * gamma1
    # specs/qwen2_layer.yaml:180: - {reduce_col: dot, of: [dh1, x1], as: dgamma1_part}  # grad of line 48
    # dgamma1_part: sum over rows of dh1 * x1 -> (cdiv(M, tile_M), 1536) partials
    # specs/qwen2_layer.yaml:181: - {sub: [dx1, norm_x1], as: d_x0_delta}
    d_x0_delta = dx1 - norm_x1
    # specs/qwen2_layer.yaml:182: - {store: d_x0_delta, to: d_x0, add_to: dx2}
    # specs/qwen2_layer.yaml:183: - {mul: [x1, gamma1], as: h1_r}      # recompute line 48: {mul: [x1, gamma1], as: h1}
    h1_r = x1 * gamma1
    # specs/qwen2_layer.yaml:184: - {mul: [h1_r, r1], as: v_h1}        # grad of line 57
    v_h1 = h1_r * r1
    # specs/qwen2_layer.yaml:185: - {store: v_h1}
    return {"dgamma1_part": (dh1, x1), "D": d_x0_delta, "v_h1": v_h1}


# specs/qwen2_layer.yaml:187: kernel 'wgrad_gate_up'
@gemm_epilogue()
def coda_wgrad_gate_up(acc):
    # specs/qwen2_layer.yaml:190: - {store: acc, to: d_w_gu}
    return {"D": acc}


# specs/qwen2_layer.yaml:191: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/qwen2_layer.yaml:194: - {store: acc, to: d_y}
    return {"D": acc}


# specs/qwen2_layer.yaml:195: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/qwen2_layer.yaml:198: - {store: acc, to: d_w_o}
    return {"D": acc}
