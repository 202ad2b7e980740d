# Generated from tests/primitives/load_scalar.yaml (spec hash 66006944383148ea) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_load_scalar' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import Scalar


# tests/primitives/load_scalar.yaml:11: kernel 'k'
@gemm_epilogue(ops={"alpha": Scalar("alpha")})
def coda_k(acc, alpha):
    # tests/primitives/load_scalar.yaml:14: - {load_scalar: alpha}
    # tests/primitives/load_scalar.yaml:15: - {mul: [acc, alpha], as: y}
    y = acc * alpha
    # tests/primitives/load_scalar.yaml:16: - {store: y}
    return {"D": y}
