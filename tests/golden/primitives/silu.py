# Generated from tests/primitives/silu.yaml (spec hash cb7d239ca87fdc3f) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_silu' for QuACK's sm90 GEMM."""

from quack.activation import silu
from quack.epilogue.frontend import gemm_epilogue


# tests/primitives/silu.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/silu.yaml:13: - {silu: acc, as: y}
    y = silu(acc)
    # tests/primitives/silu.yaml:14: - {store: y}
    return {"D": y}
