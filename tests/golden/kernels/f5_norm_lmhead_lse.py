# Generated from specs/f5_norm_lmhead_lse.yaml (spec hash 8b0bcc9bd8b76718) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f5_norm_lmhead_lse' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, ColVecSelect, OnlineLSEReduce

# specs/f5_norm_lmhead_lse.yaml:24: kernel 'lm_head_lse'
_idx_target = ColVecLoad("target")


@gemm_epilogue(
    ops={"r": ColVecLoad("r")},
    outs={
        "lse_part": OnlineLSEReduce("lse_part"),
        "target_logit": ColVecSelect("target_logit", idx_op=_idx_target),
    },
    extra_ops=(_idx_target,),
)
def coda_lm_head_lse(acc, r):
    # specs/f5_norm_lmhead_lse.yaml:27: - {load_col: r}
    # specs/f5_norm_lmhead_lse.yaml:28: - {mul: [acc, r], as: logits}      # deferred final norm
    logits = acc * r
    # specs/f5_norm_lmhead_lse.yaml:29: - {reduce_row: logsumexp, of: logits, as: lse_part}   # online (max, sum exp) per N-tile
    # lse_part: logsumexp over columns of logits -> (M, cdiv(32768, tile_N)) partials
    # specs/f5_norm_lmhead_lse.yaml:30: - {gather_col: logits, index: target, as: target_logit}  # 0 on ignored rows
    # specs/f5_norm_lmhead_lse.yaml:31: - {store: target_logit}            # one fp32 per row
    # target_logit: per row m, logits at column target[m] -> (M,) fp32
    return {"lse_part": logits, "target_logit": logits}
