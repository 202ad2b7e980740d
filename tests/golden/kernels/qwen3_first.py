# Generated from specs/qwen3_first.yaml (spec hash dbf807423ab7e215) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'qwen3_first' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, TileLoad


# specs/qwen3_first.yaml:30: kernel 'qkv_proj'
@gemm_epilogue(ops={"r": ColVecLoad("r")})
def coda_qkv_proj(acc, r):
    # specs/qwen3_first.yaml:33: - {load_col: r}
    # specs/qwen3_first.yaml:34: - {mul: [acc, r], as: qkv}              # = rms_norm(x, gamma) @ w_qkv^T
    qkv = acc * r
    # specs/qwen3_first.yaml:35: - {store: qkv}
    return {"D": qkv}


# specs/qwen3_first.yaml:62: kernel 'dgrad_qkv_proj'
@gemm_epilogue(ops={"x": TileLoad("x"), "r": ColVecLoad("r"), "zdz_r": ColVecLoad("zdz_r")})
def coda_dgrad_qkv_proj(acc, x, r, zdz_r):
    # specs/qwen3_first.yaml:65: - {load_tile: x}
    # specs/qwen3_first.yaml:66: - {load_col: r}
    # specs/qwen3_first.yaml:67: - {mul: [x, r], as: u_x}
    u_x = x * r
    # specs/qwen3_first.yaml:68: - {load_col: zdz_r}
    # specs/qwen3_first.yaml:69: - {mul: [u_x, zdz_r], as: mul_x}
    mul_x = u_x * zdz_r
    # specs/qwen3_first.yaml:70: - {mul: [mul_x, r], as: norm_x}
    norm_x = mul_x * r
    # specs/qwen3_first.yaml:71: - {sub: [acc, norm_x], as: d_x_sum}
    d_x_sum = acc - norm_x
    # specs/qwen3_first.yaml:72: - {store: d_x_sum, to: d_x}
    return {"D": d_x_sum}


# specs/qwen3_first.yaml:73: kernel 'wgrad_qkv_proj'
@gemm_epilogue()
def coda_wgrad_qkv_proj(acc):
    # specs/qwen3_first.yaml:76: - {store: acc, to: d_w}
    return {"D": acc}
