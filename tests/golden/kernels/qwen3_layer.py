# Generated from specs/qwen3_layer.yaml (spec hash 4e7f0504442f7c2f) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'qwen3_layer' for QuACK's sm90 GEMM."""

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


# specs/qwen3_layer.yaml:29: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/qwen3_layer.yaml:32: - {load_tile: x0}
    # specs/qwen3_layer.yaml:33: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/qwen3_layer.yaml:34: - {load_row: gamma1}
    # specs/qwen3_layer.yaml:35: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/qwen3_layer.yaml:36: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(2048, tile_N)) partials
    # specs/qwen3_layer.yaml:37: - {store: x1}
    # specs/qwen3_layer.yaml:38: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/qwen3_layer.yaml:40: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/qwen3_layer.yaml:43: - {load_col: r1}
    # specs/qwen3_layer.yaml:44: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/qwen3_layer.yaml:45: - {store: z1}                           # saved pre-activation (for dSwiGLU)
    # specs/qwen3_layer.yaml:46: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/qwen3_layer.yaml:47: - {store: act}
    return {"D": z1, "act": act}


# specs/qwen3_layer.yaml:48: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma2": RowVecLoad("gamma2")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma2):
    # specs/qwen3_layer.yaml:51: - {load_tile: x1}
    # specs/qwen3_layer.yaml:52: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/qwen3_layer.yaml:53: - {load_row: gamma2}
    # specs/qwen3_layer.yaml:54: - {mul: [x2, gamma2], as: h2}
    h2 = x2 * gamma2
    # specs/qwen3_layer.yaml:55: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(2048, tile_N)) partials
    # specs/qwen3_layer.yaml:56: - {store: x2}
    # specs/qwen3_layer.yaml:57: - {store: h2}
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/qwen3_layer.yaml:59: kernel 'qkv_proj'
@gemm_epilogue(ops={"r2": ColVecLoad("r2")})
def coda_qkv_proj(acc, r2):
    # specs/qwen3_layer.yaml:62: - {load_col: r2}
    # specs/qwen3_layer.yaml:63: - {mul: [acc, r2], as: qkv}             # = rms_norm(x2, gamma2) @ w_qkv^T
    qkv = acc * r2
    # specs/qwen3_layer.yaml:64: - {store: qkv}
    return {"D": qkv}


# specs/qwen3_layer.yaml:100: kernel 'dgrad_qkv_proj'
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
def coda_dgrad_qkv_proj(acc, r2, x2, zdz_r2, gamma2):
    # specs/qwen3_layer.yaml:103: - {load_col: r2}
    # specs/qwen3_layer.yaml:104: - {mul: [acc, r2], as: dh2}          # grad of line 63: {mul: [acc, r2], as: qkv}
    dh2 = acc * r2
    # specs/qwen3_layer.yaml:105: - {load_tile: x2}
    # specs/qwen3_layer.yaml:106: - {mul: [x2, r2], as: u_x2}          # grad of line 55: {reduce_row: sumsq, of: x2, as: ss2}
    u_x2 = x2 * r2
    # specs/qwen3_layer.yaml:107: - {load_col: zdz_r2}
    # specs/qwen3_layer.yaml:108: - {mul: [u_x2, zdz_r2], as: u_zdz_x2}  # grad of line 55
    u_zdz_x2 = u_x2 * zdz_r2
    # specs/qwen3_layer.yaml:109: - {mul: [u_zdz_x2, r2], as: norm_x2}  # grad of line 55
    norm_x2 = u_zdz_x2 * r2
    # specs/qwen3_layer.yaml:110: - {load_row: gamma2}
    # specs/qwen3_layer.yaml:111: - {mul: [dh2, gamma2], as: dx2_by_h2}  # grad of line 54: {mul: [x2, gamma2], as: h2}
    dx2_by_h2 = dh2 * gamma2
    # specs/qwen3_layer.yaml:112: - {reduce_col: dot, of: [dh2, x2], as: dgamma2_part}  # grad of line 54
    # dgamma2_part: sum over rows of dh2 * x2 -> (cdiv(M, tile_M), 2048) partials
    # specs/qwen3_layer.yaml:113: - {sub: [dx2_by_h2, norm_x2], as: dx2_delta}
    dx2_delta = dx2_by_h2 - norm_x2
    # specs/qwen3_layer.yaml:114: - {store: dx2_delta, to: dx2, add_to: d_x2}
    # specs/qwen3_layer.yaml:115: - {mul: [x2, gamma2], as: h2_r}      # recompute line 54: {mul: [x2, gamma2], as: h2}
    h2_r = x2 * gamma2
    # specs/qwen3_layer.yaml:116: - {mul: [h2_r, r2], as: v_h2}        # grad of line 63
    v_h2 = h2_r * r2
    # specs/qwen3_layer.yaml:117: - {store: v_h2}
    return {"dgamma2_part": (dh2, x2), "D": dx2_delta, "v_h2": v_h2}


# specs/qwen3_layer.yaml:119: kernel 'wgrad_qkv_proj'
@gemm_epilogue()
def coda_wgrad_qkv_proj(acc):
    # specs/qwen3_layer.yaml:122: - {store: acc, to: d_w_qkv}
    return {"D": acc}


# specs/qwen3_layer.yaml:123: kernel 'dgrad_down_proj'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz_r1_part": ColVecReduce("zdz_r1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_proj(acc, c):
    # specs/qwen3_layer.yaml:126: - {load_tile: z1}
    z1 = c
    # specs/qwen3_layer.yaml:127: - {dswiglu: acc, z: z1, as: [dz1, act_r]}  # grad of line 46: {swiglu: z1, as: act}
    z1_g, z1_u = unpack(z1)
    dz1_g, dz1_u, act_r = dswiglu(z1_g, z1_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/qwen3_layer.yaml:128: - {reduce_row: dot, of: [z1, dz1], as: zdz_r1_part}  # grad of line 44: {mul: [acc, r1], as: z1}
    # zdz_r1_part: sum over columns of z1 * dz1 -> (M, cdiv(6144, tile_N)) partials
    # specs/qwen3_layer.yaml:129: - {store: dz1}
    # specs/qwen3_layer.yaml:130: - {store: act_r}
    return {"zdz_r1_part": z1_g * dz1_g + z1_u * dz1_u, "D": dz1, "act_r": act_r}


# specs/qwen3_layer.yaml:132: kernel 'wgrad_down_proj'
@gemm_epilogue()
def coda_wgrad_down_proj(acc):
    # specs/qwen3_layer.yaml:135: - {store: acc, to: d_w_down}
    return {"D": acc}


# specs/qwen3_layer.yaml:136: kernel 'dgrad_gate_up'
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
    # specs/qwen3_layer.yaml:139: - {load_col: r1}
    # specs/qwen3_layer.yaml:140: - {mul: [acc, r1], as: dh1}          # grad of line 44: {mul: [acc, r1], as: z1}
    dh1 = acc * r1
    # specs/qwen3_layer.yaml:141: - {load_tile: x1}
    # specs/qwen3_layer.yaml:142: - {mul: [x1, r1], as: u_x1}          # grad of line 36: {reduce_row: sumsq, of: x1, as: ss1}
    u_x1 = x1 * r1
    # specs/qwen3_layer.yaml:143: - {load_col: zdz_r1}
    # specs/qwen3_layer.yaml:144: - {mul: [u_x1, zdz_r1], as: u_zdz_x1}  # grad of line 36
    u_zdz_x1 = u_x1 * zdz_r1
    # specs/qwen3_layer.yaml:145: - {mul: [u_zdz_x1, r1], as: norm_x1}  # grad of line 36
    norm_x1 = u_zdz_x1 * r1
    # specs/qwen3_layer.yaml:146: - {load_row: gamma1}
    # specs/qwen3_layer.yaml:147: - {mul: [dh1, gamma1], as: dx1}      # grad of line 35: {mul: [x1, gamma1], as: h1}
    dx1 = dh1 * gamma1
    # specs/qwen3_layer.yaml:148: - {reduce_col: dot, of: [dh1, x1], as: dgamma1_part}  # grad of line 35
    # dgamma1_part: sum over rows of dh1 * x1 -> (cdiv(M, tile_M), 2048) partials
    # specs/qwen3_layer.yaml:149: - {sub: [dx1, norm_x1], as: d_x0_delta}
    d_x0_delta = dx1 - norm_x1
    # specs/qwen3_layer.yaml:150: - {store: d_x0_delta, to: d_x0, add_to: dx2}
    # specs/qwen3_layer.yaml:151: - {mul: [x1, gamma1], as: h1_r}      # recompute line 35: {mul: [x1, gamma1], as: h1}
    h1_r = x1 * gamma1
    # specs/qwen3_layer.yaml:152: - {mul: [h1_r, r1], as: v_h1}        # grad of line 44
    v_h1 = h1_r * r1
    # specs/qwen3_layer.yaml:153: - {store: v_h1}
    return {"dgamma1_part": (dh1, x1), "D": d_x0_delta, "v_h1": v_h1}


# specs/qwen3_layer.yaml:155: kernel 'wgrad_gate_up'
@gemm_epilogue()
def coda_wgrad_gate_up(acc):
    # specs/qwen3_layer.yaml:158: - {store: acc, to: d_w_gu}
    return {"D": acc}


# specs/qwen3_layer.yaml:159: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/qwen3_layer.yaml:162: - {store: acc, to: d_y}
    return {"D": acc}


# specs/qwen3_layer.yaml:163: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/qwen3_layer.yaml:166: - {store: acc, to: d_w_o}
    return {"D": acc}
