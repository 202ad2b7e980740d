# Generated from specs/llama3_first.yaml (spec hash d1d214eb9515ce86) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_first' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.math import pack, unpack
from quack.epilogue.ops import ColVecLoad, RowVecLoad, RowVecReduce, TileLoad, TileStore

from coda_spec.lower.quack_private import angle_turns, sincos_turns


# specs/llama3_first.yaml:53: kernel 'qkv_rope'
@gemm_epilogue(
    ops={"r": ColVecLoad("r"), "pos": ColVecLoad("pos"), "freqs": RowVecLoad("freqs")},
    mode="acc_pair",
)
def coda_qkv_rope(acc, r, pos, freqs):
    # specs/llama3_first.yaml:56: - {load_col: r}
    # specs/llama3_first.yaml:57: - {mul: [acc, r], as: zq}               # = rms_norm(x, gamma) @ w_qkv^T
    zq = acc * r
    # specs/llama3_first.yaml:58: - {load_col: pos}
    # specs/llama3_first.yaml:59: - {load_row: freqs}
    # specs/llama3_first.yaml:60: - {rope: zq, pos: pos, freqs: freqs, as: qkv}   # (a, b) -> (a cos - b sin, a sin + b cos)
    zq_a, zq_b = unpack(zq)
    qkv_sin, qkv_cos = sincos_turns(*angle_turns(pos, freqs))
    qkv = pack(zq_a * qkv_cos - zq_b * qkv_sin, zq_a * qkv_sin + zq_b * qkv_cos)
    # specs/llama3_first.yaml:61: - {store: qkv}
    return {"D": qkv}


# specs/llama3_first.yaml:89: kernel 'dgrad_qkv_norm'
@gemm_epilogue(
    ops={
        "x": TileLoad("x"),
        "r": ColVecLoad("r"),
        "zdz": ColVecLoad("zdz"),
        "gamma": RowVecLoad("gamma"),
    },
    outputs=(TileStore("v"),),
    reduces={"dgamma_part": RowVecReduce("dgamma_part", scaled=True)},
)
def coda_dgrad_qkv_norm(acc, x, r, zdz, gamma):
    # specs/llama3_first.yaml:92: - {load_tile: x}
    # specs/llama3_first.yaml:93: - {load_col: r}
    # specs/llama3_first.yaml:94: - {load_col: zdz}
    # specs/llama3_first.yaml:95: - {load_row: gamma}
    # specs/llama3_first.yaml:96: - {mul: [x, r], as: u}
    u = x * r
    # specs/llama3_first.yaml:97: - {mul: [acc, gamma], as: g_gamma}
    g_gamma = acc * gamma
    # specs/llama3_first.yaml:98: - {mul: [u, zdz], as: u_zdz}
    u_zdz = u * zdz
    # specs/llama3_first.yaml:99: - {sub: [g_gamma, u_zdz], as: dxn}
    dxn = g_gamma - u_zdz
    # specs/llama3_first.yaml:100: - {mul: [dxn, r], as: dx_norm}
    dx_norm = dxn * r
    # specs/llama3_first.yaml:101: - {store: dx_norm, to: dx}            # the norm branch; autograd adds the residual path
    # specs/llama3_first.yaml:102: - {mul: [u, gamma], as: v}            # recomputed norm output
    v = u * gamma
    # specs/llama3_first.yaml:103: - {store: v}
    # specs/llama3_first.yaml:104: - {reduce_col: dot, of: [acc, u], as: dgamma_part}
    # dgamma_part: sum over rows of acc * u -> (cdiv(M, tile_M), 2048) partials
    return {"D": dx_norm, "v": v, "dgamma_part": (acc, u)}


# specs/llama3_first.yaml:106: kernel 'wgrad_qkv'
@gemm_epilogue()
def coda_wgrad_qkv(acc):
    # specs/llama3_first.yaml:109: - {store: acc, to: dw_qkv}
    return {"D": acc}
