# Generated from tests/primitives/softmax_row.yaml (spec hash d3f91aa1c3066be9) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'prim_softmax_row' for QuACK's sm90 GEMM."""

import cutlass.cute as cute
from quack.epilogue.frontend import gemm_epilogue

from coda_spec.lower.quack_ops import GroupStat

# tests/primitives/softmax_row.yaml:9: kernel 'k'
# p_lse: logsumexp over 128-column groups of acc
_gs_k_p_lse = GroupStat("p_lse", combine="lse")


def coda_k_prepass(acc):
    # tests/primitives/softmax_row.yaml:9: prepass of kernel 'k' (QuACK runs it first,
    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;
    # the values they read are re-computed here from acc and the kernel's loads
    # tests/primitives/softmax_row.yaml:12: - {softmax_row: acc, as: p}
    p_lse_in = acc
    return {"p_lse": p_lse_in}


@gemm_epilogue(ops={"p_lse": _gs_k_p_lse}, prepass=coda_k_prepass, prepass_outs=("p_lse",))
def coda_k(acc, p_lse):
    # tests/primitives/softmax_row.yaml:12: - {softmax_row: acc, as: p}
    p = cute.math.exp(acc - p_lse)
    # tests/primitives/softmax_row.yaml:13: - {store: p}
    return {"D": p}
