# Generated from specs/olmo2_attn_out.yaml (spec hash 60a2ad77c74f08c0) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'olmo2_attn_out' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue


# specs/olmo2_attn_out.yaml:16: kernel 'out_proj'
@gemm_epilogue()
def coda_out_proj(acc):
    # specs/olmo2_attn_out.yaml:19: - {store: acc, to: o}
    return {"D": acc}


# specs/olmo2_attn_out.yaml:36: kernel 'dgrad_out_proj'
@gemm_epilogue()
def coda_dgrad_out_proj(acc):
    # specs/olmo2_attn_out.yaml:39: - {store: acc, to: d_y}
    return {"D": acc}


# specs/olmo2_attn_out.yaml:40: kernel 'wgrad_out_proj'
@gemm_epilogue()
def coda_wgrad_out_proj(acc):
    # specs/olmo2_attn_out.yaml:43: - {store: acc, to: d_w_o}
    return {"D": acc}
