# Generated from tests/primitives/max.yaml (spec hash cbfe234b09b62a92) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_max' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue

from coda_spec.lower.kernel_lib import lane_max


# tests/primitives/max.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/max.yaml:13: - {max: [acc, -0.25], as: y}
    y = lane_max(acc, -0.25)
    # tests/primitives/max.yaml:14: - {store: y}
    return {"D": y}
