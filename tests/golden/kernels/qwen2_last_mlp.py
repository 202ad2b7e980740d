# Generated from specs/qwen2_last_mlp.yaml (spec hash 465bfc4f8553545e) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'qwen2_last_mlp' for QuACK's sm90 GEMM."""

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


# specs/qwen2_last_mlp.yaml:24: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/qwen2_last_mlp.yaml:27: - {load_tile: x0}
    # specs/qwen2_last_mlp.yaml:28: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/qwen2_last_mlp.yaml:29: - {load_row: gamma1}
    # specs/qwen2_last_mlp.yaml:30: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/qwen2_last_mlp.yaml:31: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(1536, tile_N)) partials
    # specs/qwen2_last_mlp.yaml:32: - {store: x1}
    # specs/qwen2_last_mlp.yaml:33: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/qwen2_last_mlp.yaml:35: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/qwen2_last_mlp.yaml:38: - {load_col: r1}
    # specs/qwen2_last_mlp.yaml:39: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/qwen2_last_mlp.yaml:40: - {store: z1}                           # saved pre-activation (for dSwiGLU)
    # specs/qwen2_last_mlp.yaml:41: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/qwen2_last_mlp.yaml:42: - {store: act}
    return {"D": z1, "act": act}


# specs/qwen2_last_mlp.yaml:43: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma_f": RowVecLoad("gamma_f")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma_f):
    # specs/qwen2_last_mlp.yaml:46: - {load_tile: x1}
    # specs/qwen2_last_mlp.yaml:47: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/qwen2_last_mlp.yaml:48: - {load_row: gamma_f}
    # specs/qwen2_last_mlp.yaml:49: - {mul: [x2, gamma_f], as: h2}          # final norm input with gamma, row scale deferred
    h2 = x2 * gamma_f
    # specs/qwen2_last_mlp.yaml:50: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(1536, tile_N)) partials
    # specs/qwen2_last_mlp.yaml:51: - {store: x2}
    # specs/qwen2_last_mlp.yaml:52: - {store: h2}                           # the LM head's logits GEMM reads it
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/qwen2_last_mlp.yaml:81: kernel 'dgrad_down_proj'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz_r1_part": ColVecReduce("zdz_r1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_proj(acc, c):
    # specs/qwen2_last_mlp.yaml:84: - {load_tile: z1}
    z1 = c
    # specs/qwen2_last_mlp.yaml:85: - {dswiglu: acc, z: z1, as: [dz1, act_r]}  # grad of line 41: {swiglu: z1, as: act}
    z1_g, z1_u = unpack(z1)
    dz1_g, dz1_u, act_r = dswiglu(z1_g, z1_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/qwen2_last_mlp.yaml:86: - {reduce_row: dot, of: [z1, dz1], as: zdz_r1_part}  # grad of line 39: {mul: [acc, r1], as: z1}
    # zdz_r1_part: sum over columns of z1 * dz1 -> (M, cdiv(8960, tile_N)) partials
    # specs/qwen2_last_mlp.yaml:87: - {store: dz1}
    # specs/qwen2_last_mlp.yaml:88: - {store: act_r}
    return {"zdz_r1_part": z1_g * dz1_g + z1_u * dz1_u, "D": dz1, "act_r": act_r}


# specs/qwen2_last_mlp.yaml:90: kernel 'wgrad_down_proj'
@gemm_epilogue()
def coda_wgrad_down_proj(acc):
    # specs/qwen2_last_mlp.yaml:93: - {store: acc, to: d_w_down}
    return {"D": acc}


# specs/qwen2_last_mlp.yaml:94: kernel 'dgrad_gate_up'
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
    # specs/qwen2_last_mlp.yaml:97: - {load_col: r1}
    # specs/qwen2_last_mlp.yaml:98: - {mul: [acc, r1], as: dh1}          # grad of line 39: {mul: [acc, r1], as: z1}
    dh1 = acc * r1
    # specs/qwen2_last_mlp.yaml:99: - {load_tile: x1}
    # specs/qwen2_last_mlp.yaml:100: - {mul: [x1, r1], as: u_x1}          # grad of line 31: {reduce_row: sumsq, of: x1, as: ss1}
    u_x1 = x1 * r1
    # specs/qwen2_last_mlp.yaml:101: - {load_col: zdz_r1}
    # specs/qwen2_last_mlp.yaml:102: - {mul: [u_x1, zdz_r1], as: u_zdz_x1}  # grad of line 31
    u_zdz_x1 = u_x1 * zdz_r1
    # specs/qwen2_last_mlp.yaml:103: - {mul: [u_zdz_x1, r1], as: norm_x1}  # grad of line 31
    norm_x1 = u_zdz_x1 * r1
    # specs/qwen2_last_mlp.yaml:104: - {load_row: gamma1}
    # specs/qwen2_last_mlp.yaml:105: - {mul: [dh1, gamma1], as: dx1}      # grad of line 30: {mul: [x1, gamma1], as: h1}
    dx1 = dh1 * gamma1
    # specs/qwen2_last_mlp.yaml:106: - {reduce_col: dot, of: [dh1, x1], as: dgamma1_part}  # grad of line 30
    # dgamma1_part: sum over rows of dh1 * x1 -> (cdiv(M, tile_M), 1536) partials
    # specs/qwen2_last_mlp.yaml:107: - {sub: [dx1, norm_x1], as: d_x0_delta}
    d_x0_delta = dx1 - norm_x1
    # specs/qwen2_last_mlp.yaml:108: - {store: d_x0_delta, to: d_x0, add_to: d_x2}
    # specs/qwen2_last_mlp.yaml:109: - {mul: [x1, gamma1], as: h1_r}      # recompute line 30: {mul: [x1, gamma1], as: h1}
    h1_r = x1 * gamma1
    # specs/qwen2_last_mlp.yaml:110: - {mul: [h1_r, r1], as: v_h1}        # grad of line 39
    v_h1 = h1_r * r1
    # specs/qwen2_last_mlp.yaml:111: - {store: v_h1}
    return {"dgamma1_part": (dh1, x1), "D": d_x0_delta, "v_h1": v_h1}


# specs/qwen2_last_mlp.yaml:113: kernel 'wgrad_gate_up'
@gemm_epilogue()
def coda_wgrad_gate_up(acc):
    # specs/qwen2_last_mlp.yaml:116: - {store: acc, to: d_w_gu}
    return {"D": acc}


# specs/qwen2_last_mlp.yaml:117: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/qwen2_last_mlp.yaml:120: - {store: acc, to: d_y}
    return {"D": acc}


# specs/qwen2_last_mlp.yaml:121: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/qwen2_last_mlp.yaml:124: - {store: acc, to: d_w_o}
    return {"D": acc}
