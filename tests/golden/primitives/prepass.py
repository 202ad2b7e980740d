# Generated from tests/primitives/prepass.yaml (spec hash 2700f6104ffcc724) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_prepass' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue

from coda_spec.lower.quack_ops import GroupStat

# tests/primitives/prepass.yaml:9: kernel 'k'
# ms: mean over 32-column groups of acc * acc
_gs_k_ms = GroupStat("ms", mean=True)


def coda_k_prepass(acc):
    # tests/primitives/prepass.yaml:9: prepass of kernel 'k' (QuACK runs it first,
    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;
    # the values they read are re-computed here from acc and the kernel's loads
    # tests/primitives/prepass.yaml:12: - {prepass: meansq, of: acc, group: head_dim, as: ms}
    ms_in = acc * acc
    return {"ms": ms_in}


@gemm_epilogue(ops={"ms": _gs_k_ms}, prepass=coda_k_prepass, prepass_outs=("ms",))
def coda_k(acc, ms):
    # tests/primitives/prepass.yaml:12: - {prepass: meansq, of: acc, group: head_dim, as: ms}
    # tests/primitives/prepass.yaml:13: - {add: [ms, 1.0e-6], as: ms_eps}
    ms_eps = ms + 1e-06
    # tests/primitives/prepass.yaml:14: - {rsqrt: ms_eps, as: rstd}
    rstd = cute.math.rsqrt(ms_eps)
    # tests/primitives/prepass.yaml:15: - {mul: [acc, rstd], as: y}
    y = acc * rstd
    # tests/primitives/prepass.yaml:16: - {store: y}
    return {"D": y}
