# Generated from specs/gemma3_ffn.yaml (spec hash bf054a669940d47b) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'gemma3_ffn' for QuACK's sm90 GEMM."""

from quack.activation import dgeglu, geglu
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


# specs/gemma3_ffn.yaml:42: kernel 'gate_up_geglu'
@gemm_epilogue(
    ops={"r1": ColVecLoad("r1")},
    outputs=(TileStore("act", gated=True),),
    mode="acc_pair",
)
def coda_gate_up_geglu(acc, r1):
    # specs/gemma3_ffn.yaml:45: - {load_col: r1}
    # specs/gemma3_ffn.yaml:46: - {mul: [acc, r1], as: z}               # = rms_norm(x1, 1 + g_pre) @ w_gu^T
    z = acc * r1
    # specs/gemma3_ffn.yaml:47: - {store: z}                            # saved pre-activation (for dGeGLU)
    # specs/gemma3_ffn.yaml:48: - {geglu: z, as: act}                   # gelu_tanh(gate) * up on adjacent pairs, F wide
    z_g, z_u = unpack(z)
    act = geglu(z_g, z_u)
    # specs/gemma3_ffn.yaml:49: - {store: act}
    return {"D": z, "act": act}


# specs/gemma3_ffn.yaml:50: kernel 'down_stat'
@gemm_epilogue(reduces={"ss2": ColVecReduce("ss2", scaled=True)})
def coda_down_stat(acc):
    # specs/gemma3_ffn.yaml:53: - {reduce_row: sumsq, of: acc, as: ss2}
    # ss2: sum over columns of acc * acc -> (M, cdiv(1152, tile_N)) partials
    return {"ss2": (acc, acc)}


# specs/gemma3_ffn.yaml:55: kernel 'down_proj'
@gemm_epilogue(ops={"r2": ColVecLoad("r2"), "g_post": RowVecLoad("g_post"), "x1": TileLoad("x1")})
def coda_down_proj(acc, r2, g_post, x1):
    # specs/gemma3_ffn.yaml:58: - {load_col: r2}
    # specs/gemma3_ffn.yaml:59: - {mul: [acc, r2], as: dn}
    dn = acc * r2
    # specs/gemma3_ffn.yaml:60: - {load_row: g_post}
    # specs/gemma3_ffn.yaml:61: - {add: [g_post, 1.0], as: gq1}
    gq1 = g_post + 1.0
    # specs/gemma3_ffn.yaml:62: - {mul: [dn, gq1], as: p}
    p = dn * gq1
    # specs/gemma3_ffn.yaml:63: - {load_tile: x1}
    # specs/gemma3_ffn.yaml:64: - {add: [x1, p], as: x2}                # residual add after the norm
    x2 = x1 + p
    # specs/gemma3_ffn.yaml:65: - {store: x2}
    return {"D": x2}


# specs/gemma3_ffn.yaml:90: kernel 'down_proj_bwd'
@gemm_epilogue(
    ops={
        "d_x2": TileLoad("d_x2"),
        "g_post": RowVecLoad("g_post"),
        "r2": ColVecLoad("r2"),
    },
    reduces={
        "dgq1_part": RowVecReduce("dgq1_part", scaled=True),
        "zdz_r2_part": ColVecReduce("zdz_r2_part", scaled=True),
    },
)
def coda_down_proj_bwd(acc, d_x2, g_post, r2):
    # specs/gemma3_ffn.yaml:93: - {load_tile: d_x2}
    # specs/gemma3_ffn.yaml:94: - {load_row: g_post}
    # specs/gemma3_ffn.yaml:95: - {add: [g_post, 1.0], as: gq1}      # recompute line 55: {add: [g_post, 1.0], as: gq1}
    gq1 = g_post + 1.0
    # specs/gemma3_ffn.yaml:96: - {mul: [d_x2, gq1], as: ddn}        # grad of line 56: {mul: [dn, gq1], as: p}
    ddn = d_x2 * gq1
    # specs/gemma3_ffn.yaml:97: - {load_col: r2}
    # specs/gemma3_ffn.yaml:98: - {mul: [acc, r2], as: dn}           # recompute line 53: {mul: [acc, r2], as: dn}
    dn = acc * r2
    # specs/gemma3_ffn.yaml:99: - {reduce_col: dot, of: [d_x2, dn], as: dgq1_part}  # grad of line 56
    # dgq1_part: sum over rows of d_x2 * dn -> (cdiv(M, tile_M), 1152) partials
    # specs/gemma3_ffn.yaml:100: - {reduce_row: dot, of: [dn, ddn], as: zdz_r2_part}  # grad of line 53: {mul: [acc, r2], as: dn}
    # zdz_r2_part: sum over columns of dn * ddn -> (M, cdiv(1152, tile_N)) partials
    # specs/gemma3_ffn.yaml:101: - {mul: [ddn, r2], as: ddn_r}        # grad of line 53
    ddn_r = ddn * r2
    # specs/gemma3_ffn.yaml:102: - {store: ddn_r}
    return {"dgq1_part": (d_x2, dn), "zdz_r2_part": (dn, ddn), "D": ddn_r}


# specs/gemma3_ffn.yaml:105: kernel 'down_stat_bwd'
@gemm_epilogue(ops={"r2": ColVecLoad("r2"), "zdz_r2": ColVecLoad("zdz_r2")})
def coda_down_stat_bwd(acc, r2, zdz_r2):
    # specs/gemma3_ffn.yaml:108: - {load_col: r2}
    # specs/gemma3_ffn.yaml:109: - {mul: [acc, r2], as: u_acc}        # grad of line 47: {reduce_row: sumsq, of: acc, as: ss2}
    u_acc = acc * r2
    # specs/gemma3_ffn.yaml:110: - {load_col: zdz_r2}
    # specs/gemma3_ffn.yaml:111: - {mul: [u_acc, zdz_r2], as: u_zdz_acc}  # grad of line 47
    u_zdz_acc = u_acc * zdz_r2
    # specs/gemma3_ffn.yaml:112: - {mul: [u_zdz_acc, r2], as: norm_acc}  # grad of line 47
    norm_acc = u_zdz_acc * r2
    # specs/gemma3_ffn.yaml:113: - {neg: norm_acc, as: ddown_stat_acc_delta}
    ddown_stat_acc_delta = -norm_acc
    # specs/gemma3_ffn.yaml:114: - {store: ddown_stat_acc_delta, to: ddown_stat_acc, add_to: ddn_r}
    return {"D": ddown_stat_acc_delta}


# specs/gemma3_ffn.yaml:115: kernel 'dgrad_down_stat'
@gemm_epilogue(
    outputs=(TileStore("act_r"),),
    reduces={"zdz_r1_part": ColVecReduce("zdz_r1_part")},
    mode="packed_cd_b16x2",
)
def coda_dgrad_down_stat(acc, c):
    # specs/gemma3_ffn.yaml:118: - {load_tile: z}
    z = c
    # specs/gemma3_ffn.yaml:119: - {dgeglu: acc, z: z, as: [dz, act_r]}  # grad of line 42: {geglu: z, as: act}
    z_g, z_u = unpack(z)
    dz_g, dz_u, act_r = dgeglu(z_g, z_u, acc)
    dz = pack(dz_g, dz_u)
    # specs/gemma3_ffn.yaml:120: - {reduce_row: dot, of: [z, dz], as: zdz_r1_part}  # grad of line 40: {mul: [acc, r1], as: z}
    # zdz_r1_part: sum over columns of z * dz -> (M, cdiv(6912, tile_N)) partials
    # specs/gemma3_ffn.yaml:121: - {store: dz}
    # specs/gemma3_ffn.yaml:122: - {store: act_r}
    return {"zdz_r1_part": z_g * dz_g + z_u * dz_u, "D": dz, "act_r": act_r}


# specs/gemma3_ffn.yaml:124: kernel 'wgrad_down_stat'
@gemm_epilogue()
def coda_wgrad_down_stat(acc):
    # specs/gemma3_ffn.yaml:127: - {store: acc, to: d_w_down}
    return {"D": acc}


# specs/gemma3_ffn.yaml:128: kernel 'dgrad_gate_up_geglu'
@gemm_epilogue(
    ops={
        "r1": ColVecLoad("r1"),
        "x1": TileLoad("x1"),
        "zdz_r1": ColVecLoad("zdz_r1"),
        "g_pre": RowVecLoad("g_pre"),
    },
    outputs=(TileStore("v_h"),),
    reduces={"dgp1_part": RowVecReduce("dgp1_part", scaled=True)},
)
def coda_dgrad_gate_up_geglu(acc, r1, x1, zdz_r1, g_pre):
    # specs/gemma3_ffn.yaml:131: - {load_col: r1}
    # specs/gemma3_ffn.yaml:132: - {mul: [acc, r1], as: dh}           # grad of line 40: {mul: [acc, r1], as: z}
    dh = acc * r1
    # specs/gemma3_ffn.yaml:133: - {load_tile: x1}
    # specs/gemma3_ffn.yaml:134: - {mul: [x1, r1], as: u_x1}          # grad of line 34: {reduce_row: sumsq, of: x1, as: ss1}
    u_x1 = x1 * r1
    # specs/gemma3_ffn.yaml:135: - {load_col: zdz_r1}
    # specs/gemma3_ffn.yaml:136: - {mul: [u_x1, zdz_r1], as: u_zdz_x1}  # grad of line 34
    u_zdz_x1 = u_x1 * zdz_r1
    # specs/gemma3_ffn.yaml:137: - {mul: [u_zdz_x1, r1], as: norm_x1}  # grad of line 34
    norm_x1 = u_zdz_x1 * r1
    # specs/gemma3_ffn.yaml:138: - {load_row: g_pre}
    # specs/gemma3_ffn.yaml:139: - {add: [g_pre, 1.0], as: gp1}       # recompute line 31: {add: [g_pre, 1.0], as: gp1}
    gp1 = g_pre + 1.0
    # specs/gemma3_ffn.yaml:140: - {mul: [dh, gp1], as: dx1}          # grad of line 32: {mul: [x1, gp1], as: h}
    dx1 = dh * gp1
    # specs/gemma3_ffn.yaml:141: - {reduce_col: dot, of: [dh, x1], as: dgp1_part}  # grad of line 32
    # dgp1_part: sum over rows of dh * x1 -> (cdiv(M, tile_M), 1152) partials
    # specs/gemma3_ffn.yaml:142: - {sub: [dx1, norm_x1], as: d_x1_delta}
    d_x1_delta = dx1 - norm_x1
    # specs/gemma3_ffn.yaml:143: - {store: d_x1_delta, to: d_x1, add_to: d_x2}
    # specs/gemma3_ffn.yaml:144: - {mul: [x1, gp1], as: h_r}          # recompute line 32: {mul: [x1, gp1], as: h}
    h_r = x1 * gp1
    # specs/gemma3_ffn.yaml:145: - {mul: [h_r, r1], as: v_h}          # grad of line 40
    v_h = h_r * r1
    # specs/gemma3_ffn.yaml:146: - {store: v_h}
    return {"dgp1_part": (dh, x1), "D": d_x1_delta, "v_h": v_h}


# specs/gemma3_ffn.yaml:148: kernel 'wgrad_gate_up_geglu'
@gemm_epilogue()
def coda_wgrad_gate_up_geglu(acc):
    # specs/gemma3_ffn.yaml:151: - {store: acc, to: d_w_gu}
    return {"D": acc}
