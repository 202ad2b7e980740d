# Generated from specs/llama3_last_mlp.yaml (spec hash a5cf69a0b0d733ea) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_last_mlp' for QuACK's sm90 GEMM."""

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


# specs/llama3_last_mlp.yaml:35: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/llama3_last_mlp.yaml:38: - {load_tile: x0}
    # specs/llama3_last_mlp.yaml:39: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/llama3_last_mlp.yaml:40: - {load_row: gamma1}
    # specs/llama3_last_mlp.yaml:41: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/llama3_last_mlp.yaml:42: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_last_mlp.yaml:43: - {store: x1}
    # specs/llama3_last_mlp.yaml:44: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/llama3_last_mlp.yaml:46: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/llama3_last_mlp.yaml:49: - {load_col: r1}
    # specs/llama3_last_mlp.yaml:50: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/llama3_last_mlp.yaml:51: - {store: z1}                           # saved pre-activation (for dSwiGLU)
    # specs/llama3_last_mlp.yaml:52: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/llama3_last_mlp.yaml:53: - {store: act}
    return {"D": z1, "act": act}


# specs/llama3_last_mlp.yaml:54: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma_f": RowVecLoad("gamma_f")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma_f):
    # specs/llama3_last_mlp.yaml:57: - {load_tile: x1}
    # specs/llama3_last_mlp.yaml:58: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/llama3_last_mlp.yaml:59: - {load_row: gamma_f}
    # specs/llama3_last_mlp.yaml:60: - {mul: [x2, gamma_f], as: h2}          # final norm input with gamma, row scale deferred
    h2 = x2 * gamma_f
    # specs/llama3_last_mlp.yaml:61: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_last_mlp.yaml:62: - {store: x2}
    # specs/llama3_last_mlp.yaml:63: - {store: h2}                           # the LM head's logits GEMM reads it
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/llama3_last_mlp.yaml:89: kernel 'dgrad_down_dswiglu'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz1_part": ColVecReduce("zdz1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_dswiglu(acc, c):
    # specs/llama3_last_mlp.yaml:92: - {load_tile: z1}                     # packed (gate, up) pairs, 2F wide
    z1 = c
    # specs/llama3_last_mlp.yaml:93: - {dswiglu: acc, z: z1, as: [dz1, act_r]}   # dz1 packed like z1; act_r = silu(g)*u recomputed
    z1_g, z1_u = unpack(z1)
    dz1_g, dz1_u, act_r = dswiglu(z1_g, z1_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/llama3_last_mlp.yaml:94: - {store: dz1}
    # specs/llama3_last_mlp.yaml:95: - {store: act_r}
    # specs/llama3_last_mlp.yaml:96: - {reduce_row: dot, of: [z1, dz1], as: zdz1_part}
    # zdz1_part: sum over columns of z1 * dz1 -> (M, cdiv(8192, tile_N)) partials
    return {"D": dz1, "act_r": act_r, "zdz1_part": z1_g * dz1_g + z1_u * dz1_u}


# specs/llama3_last_mlp.yaml:98: kernel 'wgrad_down'
@gemm_epilogue()
def coda_wgrad_down(acc):
    # specs/llama3_last_mlp.yaml:101: - {store: acc, to: dw_down}
    return {"D": acc}


# specs/llama3_last_mlp.yaml:102: kernel 'dgrad_gu_norm1'
@gemm_epilogue(
    ops={
        "x1": TileLoad("x1"),
        "r1": ColVecLoad("r1"),
        "zdz1": ColVecLoad("zdz1"),
        "gamma1": RowVecLoad("gamma1"),
    },
    outputs=(TileStore("v1"),),
    reduces={"dgamma1_part": RowVecReduce("dgamma1_part", scaled=True)},
)
def coda_dgrad_gu_norm1(acc, x1, r1, zdz1, gamma1):
    # specs/llama3_last_mlp.yaml:105: - {load_tile: x1}
    # specs/llama3_last_mlp.yaml:106: - {load_col: r1}
    # specs/llama3_last_mlp.yaml:107: - {load_col: zdz1}
    # specs/llama3_last_mlp.yaml:108: - {load_row: gamma1}
    # specs/llama3_last_mlp.yaml:109: - {mul: [x1, r1], as: u1}
    u1 = x1 * r1
    # specs/llama3_last_mlp.yaml:110: - {mul: [acc, gamma1], as: g_gamma}
    g_gamma = acc * gamma1
    # specs/llama3_last_mlp.yaml:111: - {mul: [u1, zdz1], as: u_zdz}
    u_zdz = u1 * zdz1
    # specs/llama3_last_mlp.yaml:112: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_last_mlp.yaml:113: - {mul: [dxn, r1], as: dx_norm}
    dx_norm = dxn * r1
    # specs/llama3_last_mlp.yaml:114: - {store: dx_norm, to: dx0, add_to: d_x2}   # dx1 (= dx0) = d_x2 + norm-1 branch
    # specs/llama3_last_mlp.yaml:115: - {mul: [u1, gamma1], as: v1}
    v1 = u1 * gamma1
    # specs/llama3_last_mlp.yaml:116: - {store: v1}
    # specs/llama3_last_mlp.yaml:117: - {reduce_col: dot, of: [acc, u1], as: dgamma1_part}
    # dgamma1_part: sum over rows of acc * u1 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v1": v1, "dgamma1_part": (acc, u1)}


# specs/llama3_last_mlp.yaml:119: kernel 'wgrad_gu'
@gemm_epilogue()
def coda_wgrad_gu(acc):
    # specs/llama3_last_mlp.yaml:122: - {store: acc, to: dw_gu}
    return {"D": acc}


# specs/llama3_last_mlp.yaml:123: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/llama3_last_mlp.yaml:126: - {store: acc, to: dy}
    return {"D": acc}


# specs/llama3_last_mlp.yaml:127: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/llama3_last_mlp.yaml:130: - {store: acc, to: dw_o}
    return {"D": acc}
