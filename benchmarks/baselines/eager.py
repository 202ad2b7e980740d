"""eager: one plain PyTorch function per catalogue chain (:data:`EAGER`, keyed by spec name),
written the way a practitioner writes the unfused chain (the contract:
``coda_spec.bench.baselines``; why: this package's ``__init__``)."""

from __future__ import annotations

from types import MappingProxyType

import torch
import torch.nn.functional as F

from coda_spec.bench.baselines import Impl
from coda_spec.bench.baselines import grad_leaf as _grad_leaf

from .common import (
    EPS,
    GEMMA_EPS,
    IGNORE,
    LLAMA3_EPS,
    QWEN_EPS,
    rms,
    rope,
    rope_tables,
    rstd,
    upcast,
)


def _eager_f1(t, sizes):
    x1 = t["x"] + t["y"] @ t["w_o"].T
    return {"x1": x1, "h": x1 * t["gamma"], "r": rstd(x1)}


def _eager_f2(t, sizes):
    """The norm before the GEMM, as unfused code has it (the saved ``r`` is not read)."""
    return {"out": rms(t["h"]) @ t["w"].T}


def _swiglu_pairs(z):
    return F.silu(z[:, 0::2]) * z[:, 1::2]


def _eager_f3(t, sizes):
    z = rms(t["h"]) @ t["w_gu"].T
    return {"z": z, "out": _swiglu_pairs(z)}


def _eager_f4(t, sizes):
    return {"qkv": rope(rms(t["h"]) @ t["w_qkv"].T, t["_cos"], t["_sin"])}


def _lse_and_target(logits, target):
    lf = upcast(logits)
    picked = lf.gather(1, target.clamp(min=0).long()[:, None])[:, 0]
    target_logit = torch.where(target == IGNORE, torch.zeros_like(picked), picked)
    return {"lse": torch.logsumexp(lf, -1), "target_logit": target_logit}


def _eager_f5(t, sizes):
    return _lse_and_target(rms(t["h"]) @ t["w_lm"].T, t["target"])


def _eager_f6_lse(t, sizes):
    return _lse_and_target(t["x"] @ t["w_lm"].T, t["target"])


def _eager_f6_rope(t, sizes):
    return {"qkv": rope(t["x"] @ t["w_qkv"].T, t["_cos"], t["_sin"])}


def _eager_f6_swiglu(t, sizes):
    z = t["x"] @ t["w_gu"].T
    return {"z": z, "out": _swiglu_pairs(z)}


def _eager_f7_qk_norm_rope(t, sizes):
    hd = sizes["head_dim"]
    z = rms(t["h"]) @ t["w_qk"].T
    zn = rms(z.unflatten(1, (-1, hd))) * t["wn"].view(-1, hd)
    return {"qk": rope(zn.flatten(1), t["_cos"], t["_sin"])}


def _eager_f7_qkv_head_sumsq(t, sizes):
    qkv = rms(t["h"]) @ t["w_qkv"].T
    return {"qkv": qkv, "head_rstd": rstd(qkv.unflatten(1, (-1, sizes["head_dim"])))}


def _eager_f8(t, sizes):
    """Two GEMMs as the spec's two kernels, each scale a separate elementwise pass."""
    return {
        "y_imm": (t["x"] @ t["w"].T) * 128.0**-0.5,
        "y_dev": t["alpha"] * (t["x"] @ t["w"].T),
    }


def _eager_rmsnorm_chain(t, sizes):
    x1 = t["x"] + t["y"] @ t["w_o"].T
    out = F.rms_norm(x1, (sizes["D"],), t["gamma"], EPS) @ t["w_up"].T
    return {"x1": x1, "r": rstd(x1), "out": out}


def _post_attention(t, sizes, eps):
    """x1, z1 and x2 of a Llama layer after attention: out-projection and residual, norm,
    gate/up, SwiGLU, down projection and residual."""
    x1 = t["x0"] + t["y"] @ t["w_o"].T
    z1 = F.rms_norm(x1, (sizes["D"],), t["gamma1"], eps) @ t["w_gu"].T
    return x1, z1, x1 + _swiglu_pairs(z1) @ t["w_down"].T


def _qkv_rope(x, gamma, t, sizes, eps):
    z = F.rms_norm(x, (sizes["D"],), gamma, eps) @ t["w_qkv"].T
    if "b_qkv" in t:  # Qwen2's QKV bias, before RoPE
        z = z + t["b_qkv"]
    return rope(z, t["_cos"], t["_sin"])


def _eager_llama_block(t, sizes, eps=EPS):
    """Forward only, differentiable ops only: the driver's autograd gives the backward."""
    x1, z1, x2 = _post_attention(t, sizes, eps)
    qkv = _qkv_rope(x2, t["gamma2"], t, sizes, eps)
    return {"x1": x1, "r1": rstd(x1, eps), "z1": z1, "x2": x2, "r2": rstd(x2, eps), "qkv": qkv}


def _eager_llama3_first(t, sizes, eps=LLAMA3_EPS):
    """Layer 0's input norm and QKV + RoPE (and Qwen2's bias); autograd gives the backward."""
    return {
        "qkv": _qkv_rope(t["x"], t["gamma"], t, sizes, eps),
        "r": rstd(t["x"], eps),
    }


def _eager_llama3_layer(t, sizes):
    return _eager_llama_block(t, sizes, LLAMA3_EPS)


def _eager_llama3_layer_recompute(t, sizes):
    """llama3_layer's eager math; the recompute chain does not return z1."""
    out = _eager_llama_block(t, sizes, LLAMA3_EPS)
    del out["z1"]
    return out


def _eager_llama3_last(t, sizes):
    """The last layer into the LM head: the logits are written (as unfused code does) and the
    statistics taken from them in fp32; autograd gives the backward."""
    _, _, x2 = _post_attention(t, sizes, LLAMA3_EPS)
    logits = F.rms_norm(x2, (sizes["D"],), t["gamma_f"], LLAMA3_EPS) @ t["w_lm"].T
    return _lse_and_target(logits, t["target"])


def _eager_llama3_last_mlp(t, sizes, eps=LLAMA3_EPS):
    """The last layer's MLP up to the final norm's inputs; autograd gives the backward."""
    _, _, x2 = _post_attention(t, sizes, eps)
    return {"x2": x2, "h2": x2 * t["gamma_f"], "r2": rstd(x2, eps)}


def _eager_qwen2_first(t, sizes):
    return _eager_llama3_first(t, sizes, QWEN_EPS)


def _eager_qwen2_layer(t, sizes):
    return _eager_llama_block(t, sizes, QWEN_EPS)


def _eager_qwen2_last_mlp(t, sizes):
    return _eager_llama3_last_mlp(t, sizes, QWEN_EPS)


def _eager_qwen3_first(t, sizes):
    """Layer 0's input norm (its weight folded into ``w``) and the QKV GEMM, no RoPE (Qwen3's
    q/k norm and RoPE run in torch after the chain)."""
    return {"qkv": F.rms_norm(t["x"], (sizes["D"],), None, QWEN_EPS) @ t["w"].T}


def _eager_qwen3_layer(t, sizes):
    x1, z1, x2 = _post_attention(t, sizes, QWEN_EPS)
    qkv = F.rms_norm(x2, (sizes["D"],), t["gamma2"], QWEN_EPS) @ t["w_qkv"].T
    return {
        "x1": x1,
        "r1": rstd(x1, QWEN_EPS),
        "z1": z1,
        "x2": x2,
        "r2": rstd(x2, QWEN_EPS),
        "qkv": qkv,
    }


def _eager_qwen3_last_mlp(t, sizes):
    return _eager_llama3_last_mlp(t, sizes, QWEN_EPS)


def _eager_olmo2_qkv(t, sizes):
    return {"z": t["x"] @ t["w_qkv"].T}


def _eager_olmo2_attn_out(t, sizes):
    return {"o": t["y"] @ t["w_o"].T}


def _eager_olmo2_mlp(t, sizes):
    z1 = t["x1"] @ t["w_gu"].T
    return {"z1": z1, "d": _swiglu_pairs(z1) @ t["w_down"].T}


def _eager_gemma3_ffn(t, sizes):
    """Gemma-3's feed-forward block: the pre-feedforward norm, the GeGLU MLP, the
    post-feedforward norm and the residual add (norms scale by ``1 + g``)."""
    d = (sizes["D"],)
    hn = F.rms_norm(t["x1"], d, 1.0 + t["g_pre"], GEMMA_EPS)
    z = hn @ t["w_gu"].T
    act = F.gelu(z[:, 0::2], approximate="tanh") * z[:, 1::2]
    x2 = t["x1"] + F.rms_norm(act @ t["w_down"].T, d, 1.0 + t["g_post"], GEMMA_EPS)
    return {"z": z, "act": act, "x2": x2}


def _eager_llama3_lm_head(t, sizes):
    """The LM head and the weighted cross-entropy as unfused code has them: the logits written,
    the loss on their fp32 upcast (as HF computes it), its gradients by autograd (the saved
    ``h2`` and ``r2`` are not read: the norm is recomputed from x2); dW_lm added to ``dw_acc``,
    the earlier chunks' sum, as the chain's wgrad reduce-adds into it."""
    with torch.enable_grad():
        x2, gamma, w_lm = (_grad_leaf(t[n]) for n in ("x2", "gamma_f", "w_lm"))
        logits = F.rms_norm(x2, (sizes["D"],), gamma, LLAMA3_EPS) @ w_lm.T
        ce = F.cross_entropy(
            upcast(logits), t["target"].long(), ignore_index=IGNORE, reduction="none"
        )
        nll = ce * t["row_w"]
        loss = nll.sum()
        dx2, dgamma, dw_lm = torch.autograd.grad(loss, (x2, gamma, w_lm))
    return {
        "loss": loss.detach(),
        "nll": nll.detach(),
        "dx2": dx2,
        "dgamma_f": upcast(dgamma),
        "dw_lm": t["dw_acc"] + dw_lm,
    }


def _eager_b1(t, sizes):
    """Autograd: recompute v = rms_norm(x, gamma) and backpropagate g = dz @ w_next through it
    (the saved ``r`` and ``zdz`` are not read: autograd's norm backward recomputes its own)."""
    g = t["dz"] @ t["w_next"]
    with torch.enable_grad():
        x, gamma = _grad_leaf(t["x"]), _grad_leaf(t["gamma"])
        v = F.rms_norm(x, (sizes["D"],), gamma, EPS)
        dx, dgamma = torch.autograd.grad(v, (x, gamma), g)
    return {"dx": t["dres"] + dx, "v": v.detach(), "dgamma": upcast(dgamma)}


def _eager_b2(t, sizes):
    """Autograd: the SwiGLU backward of h = silu(z[:, 0::2]) * z[:, 1::2] (h recomputed)."""
    dh = t["dout"] @ t["w_down"]
    with torch.enable_grad():
        z = _grad_leaf(t["z"])
        h = _swiglu_pairs(z)
        (dz,) = torch.autograd.grad(h, z, dh)
    zdz = (upcast(t["z"]) * upcast(dz)).sum(-1) / sizes["D"]
    return {"dz": dz, "h": h.detach(), "zdz": zdz}


def _eager_b3(t, sizes):
    """Explicit formula: dz = R^T dy (rotate by -theta); zdz = (1/D) y.dy, since a rotation
    keeps dot products (z.dz = y.dy)."""
    dz = rope(t["dy"], t["_cos"], t["_sin"], inverse=True)
    return {"dz": dz, "zdz": (upcast(t["y"]) * upcast(t["dy"])).sum(-1) / sizes["D"]}


def _eager_b4(t, sizes):
    """Autograd: ``F.cross_entropy`` on fp32-upcast logits (as HF computes its loss), reduction
    'none', and its gradient for the incoming ``dloss`` (the saved ``lse`` is not read)."""
    with torch.enable_grad():
        logits = _grad_leaf(t["logits"])
        loss = F.cross_entropy(
            upcast(logits), t["target"].long(), ignore_index=IGNORE, reduction="none"
        )
        (dlogits,) = torch.autograd.grad(loss, logits, t["dloss"])
    zdz = (upcast(t["logits"]) * upcast(dlogits)).sum(-1) / sizes["D"]
    return {"loss": loss.detach(), "dlogits": dlogits, "zdz": zdz}


_EAGER_ROPE_NOTE = "RoPE cos/sin(pos*freqs) tables built once in prepare, outside timing"

EAGER = MappingProxyType(
    {
        "b1_dgrad_rmsnorm_bwd": Impl(_eager_b1),
        "b2_dgrad_dswiglu": Impl(_eager_b2),
        "b3_rope_bwd": Impl(_eager_b3, rope_tables, _EAGER_ROPE_NOTE),
        "b4_ce_fwd_bwd": Impl(_eager_b4),
        "f1_residual_rmsnorm": Impl(_eager_f1),
        "f2_deferred_norm": Impl(_eager_f2),
        "f3_norm_swiglu": Impl(_eager_f3),
        "f4_norm_rope": Impl(_eager_f4, rope_tables, _EAGER_ROPE_NOTE),
        "f5_norm_lmhead_lse": Impl(_eager_f5),
        "f6_lse": Impl(_eager_f6_lse),
        "f6_rope": Impl(_eager_f6_rope, rope_tables, _EAGER_ROPE_NOTE),
        "f6_swiglu": Impl(_eager_f6_swiglu),
        "f7_qk_norm_rope": Impl(_eager_f7_qk_norm_rope, rope_tables, _EAGER_ROPE_NOTE),
        "f7_qkv_head_sumsq": Impl(_eager_f7_qkv_head_sumsq),
        "f8_scale": Impl(_eager_f8),
        "llama3_first": Impl(_eager_llama3_first, rope_tables, _EAGER_ROPE_NOTE),
        "llama3_last": Impl(_eager_llama3_last),
        "llama3_last_recompute": Impl(_eager_llama3_last),  # the same outputs as llama3_last
        "llama3_last_mlp": Impl(_eager_llama3_last_mlp),
        "llama3_last_mlp_recompute": Impl(_eager_llama3_last_mlp),  # llama3_last_mlp's outputs
        "llama3_lm_head": Impl(_eager_llama3_lm_head),
        "llama3_layer": Impl(_eager_llama3_layer, rope_tables, _EAGER_ROPE_NOTE),
        "llama3_layer_recompute": Impl(
            _eager_llama3_layer_recompute, rope_tables, _EAGER_ROPE_NOTE
        ),
        "llama_block": Impl(_eager_llama_block, rope_tables, _EAGER_ROPE_NOTE),
        "gemma3_ffn": Impl(_eager_gemma3_ffn),
        "olmo2_attn_out": Impl(_eager_olmo2_attn_out),
        "olmo2_mlp": Impl(_eager_olmo2_mlp),
        "olmo2_qkv": Impl(_eager_olmo2_qkv),
        "qwen2_first": Impl(_eager_qwen2_first, rope_tables, _EAGER_ROPE_NOTE),
        "qwen2_last_mlp": Impl(_eager_qwen2_last_mlp),
        "qwen2_layer": Impl(_eager_qwen2_layer, rope_tables, _EAGER_ROPE_NOTE),
        "qwen3_first": Impl(_eager_qwen3_first),
        "qwen3_last_mlp": Impl(_eager_qwen3_last_mlp),
        "qwen3_layer": Impl(_eager_qwen3_layer),
        "rmsnorm_chain": Impl(_eager_rmsnorm_chain),
    }
)
