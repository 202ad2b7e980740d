# Generated from specs/f8_scale.yaml (spec hash 74c5c8009610c3fa) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f8_scale' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import Scalar


# specs/f8_scale.yaml:16: kernel 'scale_immediate'
@gemm_epilogue()
def coda_scale_immediate(acc):
    # specs/f8_scale.yaml:19: - {scale: acc, by: 0.08838834764831845, as: y}   # 1 / sqrt(128)
    y = acc * 0.08838834764831845
    # specs/f8_scale.yaml:20: - {store: y, to: y_imm}
    return {"D": y}


# specs/f8_scale.yaml:21: kernel 'scale_device'
@gemm_epilogue(ops={"alpha": Scalar("alpha")})
def coda_scale_device(acc, alpha):
    # specs/f8_scale.yaml:24: - {load_scalar: alpha}             # one fp32 from device memory
    # specs/f8_scale.yaml:25: - {mul: [acc, alpha], as: y}
    y = acc * alpha
    # specs/f8_scale.yaml:26: - {store: y, to: y_dev}
    return {"D": y}
