# Generated from specs/f7_qkv_head_sumsq.yaml (spec hash 8f17d648294c2439) by coda; do not edit:
# change the spec and rebuild. Calls: lowered.json; tool versions: manifest.json.
"""Epilogues of chain 'f7_qkv_head_sumsq' for QuACK's sm90 GEMM."""

from quack.epilogue.frontend import gemm_epilogue
from quack.epilogue.ops import ColVecLoad

from coda_spec.lower.quack_ops import GroupStat

# specs/f7_qkv_head_sumsq.yaml:23: kernel 'qkv_head_sumsq'
# head_ss_stat: sum over 128-column groups of qkv * qkv
_gs_qkv_head_sumsq_head_ss_stat = GroupStat("head_ss_stat")


def coda_qkv_head_sumsq_prepass(acc, r):
    # specs/f7_qkv_head_sumsq.yaml:23: prepass of kernel 'qkv_head_sumsq' (QuACK runs it first,
    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;
    # the values they read are re-computed here from acc and the kernel's loads
    # specs/f7_qkv_head_sumsq.yaml:26: - {load_col: r}
    # specs/f7_qkv_head_sumsq.yaml:27: - {mul: [acc, r], as: qkv}         # deferred input norm
    qkv = acc * r
    # specs/f7_qkv_head_sumsq.yaml:29: - {reduce_row: sumsq, of: qkv, group: head_dim, as: head_ss}   # M x (3D/head_dim)
    head_ss_stat_in = qkv * qkv
    return {"head_ss_stat": head_ss_stat_in}


@gemm_epilogue(
    ops={"r": ColVecLoad("r"), "head_ss_stat": _gs_qkv_head_sumsq_head_ss_stat},
    extra_ops=(_gs_qkv_head_sumsq_head_ss_stat.out("head_ss"),),
    prepass=coda_qkv_head_sumsq_prepass,
    prepass_outs=("head_ss_stat",),
)
def coda_qkv_head_sumsq(acc, r, head_ss_stat):
    # specs/f7_qkv_head_sumsq.yaml:26: - {load_col: r}
    # specs/f7_qkv_head_sumsq.yaml:27: - {mul: [acc, r], as: qkv}         # deferred input norm
    qkv = acc * r
    # specs/f7_qkv_head_sumsq.yaml:28: - {store: qkv}
    # specs/f7_qkv_head_sumsq.yaml:29: - {reduce_row: sumsq, of: qkv, group: head_dim, as: head_ss}   # M x (3D/head_dim)
    # head_ss: sum over 128-column groups of qkv * qkv -> (M, 96) fp32 by the prepass (head_ss_stat unused)
    return {"D": qkv}
