# Generated from specs/f6_lse.yaml (spec hash d3b2603e41d7c57c) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f6_lse' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad, ColVecSelect, OnlineLSEReduce

# specs/f6_lse.yaml:16: kernel 'lm_head_lse'
_idx_target = ColVecLoad("target")


@gemm_epilogue(
    outs={
        "lse_part": OnlineLSEReduce("lse_part"),
        "target_logit": ColVecSelect("target_logit", idx_op=_idx_target),
    },
    extra_ops=(_idx_target,),
)
def coda_lm_head_lse(acc):
    # specs/f6_lse.yaml:19: - {reduce_row: logsumexp, of: acc, as: lse_part}     # online (max, sum exp) per N-tile
    # lse_part: logsumexp over columns of acc -> (M, cdiv(32768, tile_N)) partials
    # specs/f6_lse.yaml:20: - {gather_col: acc, index: target, as: target_logit} # 0 on ignored rows
    # specs/f6_lse.yaml:21: - {store: target_logit}            # one fp32 per row
    # target_logit: per row m, acc at column target[m] -> (M,) fp32
    return {"lse_part": acc, "target_logit": acc}
