# Generated from tests/primitives/clamp.yaml (spec hash 117d9bfb79ba795f) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_clamp' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue

from coda_spec.lower.kernel_lib import lane_max, lane_min


# tests/primitives/clamp.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/clamp.yaml:13: - {clamp: acc, min: -0.75, max: 0.5, as: y}
    y_max = lane_max(acc, -0.75)
    y = lane_min(y_max, 0.5)
    # tests/primitives/clamp.yaml:14: - {store: y}
    return {"D": y}
