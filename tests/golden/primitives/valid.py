# Generated from tests/primitives/valid.yaml (spec hash c33025d4ee89c20e) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_valid' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad

from coda_spec.lower.kernel_lib import select


# tests/primitives/valid.yaml:11: kernel 'k'
@gemm_epilogue(ops={"target": ColVecLoad("target")})
def coda_k(acc, target):
    # tests/primitives/valid.yaml:14: - {valid: target, as: keep}
    keep = select(target != -100.0, 1.0, 0.0)
    # tests/primitives/valid.yaml:15: - {mul: [acc, keep], as: y}
    y = acc * keep
    # tests/primitives/valid.yaml:16: - {store: y}
    return {"D": y}
