# Generated from specs/llama3_last.yaml (spec hash 171a400c13328bd5) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_last' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.activation import dswiglu, swiglu
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import (
    ColVecLoad,
    ColVecReduce,
    ColVecSelect,
    OnlineLSEReduce,
    RowVecLoad,
    RowVecReduce,
    TileLoad,
    TileStore,
)

from coda_spec.lower.kernel_lib import select


# specs/llama3_last.yaml:37: kernel 'out_proj'
@gemm_epilogue(
    ops={"x0": TileLoad("x0"), "gamma1": RowVecLoad("gamma1")},
    outputs=(TileStore("h1"),),
    reduces={"ss1": ColVecReduce("ss1", scaled=True)},
)
def coda_out_proj(acc, x0, gamma1):
    # specs/llama3_last.yaml:40: - {load_tile: x0}
    # specs/llama3_last.yaml:41: - {add: [acc, x0], as: x1}              # residual add
    x1 = acc + x0
    # specs/llama3_last.yaml:42: - {load_row: gamma1}
    # specs/llama3_last.yaml:43: - {mul: [x1, gamma1], as: h1}           # norm 1 input with gamma, row scale deferred
    h1 = x1 * gamma1
    # specs/llama3_last.yaml:44: - {reduce_row: sumsq, of: x1, as: ss1}
    # ss1: sum over columns of x1 * x1 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_last.yaml:45: - {store: x1}
    # specs/llama3_last.yaml:46: - {store: h1}
    return {"ss1": (x1, x1), "D": x1, "h1": h1}


# specs/llama3_last.yaml:48: kernel 'gate_up'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up(acc, r1):
    # specs/llama3_last.yaml:51: - {load_col: r1}
    # specs/llama3_last.yaml:52: - {mul: [acc, r1], as: z1}              # = rms_norm(x1, gamma1) @ w_gu^T
    z1 = acc * r1
    # specs/llama3_last.yaml:53: - {store: z1}                           # saved pre-activation (for dSwiGLU)
    # specs/llama3_last.yaml:54: - {swiglu: z1, as: act}                 # silu(gate) * up on adjacent pairs, F wide
    z1_g, z1_u = unpack(z1)
    act = swiglu(z1_g, z1_u)
    # specs/llama3_last.yaml:55: - {store: act}
    return {"D": z1, "act": act}


# specs/llama3_last.yaml:56: kernel 'down_proj'
@gemm_epilogue(
    ops={"x1": TileLoad("x1"), "gamma_f": RowVecLoad("gamma_f")},
    outputs=(TileStore("h2"),),
    reduces={"ss2": ColVecReduce("ss2", scaled=True)},
)
def coda_down_proj(acc, x1, gamma_f):
    # specs/llama3_last.yaml:59: - {load_tile: x1}
    # specs/llama3_last.yaml:60: - {add: [acc, x1], as: x2}
    x2 = acc + x1
    # specs/llama3_last.yaml:61: - {load_row: gamma_f}
    # specs/llama3_last.yaml:62: - {mul: [x2, gamma_f], as: h2}          # final norm input with gamma, row scale deferred
    h2 = x2 * gamma_f
    # specs/llama3_last.yaml:63: - {reduce_row: sumsq, of: x2, as: ss2}
    # ss2: sum over columns of x2 * x2 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_last.yaml:64: - {store: x2}
    # specs/llama3_last.yaml:65: - {store: h2}                           # saved: the backward's logits GEMM reads it again
    return {"ss2": (x2, x2), "D": x2, "h2": h2}


# specs/llama3_last.yaml:67: kernel 'lm_head_lse'
_idx_target = ColVecLoad("target")


@gemm_epilogue(
    ops={"r2": ColVecLoad("r2")},
    outs={
        "lse_part": OnlineLSEReduce("lse_part"),
        "target_logit": ColVecSelect("target_logit", idx_op=_idx_target),
    },
    extra_ops=(_idx_target,),
)
def coda_lm_head_lse(acc, r2):
    # specs/llama3_last.yaml:70: - {load_col: r2}
    # specs/llama3_last.yaml:71: - {mul: [acc, r2], as: logits}          # = rms_norm(x2, gamma_f) @ w_lm^T
    logits = acc * r2
    # specs/llama3_last.yaml:72: - {reduce_row: logsumexp, of: logits, as: lse_part}       # online (max, sum exp) per N-tile
    # lse_part: logsumexp over columns of logits -> (M, cdiv(128256, tile_N)) partials
    # specs/llama3_last.yaml:73: - {gather_col: logits, index: target, as: target_logit}   # 0 on ignored rows
    # specs/llama3_last.yaml:74: - {store: target_logit}                 # one fp32 per row
    # target_logit: per row m, logits at column target[m] -> (M,) fp32
    return {"lse_part": logits, "target_logit": logits}


# specs/llama3_last.yaml:106: kernel 'lm_head_ce_bwd'
@gemm_epilogue(
    ops={
        "r2": ColVecLoad("r2"),
        "lse": ColVecLoad("lse"),
        "d_lse": ColVecLoad("d_lse"),
        "columns": RowVecLoad("columns"),
        "target": ColVecLoad("target"),
        "d_target_logit": ColVecLoad("d_target_logit"),
    },
    reduces={"zdz2_part": ColVecReduce("zdz2_part", scaled=True)},
)
def coda_lm_head_ce_bwd(acc, r2, lse, d_lse, columns, target, d_target_logit):
    # specs/llama3_last.yaml:109: - {load_col: r2}
    # specs/llama3_last.yaml:110: - {mul: [acc, r2], as: logits}        # the forward's logits, recomputed
    logits = acc * r2
    # specs/llama3_last.yaml:111: - {load_col: lse}
    # specs/llama3_last.yaml:112: - {sub: [logits, lse], as: shifted}
    shifted = logits - lse
    # specs/llama3_last.yaml:113: - {exp: shifted, as: p}               # softmax, from the saved lse
    p = cute.math.exp(shifted)
    # specs/llama3_last.yaml:114: - {load_col: d_lse}
    # specs/llama3_last.yaml:115: - {mul: [p, d_lse], as: dl_lse}       # d lse / d logits = softmax
    dl_lse = p * d_lse
    # specs/llama3_last.yaml:116: - {onehot: target, as: oh}            # all zero on ignored rows
    oh = select(columns == target, 1.0, 0.0)
    # specs/llama3_last.yaml:117: - {load_col: d_target_logit}
    # specs/llama3_last.yaml:118: - {mul: [oh, d_target_logit], as: dl_pick}   # d target_logit / d logits = onehot
    dl_pick = oh * d_target_logit
    # specs/llama3_last.yaml:119: - {add: [dl_lse, dl_pick], as: dlogits}
    dlogits = dl_lse + dl_pick
    # specs/llama3_last.yaml:120: - {store: dlogits, dtype: bf16}       # M x V bf16, the A operand of the next two GEMMs
    # specs/llama3_last.yaml:121: - {reduce_row: dot, of: [logits, dlogits], as: zdz2_part}   # sum_k z_k dz_k
    # zdz2_part: sum over columns of logits * dlogits -> (M, cdiv(128256, tile_N)) partials
    return {"D": dlogits, "zdz2_part": (logits, dlogits)}


# specs/llama3_last.yaml:123: kernel 'dgrad_lm_norm_f'
@gemm_epilogue(
    ops={
        "x2": TileLoad("x2"),
        "r2": ColVecLoad("r2"),
        "zdz2": ColVecLoad("zdz2"),
        "gamma_f": RowVecLoad("gamma_f"),
    },
    outputs=(TileStore("v2"),),
    reduces={"dgamma_f_part": RowVecReduce("dgamma_f_part", scaled=True)},
)
def coda_dgrad_lm_norm_f(acc, x2, r2, zdz2, gamma_f):
    # specs/llama3_last.yaml:126: - {load_tile: x2}
    # specs/llama3_last.yaml:127: - {load_col: r2}
    # specs/llama3_last.yaml:128: - {load_col: zdz2}
    # specs/llama3_last.yaml:129: - {load_row: gamma_f}
    # specs/llama3_last.yaml:130: - {mul: [x2, r2], as: u2}
    u2 = x2 * r2
    # specs/llama3_last.yaml:131: - {mul: [acc, gamma_f], as: g_gamma}
    g_gamma = acc * gamma_f
    # specs/llama3_last.yaml:132: - {mul: [u2, zdz2], as: u_zdz}
    u_zdz = u2 * zdz2
    # specs/llama3_last.yaml:133: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_last.yaml:134: - {mul: [dxn, r2], as: dx_norm}
    dx_norm = dxn * r2
    # specs/llama3_last.yaml:135: - {store: dx_norm, to: dx2}           # x2 feeds only the final norm
    # specs/llama3_last.yaml:136: - {mul: [u2, gamma_f], as: v2}        # recomputed final-norm output
    v2 = u2 * gamma_f
    # specs/llama3_last.yaml:137: - {store: v2}
    # specs/llama3_last.yaml:138: - {reduce_col: dot, of: [acc, u2], as: dgamma_f_part}
    # dgamma_f_part: sum over rows of acc * u2 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v2": v2, "dgamma_f_part": (acc, u2)}


# specs/llama3_last.yaml:140: kernel 'wgrad_lm'
@gemm_epilogue()
def coda_wgrad_lm(acc):
    # specs/llama3_last.yaml:143: - {store: acc, to: dw_lm}
    return {"D": acc}


# specs/llama3_last.yaml:144: kernel 'dgrad_down_dswiglu'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz1_part": ColVecReduce("zdz1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_dswiglu(acc, c):
    # specs/llama3_last.yaml:147: - {load_tile: z1}                     # packed (gate, up) pairs, 2F wide
    z1 = c
    # specs/llama3_last.yaml:148: - {dswiglu: acc, z: z1, as: [dz1, act_r]}   # dz1 packed like z1; act_r = silu(g)*u recomputed
    z1_g, z1_u = unpack(z1)
    dz1_g, dz1_u, act_r = dswiglu(z1_g, z1_u, acc)
    dz1 = pack(dz1_g, dz1_u)
    # specs/llama3_last.yaml:149: - {store: dz1}
    # specs/llama3_last.yaml:150: - {store: act_r}
    # specs/llama3_last.yaml:151: - {reduce_row: dot, of: [z1, dz1], as: zdz1_part}
    # zdz1_part: sum over columns of z1 * dz1 -> (M, cdiv(8192, tile_N)) partials
    return {"D": dz1, "act_r": act_r, "zdz1_part": z1_g * dz1_g + z1_u * dz1_u}


# specs/llama3_last.yaml:153: kernel 'wgrad_down'
@gemm_epilogue()
def coda_wgrad_down(acc):
    # specs/llama3_last.yaml:156: - {store: acc, to: dw_down}
    return {"D": acc}


# specs/llama3_last.yaml:157: kernel 'dgrad_gu_norm1'
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
    # specs/llama3_last.yaml:160: - {load_tile: x1}
    # specs/llama3_last.yaml:161: - {load_col: r1}
    # specs/llama3_last.yaml:162: - {load_col: zdz1}
    # specs/llama3_last.yaml:163: - {load_row: gamma1}
    # specs/llama3_last.yaml:164: - {mul: [x1, r1], as: u1}
    u1 = x1 * r1
    # specs/llama3_last.yaml:165: - {mul: [acc, gamma1], as: g_gamma}
    g_gamma = acc * gamma1
    # specs/llama3_last.yaml:166: - {mul: [u1, zdz1], as: u_zdz}
    u_zdz = u1 * zdz1
    # specs/llama3_last.yaml:167: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_last.yaml:168: - {mul: [dxn, r1], as: dx_norm}
    dx_norm = dxn * r1
    # specs/llama3_last.yaml:169: - {store: dx_norm, to: dx0, add_to: dx2}    # dx1 (= dx0) = dx2 + norm-1 branch
    # specs/llama3_last.yaml:170: - {mul: [u1, gamma1], as: v1}
    v1 = u1 * gamma1
    # specs/llama3_last.yaml:171: - {store: v1}
    # specs/llama3_last.yaml:172: - {reduce_col: dot, of: [acc, u1], as: dgamma1_part}
    # dgamma1_part: sum over rows of acc * u1 -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v1": v1, "dgamma1_part": (acc, u1)}


# specs/llama3_last.yaml:174: kernel 'wgrad_gu'
@gemm_epilogue()
def coda_wgrad_gu(acc):
    # specs/llama3_last.yaml:177: - {store: acc, to: dw_gu}
    return {"D": acc}


# specs/llama3_last.yaml:178: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/llama3_last.yaml:181: - {store: acc, to: dy}
    return {"D": acc}


# specs/llama3_last.yaml:182: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/llama3_last.yaml:185: - {store: acc, to: dw_o}
    return {"D": acc}
