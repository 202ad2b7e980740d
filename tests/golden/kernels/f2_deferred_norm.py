# Generated from specs/f2_deferred_norm.yaml (spec hash 7f683467f605ddd4) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f2_deferred_norm' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad


# specs/f2_deferred_norm.yaml:21: kernel 'deferred_norm_proj'
@gemm_epilogue(ops={"r": ColVecLoad("r")})
def coda_deferred_norm_proj(acc, r):
    # specs/f2_deferred_norm.yaml:24: - {load_col: r}                    # one fp32 per row
    # specs/f2_deferred_norm.yaml:25: - {mul: [acc, r], as: out}         # diag(r) (h W^T)
    out = acc * r
    # specs/f2_deferred_norm.yaml:26: - {store: out}
    return {"D": out}
