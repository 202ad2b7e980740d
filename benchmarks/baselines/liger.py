"""The Liger Kernel baselines of ``coda bench``: cuBLAS GEMMs plus Liger's kernels, per chain.

Layer map: coda_spec.bench.baselines (``liger``) -> here -> coda_spec.bench.baselines (the
:class:`Baseline` contract) and ``.common`` (the shared helpers); ``liger_kernel`` (and triton)
imported only inside the functions, so this module imports on a machine without Liger and
without a GPU. The contract, and why Liger gets the
setup it gets (its own layouts, tables and in-place kernels), are in this package's ``__init__``.

:func:`liger` returns None for a chain Liger has no op for (``f8_scale``), for a spec outside
the catalogue, where the chain's heads do not fit, and when ``liger_kernel`` does not import.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

import torch

from coda_spec.bench.baselines import Baseline, Impl, bind

from .common import EPS, IGNORE

ROPE_HEAD_DIM = 128  # Liger's RoPE needs heads; specs without a head_dim dim use Llama's
_LIGER_LLAMA_CASTING = 0  # liger_kernel's "llama" casting mode, as its backward kernels take it


# -- Liger layouts -------------------------------------------------------------------------------
def halves_index(width: int) -> torch.Tensor:
    """Gate|up halves from interleaved pairs: ``liger = spec[..., halves_index(2F)]`` for
    columns of z/dz, ``w_liger = w_gu[halves_index(2F)]`` for the weight's rows."""
    return torch.cat((torch.arange(0, width, 2), torch.arange(1, width, 2)))


def rotate_half_index(width: int, rotated: int, head_dim: int) -> torch.Tensor:
    """HF's rotate-half order from Llama's adjacent rotary pairs: within each head of the first
    ``rotated`` columns, the pairs' first elements then their second; the rest (v) unchanged.
    ``liger = spec[..., index]`` for columns, ``w[index]`` for a projection's rows."""
    heads = torch.arange(rotated).view(-1, head_dim // 2, 2).transpose(1, 2).reshape(-1)
    return torch.cat((heads, torch.arange(rotated, width)))


def _head_dim(sizes: dict) -> int:
    return sizes.get("head_dim", ROPE_HEAD_DIM)


def _liger_rope_tables(t: dict, hd: int) -> dict:
    """Liger/HF cos and sin, (1, M, head_dim): one inv_freq table (freqs of the first head)
    duplicated over both halves, shared by every q and k head."""
    theta = t["pos"][:, None].to(t["freqs"].dtype) * t["freqs"][None, : hd // 2]
    emb = torch.cat((theta, theta), -1)[None]
    return {"_cos": emb.cos(), "_sin": emb.sin()}


def _liger_rope_(q, k, cos, sin, backward: bool = False) -> None:
    """Liger's RoPE kernel in place on q (M, heads*hd) and k (M, heads*hd): row-major views with
    any row stride, e.g. column blocks of one fused QKV output (what ``rope_forward`` launches,
    without its ``.contiguous()`` copies of such views)."""
    import triton
    from liger_kernel.ops.rope import _triton_rope

    hd = cos.shape[-1]
    m, n_q, n_k = q.shape[0], q.shape[1] // hd, k.shape[1] // hd
    pad_q, pad_k, pad_hd = (triton.next_power_of_2(n) for n in (n_q, n_k, hd))
    _triton_rope[(m,)](
        q, q.stride(0), k, k.stride(0), cos, cos.stride(-2), sin, sin.stride(-2),
        m, 1, 1, n_q, n_k, hd, pad_q, pad_k, pad_hd, pad_hd, hd,
        BLOCK_SIZE=max(pad_q, pad_k), BACKWARD_PASS=backward,
    )  # fmt: skip


class _LigerRopeQKV(torch.autograd.Function):
    """Liger's RoPE in place on the q and k blocks (the first ``2 * d`` columns) of a fused QKV
    output; backward rotates a copy of the incoming gradient (the driver owns that tensor)."""

    @staticmethod
    def forward(ctx, qkv, cos, sin, d):
        _liger_rope_(qkv[:, :d], qkv[:, d : 2 * d], cos, sin)
        ctx.mark_dirty(qkv)
        ctx.save_for_backward(cos, sin)
        ctx.d = d
        return qkv

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        d = ctx.d
        g = grad.clone(memory_format=torch.contiguous_format)
        _liger_rope_(g[:, :d], g[:, d : 2 * d], cos, sin, backward=True)
        return g, None, None, None


def _liger_rms(x, weight=None):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    return LigerRMSNormFunction.apply(x, weight, EPS)


def _liger_add_rms(x, residual, gamma):
    """(normalized, x + residual, rstd) from Liger's fused add+RMSNorm forward."""
    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward

    y, s, rstd, *_ = fused_add_rms_norm_forward(x, residual, gamma, EPS, 0.0, "llama")
    return y, s, rstd


def _liger_lm_loss(x, w_lm, target):
    """Per-row cross-entropy of x @ w_lm^T with LigerFusedLinearCrossEntropy (reduction 'none',
    no gradient: the chunked GEMM + CE kernel, logits never whole)."""
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    with torch.no_grad():
        return LigerFusedLinearCrossEntropyFunction.apply(
            x, w_lm, target, None, None, IGNORE, 0.0, 0.0, "none"
        )[0]


def _liger_swiglu(z):
    from liger_kernel.ops.swiglu import swiglu_fused_gate_up_forward

    return swiglu_fused_gate_up_forward(z)[1]


# -- Liger: prepare ------------------------------------------------------------------------------
def _prep_w_gu(t, sizes):
    """The gate/up weight's rows in gate|up halves order."""
    with torch.no_grad():
        w = t["w_gu"]
        return {**t, "w_gu": w[halves_index(w.shape[0]).to(w.device)]}


def _prep_rope_weight(t, sizes, weight="w_qkv"):
    """The fused QKV weight's q/k rows in rotate-half order per head, and Liger's tables."""
    hd, d = _head_dim(sizes), sizes["D"]
    with torch.no_grad():
        w = t[weight]
        idx = rotate_half_index(w.shape[0], 2 * d, hd).to(w.device)
        return {**t, weight: w[idx], **_liger_rope_tables(t, hd)}


def _prep_f7_qk(t, sizes):
    hd = sizes["head_dim"]
    with torch.no_grad():
        w = t["w_qk"]
        idx = rotate_half_index(w.shape[0], w.shape[0], hd).to(w.device)
        return {**t, "w_qk": w[idx], "wn": t["wn"][idx], **_liger_rope_tables(t, hd)}


def _prep_llama(t, sizes):
    return _prep_rope_weight(_prep_w_gu(t, sizes), sizes)


def _prep_b2(t, sizes):
    """The saved z in gate|up halves, as Liger's SwiGLU forward would have saved it."""
    with torch.no_grad():
        z = t["z"]
        return {**t, "z": z[:, halves_index(z.shape[1]).to(z.device)]}


def _prep_b3(t, sizes):
    """dy in rotate-half order: a private copy, which fn's in-place kernel consumes."""
    hd, d = _head_dim(sizes), sizes["D"]
    with torch.no_grad():
        dy = t["dy"]
        dy = dy[:, rotate_half_index(dy.shape[1], 2 * d, hd).to(dy.device)]
        return {**t, "dy": dy, **_liger_rope_tables(t, hd)}


def _prep_b4(t, sizes):
    """A private logits copy (Liger writes the gradient over it; requires_grad makes its kernel
    compute the gradient) and dloss in the loss's dtype, as autograd would hand it over."""
    with torch.no_grad():
        logits = t["logits"].detach().clone().requires_grad_(True)
        return {**t, "logits": logits, "dloss": t["dloss"].to(logits.dtype)}


# -- Liger: one function per chain it has ops for -------------------------------------------------
def _liger_f1(t, sizes):
    _, x1, r = _liger_add_rms(torch.mm(t["y"], t["w_o"].T), t["x"], t["gamma"])
    return {"x1": x1, "r": r}


def _liger_f2(t, sizes):
    return {"out": torch.mm(_liger_rms(t["h"]), t["w"].T)}


def _liger_f3(t, sizes):
    z = torch.mm(_liger_rms(t["h"]), t["w_gu"].T)
    return {"z": z, "out": _liger_swiglu(z)}


def _liger_f6_swiglu(t, sizes):
    z = torch.mm(t["x"], t["w_gu"].T)
    return {"z": z, "out": _liger_swiglu(z)}


def _liger_qkv_rope(qkv, t, sizes):
    d = sizes["D"]
    _liger_rope_(qkv[:, :d], qkv[:, d : 2 * d], t["_cos"], t["_sin"])
    return {"qkv": qkv}


def _liger_f4(t, sizes):
    return _liger_qkv_rope(torch.mm(_liger_rms(t["h"]), t["w_qkv"].T), t, sizes)


def _liger_f6_rope(t, sizes):
    return _liger_qkv_rope(torch.mm(t["x"], t["w_qkv"].T), t, sizes)


def _liger_f5(t, sizes):
    _liger_lm_loss(_liger_rms(t["h"]), t["w_lm"], t["target"])
    return {}


def _liger_f6_lse(t, sizes):
    _liger_lm_loss(t["x"], t["w_lm"], t["target"])
    return {}


def _liger_f7_qk_norm_rope(t, sizes):
    """Qwen3's layout: q_proj and k_proj GEMMs, LigerRMSNorm per head with q_norm / k_norm,
    Liger RoPE in place, then one cat into the spec's single qk output."""
    hd, d, m = sizes["head_dim"], sizes["D"], sizes["M"]
    hn, w, wn = _liger_rms(t["h"]), t["w_qk"], t["wn"]
    q = _liger_rms(torch.mm(hn, w[:d].T).view(-1, hd), wn[:hd]).view(m, -1)
    k = _liger_rms(torch.mm(hn, w[d:].T).view(-1, hd), wn[d : d + hd]).view(m, -1)
    _liger_rope_(q, k, t["_cos"], t["_sin"])
    return {"qk": torch.cat((q, k), 1)}


def _liger_f7_qkv_head_sumsq(t, sizes):
    from liger_kernel.ops.rms_norm import rms_norm_forward

    qkv = torch.mm(_liger_rms(t["h"]), t["w_qkv"].T)
    _, _, rstd, *_ = rms_norm_forward(
        qkv.view(-1, sizes["head_dim"]), None, EPS, 0.0, "llama", None
    )
    return {"qkv": qkv, "head_rstd": rstd.view(sizes["M"], -1)}


def _liger_rmsnorm_chain(t, sizes):
    hn, x1, r = _liger_add_rms(torch.mm(t["y"], t["w_o"].T), t["x"], t["gamma"])
    return {"x1": x1, "r": r, "out": torch.mm(hn, t["w_up"].T)}


def _liger_llama_block(t, sizes):
    """Forward with Liger's autograd Functions (fused add+RMSNorm twice, SwiGLU on halves, RoPE),
    so the driver's autograd runs Liger's backward kernels."""
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as AddNorm
    from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction as SwiGLU

    hn1, x1 = AddNorm.apply(torch.mm(t["y"], t["w_o"].T), t["x0"], t["gamma1"], EPS)
    z1 = torch.mm(hn1, t["w_gu"].T)
    hn2, x2 = AddNorm.apply(torch.mm(SwiGLU.apply(z1), t["w_down"].T), x1, t["gamma2"], EPS)
    qkv = torch.mm(hn2, t["w_qkv"].T)
    qkv = _LigerRopeQKV.apply(qkv, t["_cos"], t["_sin"], sizes["D"])
    return {"x1": x1, "z1": z1, "x2": x2, "qkv": qkv}


def _liger_b1(t, sizes):
    """Liger's fused add+RMSNorm backward on the saved x and r, added into dres (its dS_out)."""
    from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_backward
    from liger_kernel.ops.utils import calculate_settings

    g = torch.mm(t["dz"], t["w_next"])
    block, warps = calculate_settings(sizes["D"])
    dx, _, dgamma = fused_add_rms_norm_backward(
        g, t["dres"], t["x"], t["gamma"], t["r"], 0.0, _LIGER_LLAMA_CASTING, block, warps, 2, True
    )
    return {"dx": dx, "dgamma": dgamma}


def _liger_b2(t, sizes):
    from liger_kernel.ops.swiglu import swiglu_fused_gate_up_backward

    return {"dz": swiglu_fused_gate_up_backward(t["z"], torch.mm(t["dout"], t["w_down"]))}


def _liger_b3(t, sizes):
    d, dz = sizes["D"], t["dy"]
    _liger_rope_(dz[:, :d], dz[:, d : 2 * d], t["_cos"], t["_sin"], backward=True)
    return {"dz": dz}


def _liger_b4(t, sizes):
    from liger_kernel.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward

    with torch.no_grad():
        loss, _, _, _, grad = cross_entropy_forward(
            t["logits"], t["target"], None, IGNORE, 0.0, 0.0, "none", None, False
        )
        return {"loss": loss, "dlogits": cross_entropy_backward(grad, t["dloss"])}


_ROPE = (
    "q/k heads in rotate-half (HF) order, w_qkv's q/k rows permuted per head in prepare; "
    "cos/sin built in prepare from pos and freqs[:head_dim/2] (assumes one inv_freq table per "
    "q/k head and v unrotated, as Llama); Liger's RoPE kernel runs in place on the QKV output"
)
_HALVES = "z in gate|up halves layout (w_gu's rows permuted to halves in prepare)"
_LSE = (
    "no lse, no target_logit: LigerFusedLinearCrossEntropy gives only the per-row loss "
    "lse - target_logit (reduction='none', no gradient)"
)

LIGER = MappingProxyType(
    {
        "b1_dgrad_rmsnorm_bwd": Impl(
            _liger_b1,
            note="dx and dgamma (in gamma's dtype) from LigerFusedAddRMSNorm's backward on the "
            "saved x and r; no v (Liger's forward saves its normed output); zdz not read",
            produces=("dx", "dgamma"),
        ),
        "b2_dgrad_dswiglu": Impl(
            _liger_b2,
            _prep_b2,
            "writes dz only (gate|up halves layout; z permuted to halves in prepare, as Liger's "
            "forward saves it); no h, no zdz",
            ("dz",),
        ),
        "b3_rope_bwd": Impl(
            _liger_b3,
            _prep_b3,
            "writes dz only, q/k heads in rotate-half order (dy permuted in prepare); no zdz; "
            "Liger's RoPE backward rotates prepare's dy copy in place (spec values on the first "
            "call only); cos/sin built in prepare (one inv_freq table per head, v unrotated)",
            ("dz",),
            heads=True,
        ),
        "b4_ce_fwd_bwd": Impl(
            _liger_b4,
            _prep_b4,
            "loss (in the logits' dtype) and dlogits; no zdz; lse recomputed (input unused); "
            "Liger writes the gradient over prepare's logits copy (spec values on the first "
            "call only)",
            ("loss", "dlogits"),
        ),
        "f1_residual_rmsnorm": Impl(
            _liger_f1,
            note="x1 and r; no h: LigerFusedAddRMSNorm writes the normalized rms_norm(x1)*gamma "
            "(the next GEMM's input) instead",
            produces=("x1", "r"),
        ),
        "f2_deferred_norm": Impl(_liger_f2),
        "f3_norm_swiglu": Impl(_liger_f3, _prep_w_gu, _HALVES),
        "f4_norm_rope": Impl(_liger_f4, _prep_rope_weight, _ROPE, heads=True),
        "f5_norm_lmhead_lse": Impl(_liger_f5, note=_LSE, produces=()),
        "f6_lse": Impl(_liger_f6_lse, note=_LSE, produces=()),
        "f6_rope": Impl(_liger_f6_rope, _prep_rope_weight, _ROPE, heads=True),
        "f6_swiglu": Impl(_liger_f6_swiglu, _prep_w_gu, _HALVES),
        "f7_qk_norm_rope": Impl(
            _liger_f7_qk_norm_rope,
            _prep_f7_qk,
            "qk's heads in rotate-half (HF) order: two GEMMs (q_proj, k_proj; w_qk's rows "
            "permuted per head in prepare), LigerRMSNorm per head, Liger RoPE, one torch.cat "
            "into qk; assumes wn repeats one q_norm and one k_norm weight over the heads and "
            "freqs one inv_freq table per head; cos/sin built in prepare",
            heads=True,
        ),
        "f7_qkv_head_sumsq": Impl(
            _liger_f7_qkv_head_sumsq,
            note="head_rstd from LigerRMSNorm over every (row, head), which also writes the "
            "normalized heads (unused)",
            heads=True,
        ),
        "llama_block": Impl(
            _liger_llama_block,
            _prep_llama,
            "no r1, no r2 (Liger keeps rstd in its autograd context); z1 in gate|up halves and "
            "qkv's q/k heads in rotate-half order (w_gu, w_qkv rows permuted in prepare, so "
            "dw_gu, dw_qkv come back in those row orders); cos/sin built in prepare (one inv_freq "
            "table per head, v unrotated); backward rotates a copy of d_qkv",
            ("x1", "z1", "x2", "qkv"),
            heads=True,
        ),
        "rmsnorm_chain": Impl(_liger_rmsnorm_chain),
    }
)


def _liger_importable() -> bool:
    try:
        importlib.import_module("liger_kernel")
    except Exception:  # noqa: BLE001 - ImportError, or a Triton without a usable backend
        return False
    return True


def liger(checked, sizes: dict) -> Baseline | None:
    """The cuBLAS + Liger Kernel baseline, or None where Liger has no op for the chain, the
    chain's heads do not fit (D not a multiple of head_dim), or liger_kernel does not import."""
    impl = LIGER.get(checked.spec.name)
    if impl is None:
        return None
    if impl.heads:
        hd = _head_dim(sizes)
        if hd % 2 or sizes["D"] % hd:
            return None
    if not _liger_importable():
        return None
    return bind("liger", impl, checked, sizes)
