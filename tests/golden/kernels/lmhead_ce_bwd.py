# Generated from tests/specs_extra/lmhead_ce_bwd.yaml (spec hash b785a99723ae28a0) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'lmhead_ce_bwd' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, ColVecReduce, RowVecLoad

from coda_spec.lower.kernel_lib import select


# tests/specs_extra/lmhead_ce_bwd.yaml:31: kernel 'lm_head_ce_bwd'
@gemm_epilogue(
    ops={
        "r": ColVecLoad("r"),
        "lse": ColVecLoad("lse"),
        "d_lse": ColVecLoad("d_lse"),
        "columns": RowVecLoad("columns"),
        "target": ColVecLoad("target"),
        "d_tl": ColVecLoad("d_tl"),
    },
    reduces={"zdz_part": ColVecReduce("zdz_part", scaled=True)},
)
def coda_lm_head_ce_bwd(acc, r, lse, d_lse, columns, target, d_tl):
    # tests/specs_extra/lmhead_ce_bwd.yaml:34: - {load_col: r}
    # tests/specs_extra/lmhead_ce_bwd.yaml:35: - {mul: [acc, r], as: logits}      # deferred final norm
    logits = acc * r
    # tests/specs_extra/lmhead_ce_bwd.yaml:36: - {load_col: lse}
    # tests/specs_extra/lmhead_ce_bwd.yaml:37: - {sub: [logits, lse], as: shifted}
    shifted = logits - lse
    # tests/specs_extra/lmhead_ce_bwd.yaml:38: - {exp: shifted, as: p}            # softmax, from the forward's lse
    p = cute.math.exp(shifted)
    # tests/specs_extra/lmhead_ce_bwd.yaml:39: - {load_col: d_lse}
    # tests/specs_extra/lmhead_ce_bwd.yaml:40: - {mul: [p, d_lse], as: dp}
    dp = p * d_lse
    # tests/specs_extra/lmhead_ce_bwd.yaml:41: - {onehot: target, as: y}          # 1 at column target[m]; 0 on ignored rows
    y = select(columns == target, 1.0, 0.0)
    # tests/specs_extra/lmhead_ce_bwd.yaml:42: - {load_col: d_tl}
    # tests/specs_extra/lmhead_ce_bwd.yaml:43: - {mul: [y, d_tl], as: dy}
    dy = y * d_tl
    # tests/specs_extra/lmhead_ce_bwd.yaml:44: - {add: [dp, dy], as: dlogits}
    dlogits = dp + dy
    # tests/specs_extra/lmhead_ce_bwd.yaml:45: - {store: dlogits, dtype: bf16}
    # tests/specs_extra/lmhead_ce_bwd.yaml:46: - {reduce_row: dot, of: [logits, dlogits], as: zdz_part}   # per N-tile partials
    # zdz_part: sum over columns of logits * dlogits -> (M, cdiv(32768, tile_N)) partials
    return {"D": dlogits, "zdz_part": (logits, dlogits)}
