# Generated from specs/llama3_last_mlp_recompute.yaml (spec hash dde73c5a7d86126a) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_last_mlp_recompute' for QuACK's sm90 GEMM."""

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


# specs/llama3_last_mlp_recompute.yaml:24: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/llama3_last_mlp_recompute.yaml:27: - {load_tile: x0}
    # specs/llama3_last_mlp_recompute.yaml:28: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/llama3_last_mlp_recompute.yaml:29: - {load_row: gamma1}
    # specs/llama3_last_mlp_recompute.yaml:30: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/llama3_last_mlp_recompute.yaml:31: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_last_mlp_recompute.yaml:32: - {store: x1}
    # specs/llama3_last_mlp_recompute.yaml:33: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/llama3_last_mlp_recompute.yaml:35: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/llama3_last_mlp_recompute.yaml:38: - {load_col: r1}
    # specs/llama3_last_mlp_recompute.yaml:39: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/llama3_last_mlp_recompute.yaml:40: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/llama3_last_mlp_recompute.yaml:41: - {store: act}
    return {"act": act}


# specs/llama3_last_mlp_recompute.yaml:42: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma_f": RowVecLoad("gamma_f")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma_f):
    # specs/llama3_last_mlp_recompute.yaml:45: - {load_tile: x1}
    # specs/llama3_last_mlp_recompute.yaml:46: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/llama3_last_mlp_recompute.yaml:47: - {load_row: gamma_f}
    # specs/llama3_last_mlp_recompute.yaml:48: - {mul: [x2, gamma_f], as: h2}          # final norm input with gamma, row scale deferred
    h2 = x2 * gamma_f
    # specs/llama3_last_mlp_recompute.yaml:49: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_last_mlp_recompute.yaml:50: - {store: x2}
    # specs/llama3_last_mlp_recompute.yaml:51: - {store: h2}                           # the LM head's logits GEMM reads it
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/llama3_last_mlp_recompute.yaml:78: kernel 'recompute_gate_up'
@gemm_epilogue(ops={"r1": ColVecLoad("r1")})
def coda_recompute_gate_up(acc, r1):
    # specs/llama3_last_mlp_recompute.yaml:81: - {load_col: r1}
    # specs/llama3_last_mlp_recompute.yaml:82: - {mul: [acc, r1], as: z1_r}          # = the forward's z1, recomputed
    z1_r = acc * r1
    # specs/llama3_last_mlp_recompute.yaml:83: - {store: z1_r, dtype: bf16}          # rounded as llama3_last_mlp's saved z1
    return {"D": z1_r}


# specs/llama3_last_mlp_recompute.yaml:84: kernel 'dgrad_down_dswiglu'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz1_part": ColVecReduce("zdz1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_dswiglu(acc, c):
    # specs/llama3_last_mlp_recompute.yaml:87: - {load_tile: z1_r}                   # packed (gate, up) pairs, 2F wide
    z1_r = c
    # specs/llama3_last_mlp_recompute.yaml:88: - {dswiglu: acc, z: z1_r, as: [dz1, act_r]}   # dz1 packed like z1; act_r = silu(g)*u recomputed
    z1_r_g, z1_r_u = unpack(z1_r)
    dz1_g, dz1_u, act_r = dswiglu(z1_r_g, z1_r_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/llama3_last_mlp_recompute.yaml:89: - {store: dz1}
    # specs/llama3_last_mlp_recompute.yaml:90: - {store: act_r}
    # specs/llama3_last_mlp_recompute.yaml:91: - {reduce_row: dot, of: [z1_r, dz1], as: zdz1_part}
    # zdz1_part: sum over columns of z1_r * dz1 -> (M, cdiv(8192, tile_N)) partials
    return {"D": dz1, "act_r": act_r, "zdz1_part": z1_r_g * dz1_g + z1_r_u * dz1_u}


# specs/llama3_last_mlp_recompute.yaml:93: kernel 'wgrad_down'
@gemm_epilogue()
def coda_wgrad_down(acc):
    # specs/llama3_last_mlp_recompute.yaml:96: - {store: acc, to: dw_down}
    return {"D": acc}


# specs/llama3_last_mlp_recompute.yaml:97: kernel 'dgrad_gu_norm1'
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
    # specs/llama3_last_mlp_recompute.yaml:100: - {load_tile: x1}
    # specs/llama3_last_mlp_recompute.yaml:101: - {load_col: r1}
    # specs/llama3_last_mlp_recompute.yaml:102: - {load_col: zdz1}
    # specs/llama3_last_mlp_recompute.yaml:103: - {load_row: gamma1}
    # specs/llama3_last_mlp_recompute.yaml:104: - {mul: [x1, r1], as: u1}
    u1 = x1 * r1
    # specs/llama3_last_mlp_recompute.yaml:105: - {mul: [acc, gamma1], as: g_gamma}
    g_gamma = acc * gamma1
    # specs/llama3_last_mlp_recompute.yaml:106: - {mul: [u1, zdz1], as: u_zdz}
    u_zdz = u1 * zdz1
    # specs/llama3_last_mlp_recompute.yaml:107: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_last_mlp_recompute.yaml:108: - {mul: [dxn, r1], as: dx_norm}
    dx_norm = dxn * r1
    # specs/llama3_last_mlp_recompute.yaml:109: - {store: dx_norm, to: dx0, add_to: d_x2}   # dx1 (= dx0) = d_x2 + norm-1 branch
    # specs/llama3_last_mlp_recompute.yaml:110: - {mul: [u1, gamma1], as: v1}
    v1 = u1 * gamma1
    # specs/llama3_last_mlp_recompute.yaml:111: - {store: v1}
    # specs/llama3_last_mlp_recompute.yaml:112: - {reduce_col: dot, of: [acc, u1], as: dgamma1_part}
    # dgamma1_part: sum over rows of acc * u1 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v1": v1, "dgamma1_part": (acc, u1)}


# specs/llama3_last_mlp_recompute.yaml:114: kernel 'wgrad_gu'
@gemm_epilogue()
def coda_wgrad_gu(acc):
    # specs/llama3_last_mlp_recompute.yaml:117: - {store: acc, to: dw_gu}
    return {"D": acc}


# specs/llama3_last_mlp_recompute.yaml:118: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/llama3_last_mlp_recompute.yaml:121: - {store: acc, to: dy}
    return {"D": acc}


# specs/llama3_last_mlp_recompute.yaml:122: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/llama3_last_mlp_recompute.yaml:125: - {store: acc, to: dw_o}
    return {"D": acc}
