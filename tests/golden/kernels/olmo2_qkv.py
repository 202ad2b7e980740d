# Generated from specs/olmo2_qkv.yaml (spec hash 89cd1e07c0b24996) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'olmo2_qkv' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue


# specs/olmo2_qkv.yaml:22: kernel 'qkv'
@gemm_epilogue()
def coda_qkv(acc):
    # specs/olmo2_qkv.yaml:25: - {store: acc, to: z}
    return {"D": acc}


# specs/olmo2_qkv.yaml:42: kernel 'dgrad_qkv'
@gemm_epilogue()
def coda_dgrad_qkv(acc):
    # specs/olmo2_qkv.yaml:45: - {store: acc, to: d_x}
    return {"D": acc}


# specs/olmo2_qkv.yaml:46: kernel 'wgrad_qkv'
@gemm_epilogue()
def coda_wgrad_qkv(acc):
    # specs/olmo2_qkv.yaml:49: - {store: acc, to: d_w_qkv}
    return {"D": acc}
