# Generated from specs/llama3_lm_head.yaml (spec hash 3003fb0ef3bb8940) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'llama3_lm_head' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import (
    ColVecLoad,
    ColVecReduce,
    RowVecLoad,
    RowVecReduce,
    TileLoad,
    TileStore,
)


# specs/llama3_lm_head.yaml:57: kernel 'lm_head_logits'
@gemm_epilogue(ops={"r2": ColVecLoad("r2")})
def coda_lm_head_logits(acc, r2):
    # specs/llama3_lm_head.yaml:60: - {load_col: r2}
    # specs/llama3_lm_head.yaml:61: - {mul: [acc, r2], as: logits}          # = rms_norm(x2, gamma_f) @ w_lm^T
    logits = acc * r2
    # specs/llama3_lm_head.yaml:62: - {store: logits, dtype: bf16}          # M x V bf16, read by the two host passes below
    return {"D": logits}


# specs/llama3_lm_head.yaml:89: kernel 'dgrad_lm_norm_f'
@gemm_epilogue(
    ops={"x2": TileLoad("x2"), "r2": ColVecLoad("r2"), "gamma_f": RowVecLoad("gamma_f")},
    outputs=(TileStore("dv2"),),
    reduces={
        "zdz2_part": ColVecReduce("zdz2_part", scaled=True),
        "dgamma_f_part": RowVecReduce("dgamma_f_part", scaled=True),
    },
)
def coda_dgrad_lm_norm_f(acc, x2, r2, gamma_f):
    # specs/llama3_lm_head.yaml:92: - {load_tile: x2}
    # specs/llama3_lm_head.yaml:93: - {load_col: r2}
    # specs/llama3_lm_head.yaml:94: - {load_row: gamma_f}
    # specs/llama3_lm_head.yaml:95: - {mul: [x2, r2], as: u2}
    u2 = x2 * r2
    # specs/llama3_lm_head.yaml:96: - {mul: [u2, gamma_f], as: v2}          # recomputed final-norm output
    v2 = u2 * gamma_f
    # specs/llama3_lm_head.yaml:97: - {store: v2, dtype: bf16}              # the B operand of wgrad_lm
    # specs/llama3_lm_head.yaml:98: - {reduce_row: dot, of: [acc, v2], as: zdz2_part}     # sum_D v2 dv2
    # zdz2_part: sum over columns of acc * v2 -> (M, cdiv(2048, tile_N)) partials
    # specs/llama3_lm_head.yaml:99: - {reduce_col: dot, of: [acc, u2], as: dgamma_f_part}
    # dgamma_f_part: sum over rows of acc * u2 -> (cdiv(M, tile_M), 2048) partials
    # specs/llama3_lm_head.yaml:100: - {store: acc, to: dv2, dtype: fp32}    # M x D fp32, read once by norm_f_bwd
    return {"D": v2, "zdz2_part": (acc, v2), "dgamma_f_part": (acc, u2), "dv2": acc}


# specs/llama3_lm_head.yaml:117: kernel 'wgrad_lm'
@gemm_epilogue()
def coda_wgrad_lm(acc):
    # specs/llama3_lm_head.yaml:120: - {store: acc, to: dw_lm, add_to: dw_acc}   # dw_acc += dlogits^T v2 (a TMA reduce-add)
    return {"D": acc}
