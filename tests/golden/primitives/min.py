# Generated from tests/primitives/min.yaml (spec hash e9e5456b374aca84) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_min' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue

from coda_spec.lower.kernel_lib import lane_min


# tests/primitives/min.yaml:10: kernel 'k'
@gemm_epilogue()
def coda_k(acc):
    # tests/primitives/min.yaml:13: - {min: [acc, 0.25], as: y}
    y = lane_min(acc, 0.25)
    # tests/primitives/min.yaml:14: - {store: y}
    return {"D": y}
