# Generated from tests/primitives/cast.yaml (spec hash 47e6be955b5392ac) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_cast' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue

from coda_spec.lower.kernel_lib import round_bf16


# tests/primitives/cast.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/cast.yaml:13: - {cast: acc, dtype: bf16, as: y}
    y = round_bf16(acc)
    # tests/primitives/cast.yaml:14: - {store: y}
    return {"D": y}
