# Generated from specs/llama3_layer.yaml (spec hash ca57ab200f48f743) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_layer' for QuACK's sm90 GEMM."""

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


# specs/llama3_layer.yaml:47: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/llama3_layer.yaml:50: - {load_tile: x0}
    # specs/llama3_layer.yaml:51: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/llama3_layer.yaml:52: - {load_row: gamma1}
    # specs/llama3_layer.yaml:53: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/llama3_layer.yaml:54: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_layer.yaml:55: - {store: x1}
    # specs/llama3_layer.yaml:56: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/llama3_layer.yaml:58: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/llama3_layer.yaml:61: - {load_col: r1}
    # specs/llama3_layer.yaml:62: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/llama3_layer.yaml:63: - {store: z1}                           # saved pre-activation (for dSwiGLU)
    # specs/llama3_layer.yaml:64: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/llama3_layer.yaml:65: - {store: act}
    return {"D": z1, "act": act}


# specs/llama3_layer.yaml:66: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma2": RowVecLoad("gamma2")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma2):
    # specs/llama3_layer.yaml:69: - {load_tile: x1}
    # specs/llama3_layer.yaml:70: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/llama3_layer.yaml:71: - {load_row: gamma2}
    # specs/llama3_layer.yaml:72: - {mul: [x2, gamma2], as: h2}
    h2 = x2 * gamma2
    # specs/llama3_layer.yaml:73: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_layer.yaml:74: - {store: x2}
    # specs/llama3_layer.yaml:75: - {store: h2}
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/llama3_layer.yaml:77: kernel 'qkv_rope'
@gemm_epilogue(
    ops={"r2": ColVecLoad("r2"), "pos": ColVecLoad("pos"), "freqs": RowVecLoad("freqs")},
    mode="acc_pair",
)
def coda_qkv_rope(acc, r2, pos, freqs):
    # specs/llama3_layer.yaml:80: - {load_col: r2}
    # specs/llama3_layer.yaml:81: - {mul: [acc, r2], as: zq}              # = rms_norm(x2, gamma2) @ w_qkv^T
    zq = acc * r2
    # specs/llama3_layer.yaml:82: - {load_col: pos}
    # specs/llama3_layer.yaml:83: - {load_row: freqs}
    # specs/llama3_layer.yaml:84: - {rope: zq, pos: pos, freqs: freqs, as: qkv}   # (a, b) -> (a cos - b sin, a sin + b cos)
    zq_a, zq_b = unpack(zq)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(zq_a * qkv_cos - zq_b * qkv_sin, zq_a * qkv_sin + zq_b * qkv_cos)
    # specs/llama3_layer.yaml:85: - {store: qkv}
    return {"D": qkv}


# specs/llama3_layer.yaml:124: kernel 'dgrad_qkv_norm2'
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
    # specs/llama3_layer.yaml:127: - {load_tile: x2}
    # specs/llama3_layer.yaml:128: - {load_col: r2}
    # specs/llama3_layer.yaml:129: - {load_col: zdz2}
    # specs/llama3_layer.yaml:130: - {load_row: gamma2}
    # specs/llama3_layer.yaml:131: - {mul: [x2, r2], as: u2}
    u2 = x2 * r2
    # specs/llama3_layer.yaml:132: - {mul: [acc, gamma2], as: g_gamma}
    g_gamma = acc * gamma2
    # specs/llama3_layer.yaml:133: - {mul: [u2, zdz2], as: u_zdz}
    u_zdz = u2 * zdz2
    # specs/llama3_layer.yaml:134: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_layer.yaml:135: - {mul: [dxn, r2], as: dx_norm}
    dx_norm = dxn * r2
    # specs/llama3_layer.yaml:136: - {store: dx_norm, to: dx2, add_to: d_x2}   # dx2 = d_x2 + norm-2 branch
    # specs/llama3_layer.yaml:137: - {mul: [u2, gamma2], as: v2}         # recomputed norm-2 output
    v2 = u2 * gamma2
    # specs/llama3_layer.yaml:138: - {store: v2}
    # specs/llama3_layer.yaml:139: - {reduce_col: dot, of: [acc, u2], as: dgamma2_part}
    # dgamma2_part: sum over rows of acc * u2 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v2": v2, "dgamma2_part": (acc, u2)}


# specs/llama3_layer.yaml:141: kernel 'wgrad_qkv'
@gemm_epilogue()
def coda_wgrad_qkv(acc):
    # specs/llama3_layer.yaml:144: - {store: acc, to: dw_qkv}
    return {"D": acc}


# specs/llama3_layer.yaml:145: kernel 'dgrad_down_dswiglu'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz1_part": ColVecReduce("zdz1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_dswiglu(acc, c):
    # specs/llama3_layer.yaml:148: - {load_tile: z1}                     # packed (gate, up) pairs, 2F wide
    z1 = c
    # specs/llama3_layer.yaml:149: - {dswiglu: acc, z: z1, as: [dz1, act_r]}   # dz1 packed like z1; act_r = silu(g)*u recomputed
    z1_g, z1_u = unpack(z1)
    dz1_g, dz1_u, act_r = dswiglu(z1_g, z1_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/llama3_layer.yaml:150: - {store: dz1}
    # specs/llama3_layer.yaml:151: - {store: act_r}
    # specs/llama3_layer.yaml:152: - {reduce_row: dot, of: [z1, dz1], as: zdz1_part}
    # zdz1_part: sum over columns of z1 * dz1 -> (M, cdiv(8192, tile_N)) partials
    return {"D": dz1, "act_r": act_r, "zdz1_part": z1_g * dz1_g + z1_u * dz1_u}


# specs/llama3_layer.yaml:154: kernel 'wgrad_down'
@gemm_epilogue()
def coda_wgrad_down(acc):
    # specs/llama3_layer.yaml:157: - {store: acc, to: dw_down}
    return {"D": acc}


# specs/llama3_layer.yaml:158: kernel 'dgrad_gu_norm1'
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
    # specs/llama3_layer.yaml:161: - {load_tile: x1}
    # specs/llama3_layer.yaml:162: - {load_col: r1}
    # specs/llama3_layer.yaml:163: - {load_col: zdz1}
    # specs/llama3_layer.yaml:164: - {load_row: gamma1}
    # specs/llama3_layer.yaml:165: - {mul: [x1, r1], as: u1}
    u1 = x1 * r1
    # specs/llama3_layer.yaml:166: - {mul: [acc, gamma1], as: g_gamma}
    g_gamma = acc * gamma1
    # specs/llama3_layer.yaml:167: - {mul: [u1, zdz1], as: u_zdz}
    u_zdz = u1 * zdz1
    # specs/llama3_layer.yaml:168: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_layer.yaml:169: - {mul: [dxn, r1], as: dx_norm}
    dx_norm = dxn * r1
    # specs/llama3_layer.yaml:170: - {store: dx_norm, to: dx0, add_to: dx2}    # dx1 (= dx0) = dx2 + norm-1 branch
    # specs/llama3_layer.yaml:171: - {mul: [u1, gamma1], as: v1}
    v1 = u1 * gamma1
    # specs/llama3_layer.yaml:172: - {store: v1}
    # specs/llama3_layer.yaml:173: - {reduce_col: dot, of: [acc, u1], as: dgamma1_part}
    # dgamma1_part: sum over rows of acc * u1 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v1": v1, "dgamma1_part": (acc, u1)}


# specs/llama3_layer.yaml:175: kernel 'wgrad_gu'
@gemm_epilogue()
def coda_wgrad_gu(acc):
    # specs/llama3_layer.yaml:178: - {store: acc, to: dw_gu}
    return {"D": acc}


# specs/llama3_layer.yaml:179: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/llama3_layer.yaml:182: - {store: acc, to: dy}
    return {"D": acc}


# specs/llama3_layer.yaml:183: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/llama3_layer.yaml:186: - {store: acc, to: dw_o}
    return {"D": acc}
