# Generated from specs/llama3_layer_recompute.yaml (spec hash cd9c1e4556c39338) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_layer_recompute' for QuACK's sm90 GEMM."""

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


# specs/llama3_layer_recompute.yaml:38: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/llama3_layer_recompute.yaml:41: - {load_tile: x0}
    # specs/llama3_layer_recompute.yaml:42: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/llama3_layer_recompute.yaml:43: - {load_row: gamma1}
    # specs/llama3_layer_recompute.yaml:44: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/llama3_layer_recompute.yaml:45: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_layer_recompute.yaml:46: - {store: x1}
    # specs/llama3_layer_recompute.yaml:47: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/llama3_layer_recompute.yaml:49: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/llama3_layer_recompute.yaml:52: - {load_col: r1}
    # specs/llama3_layer_recompute.yaml:53: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/llama3_layer_recompute.yaml:54: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/llama3_layer_recompute.yaml:55: - {store: act}
    return {"act": act}


# specs/llama3_layer_recompute.yaml:56: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma2": RowVecLoad("gamma2")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma2):
    # specs/llama3_layer_recompute.yaml:59: - {load_tile: x1}
    # specs/llama3_layer_recompute.yaml:60: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/llama3_layer_recompute.yaml:61: - {load_row: gamma2}
    # specs/llama3_layer_recompute.yaml:62: - {mul: [x2, gamma2], as: h2}
    h2 = x2 * gamma2
    # specs/llama3_layer_recompute.yaml:63: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_layer_recompute.yaml:64: - {store: x2}
    # specs/llama3_layer_recompute.yaml:65: - {store: h2}
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/llama3_layer_recompute.yaml:67: kernel 'qkv_rope'
@gemm_epilogue(
    ops={"r2": ColVecLoad("r2"), "pos": ColVecLoad("pos"), "freqs": RowVecLoad("freqs")},
    mode="acc_pair",
)
def coda_qkv_rope(acc, r2, pos, freqs):
    # specs/llama3_layer_recompute.yaml:70: - {load_col: r2}
    # specs/llama3_layer_recompute.yaml:71: - {mul: [acc, r2], as: zq}              # = rms_norm(x2, gamma2) @ w_qkv^T
    zq = acc * r2
    # specs/llama3_layer_recompute.yaml:72: - {load_col: pos}
    # specs/llama3_layer_recompute.yaml:73: - {load_row: freqs}
    # specs/llama3_layer_recompute.yaml:74: - {rope: zq, pos: pos, freqs: freqs, as: qkv}   # (a, b) -> (a cos - b sin, a sin + b cos)
    zq_a, zq_b = unpack(zq)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(zq_a * qkv_cos - zq_b * qkv_sin, zq_a * qkv_sin + zq_b * qkv_cos)
    # specs/llama3_layer_recompute.yaml:75: - {store: qkv}
    return {"D": qkv}


# specs/llama3_layer_recompute.yaml:114: kernel 'dgrad_qkv_norm2'
@gemm_epilogue(
    ops={
        "x2": TileLoad("x2"),
        "r2": ColVecLoad("r2"),
        "zdz2": ColVecLoad("zdz2"),
        "gamma2": RowVecLoad("gamma2"),
    },
    outputs=(TileStore("v2"),),
    reduces={"dgamma2_part": RowVecReduce("dgamma2_part", scaled=True)},
)
def coda_dgrad_qkv_norm2(acc, x2, r2, zdz2, gamma2):
    # specs/llama3_layer_recompute.yaml:117: - {load_tile: x2}
    # specs/llama3_layer_recompute.yaml:118: - {load_col: r2}
    # specs/llama3_layer_recompute.yaml:119: - {load_col: zdz2}
    # specs/llama3_layer_recompute.yaml:120: - {load_row: gamma2}
    # specs/llama3_layer_recompute.yaml:121: - {mul: [x2, r2], as: u2}
    u2 = x2 * r2
    # specs/llama3_layer_recompute.yaml:122: - {mul: [acc, gamma2], as: g_gamma}
    g_gamma = acc * gamma2
    # specs/llama3_layer_recompute.yaml:123: - {mul: [u2, zdz2], as: u_zdz}
    u_zdz = u2 * zdz2
    # specs/llama3_layer_recompute.yaml:124: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_layer_recompute.yaml:125: - {mul: [dxn, r2], as: dx_norm}
    dx_norm = dxn * r2
    # specs/llama3_layer_recompute.yaml:126: - {store: dx_norm, to: dx2, add_to: d_x2}   # dx2 = d_x2 + norm-2 branch
    # specs/llama3_layer_recompute.yaml:127: - {mul: [u2, gamma2], as: v2}         # recomputed norm-2 output
    v2 = u2 * gamma2
    # specs/llama3_layer_recompute.yaml:128: - {store: v2}
    # specs/llama3_layer_recompute.yaml:129: - {reduce_col: dot, of: [acc, u2], as: dgamma2_part}
    # dgamma2_part: sum over rows of acc * u2 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v2": v2, "dgamma2_part": (acc, u2)}


# specs/llama3_layer_recompute.yaml:131: kernel 'wgrad_qkv'
@gemm_epilogue()
def coda_wgrad_qkv(acc):
    # specs/llama3_layer_recompute.yaml:134: - {store: acc, to: dw_qkv}
    return {"D": acc}


# specs/llama3_layer_recompute.yaml:135: kernel 'recompute_gate_up'
@gemm_epilogue(ops={"r1": ColVecLoad("r1")})
def coda_recompute_gate_up(acc, r1):
    # specs/llama3_layer_recompute.yaml:138: - {load_col: r1}
    # specs/llama3_layer_recompute.yaml:139: - {mul: [acc, r1], as: z1_r}          # = the forward's z1, recomputed
    z1_r = acc * r1
    # specs/llama3_layer_recompute.yaml:140: - {store: z1_r, dtype: bf16}          # rounded as llama3_layer's saved z1
    return {"D": z1_r}


# specs/llama3_layer_recompute.yaml:141: kernel 'dgrad_down_dswiglu'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz1_part": ColVecReduce("zdz1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_dswiglu(acc, c):
    # specs/llama3_layer_recompute.yaml:144: - {load_tile: z1_r}                   # packed (gate, up) pairs, 2F wide
    z1_r = c
    # specs/llama3_layer_recompute.yaml:145: - {dswiglu: acc, z: z1_r, as: [dz1, act_r]}   # dz1 packed like z1; act_r = silu(g)*u recomputed
    z1_r_g, z1_r_u = unpack(z1_r)
    dz1_g, dz1_u, act_r = dswiglu(z1_r_g, z1_r_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/llama3_layer_recompute.yaml:146: - {store: dz1}
    # specs/llama3_layer_recompute.yaml:147: - {store: act_r}
    # specs/llama3_layer_recompute.yaml:148: - {reduce_row: dot, of: [z1_r, dz1], as: zdz1_part}
    # zdz1_part: sum over columns of z1_r * dz1 -> (M, cdiv(8192, tile_N)) partials
    return {"D": dz1, "act_r": act_r, "zdz1_part": z1_r_g * dz1_g + z1_r_u * dz1_u}


# specs/llama3_layer_recompute.yaml:150: kernel 'wgrad_down'
@gemm_epilogue()
def coda_wgrad_down(acc):
    # specs/llama3_layer_recompute.yaml:153: - {store: acc, to: dw_down}
    return {"D": acc}


# specs/llama3_layer_recompute.yaml:154: kernel 'dgrad_gu_norm1'
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
    # specs/llama3_layer_recompute.yaml:157: - {load_tile: x1}
    # specs/llama3_layer_recompute.yaml:158: - {load_col: r1}
    # specs/llama3_layer_recompute.yaml:159: - {load_col: zdz1}
    # specs/llama3_layer_recompute.yaml:160: - {load_row: gamma1}
    # specs/llama3_layer_recompute.yaml:161: - {mul: [x1, r1], as: u1}
    u1 = x1 * r1
    # specs/llama3_layer_recompute.yaml:162: - {mul: [acc, gamma1], as: g_gamma}
    g_gamma = acc * gamma1
    # specs/llama3_layer_recompute.yaml:163: - {mul: [u1, zdz1], as: u_zdz}
    u_zdz = u1 * zdz1
    # specs/llama3_layer_recompute.yaml:164: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_layer_recompute.yaml:165: - {mul: [dxn, r1], as: dx_norm}
    dx_norm = dxn * r1
    # specs/llama3_layer_recompute.yaml:166: - {store: dx_norm, to: dx0, add_to: dx2}    # dx1 (= dx0) = dx2 + norm-1 branch
    # specs/llama3_layer_recompute.yaml:167: - {mul: [u1, gamma1], as: v1}
    v1 = u1 * gamma1
    # specs/llama3_layer_recompute.yaml:168: - {store: v1}
    # specs/llama3_layer_recompute.yaml:169: - {reduce_col: dot, of: [acc, u1], as: dgamma1_part}
    # dgamma1_part: sum over rows of acc * u1 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v1": v1, "dgamma1_part": (acc, u1)}


# specs/llama3_layer_recompute.yaml:171: kernel 'wgrad_gu'
@gemm_epilogue()
def coda_wgrad_gu(acc):
    # specs/llama3_layer_recompute.yaml:174: - {store: acc, to: dw_gu}
    return {"D": acc}


# specs/llama3_layer_recompute.yaml:175: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/llama3_layer_recompute.yaml:178: - {store: acc, to: dy}
    return {"D": acc}


# specs/llama3_layer_recompute.yaml:179: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/llama3_layer_recompute.yaml:182: - {store: acc, to: dw_o}
    return {"D": acc}
