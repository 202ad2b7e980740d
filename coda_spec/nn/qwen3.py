"""A Qwen3 causal LM (transformers' ``Qwen3ForCausalLM``, ``model_type == "qwen3"``) from the
chains: the Llama's schedule (``coda_spec.nn.llama``) with Qwen3's chains and glue.

Qwen3's decoder is Llama's (RMSNorm, SwiGLU, GQA, RoPE, no biases) with, in attention, an
RMSNorm of each q and k head (``q_norm`` / ``k_norm``: one ``[head_dim]`` weight each, eps
``rms_norm_eps``) applied after the projection and before a rotate-half RoPE, and a head_dim
of its own (Qwen3-1.7B: 16 heads of 128 in a hidden size of 2048). Its chains
(``specs/qwen3_*.yaml``, backward sections derived by ``coda grad``)::

    x = embed(ids)
    qkv = qwen3_first(x, w = w_qkv * gamma, r = rstd(x))       # layer 0's norm, QKV 0
    for i < L-1:  x, qkv = qwen3_layer(x, attn(glue(qkv)))     # o-proj i .. QKV i+1
    x2, h2, r2 = qwen3_last_mlp(x, attn(glue(qkv)))            # o-proj L-1 .. final norm's inputs
    loss = llama3_lm_head(x2, h2, r2, target, row_w)           # the Llama's: holds no eps

* The chains hold Qwen3's eps (1e-6) and no RoPE: a QKV chain's ``qkv`` is the normalized input
  projected, in transformers' layout (``w_qkv`` is ``cat([q_proj, k_proj, v_proj])``, not
  permuted: no rotary pairs to make adjacent).
* **No fused form yet** (torch, differentiable ops, :class:`QKNormRope`; compiled by
  ``torch.compile`` on the GPU, ``coda_spec.nn.glue``): the per-head q/k RMSNorm and the
  rotate-half RoPE, between each QKV chain and attention (one read and write of ``qkv`` in the
  forward, and one in the backward). Their fused epilogue exists and is
  verified on the H200 (``tests/specs_extra/qk_norm_rope_half.yaml``), but ``coda grad`` cannot
  derive it ("a prepass statistic (meansq per head_dim): its backward needs a per-group row dot
  of the incoming gradient before the same epilogue can use it"; rotate-half RoPE and repeated
  row vectors are not derived either), so the chains stop before it.
* Layer 0's input norm: no GEMM precedes it and ``coda grad`` derives a forward host step only
  for a LayerNorm, so its weight is folded into the QKV GEMM's weight in torch (``w_qkv *
  gamma``, autograd giving both gradients) and its row scale ``r`` is one torch row reduction of
  the embeddings, passed without gradient (the chain's derived backward takes that branch).
* Refused, with a ``CodaRuntimeError`` before any work: a sliding window on any layer
  (``use_sliding_window`` with ``max_window_layers`` below the layer count), QKV biases
  (``attention_bias``), ``recompute=True`` (no Qwen3 recompute chains yet), and what a Llama
  config is refused for (``LlamaShape.of``: attention dropout, an MLP other than SwiGLU, RoPE
  that scales cos/sin); an ``rms_norm_eps`` other than the chains' 1e-6 is ``chain_ops``'s
  refusal.

Weights: coda's names (``coda_spec.nn.layout``'s, with ``q_norm`` and ``k_norm`` per layer),
``w_qkv`` the three projections concatenated and ``w_gu`` gate/up interleaved (the layout
``swiglu`` reads), mapped both ways by :func:`from_hf_state_dict` / :func:`to_hf_state_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coda_spec.nn import layout
from coda_spec.nn.glue import compiled
from coda_spec.nn.hf import patch
from coda_spec.nn.llama import (
    CHAINS,
    LlamaForCausalLM,
    LlamaShape,
    chain_ops,
    checked_chunk_rows,
    spec_path,
)
from coda_spec.runtime import CodaRuntimeError

# the chain that serves each of the Llama's roles (chain_ops' names=); the LM head is the Llama's
NAMES = {
    "llama3_first": "qwen3_first",
    "llama3_layer": "qwen3_layer",
    "llama3_last_mlp": "qwen3_last_mlp",
}


def build_command() -> str:
    """The ``coda build`` that makes the chains a Qwen3 needs."""
    return "coda build " + " ".join(spec_path(NAMES.get(n, n)) for n in CHAINS)


def shape_of(config, recompute: bool = False) -> LlamaShape:
    """A transformers ``Qwen3Config`` read as the chains' shape; what they cannot serve is a
    ``CodaRuntimeError`` (the module docstring)."""
    if getattr(config, "attention_bias", False):
        raise CodaRuntimeError(
            "this Qwen3 config has attention_bias=True: the Qwen3 chains' projections have no "
            "biases; set config.attention_bias = False, or train with transformers"
        )
    sliding = [
        i for i, t in enumerate(getattr(config, "layer_types", None) or []) if "sliding" in t
    ]
    if sliding:
        raise CodaRuntimeError(
            f"this Qwen3 config slides a window of {config.sliding_window} tokens on layers "
            f"{sliding[0]}..{sliding[-1]} (use_sliding_window=True, max_window_layers="
            f"{getattr(config, 'max_window_layers', None)}): coda's Qwen3 serves full causal "
            "attention; set config.use_sliding_window = False, or train with transformers"
        )
    if recompute:
        raise CodaRuntimeError(
            "recompute=True: there are no Qwen3 recompute chains yet; use recompute=False"
        )
    return LlamaShape.of(config)


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The dtype torch's glue computes in: fp64 in an fp64 model, else fp32 (transformers')."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _head_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' ``Qwen3RMSNorm`` over the last dim of ``x [M, heads, HD]``."""
    xw = x.to(_wide(x.dtype))
    xw = xw * torch.rsqrt(xw.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xw.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass(frozen=True)
class QKNormRope:
    """Qwen3's glue around the chains (``causal_lm_loss``'s ``glue``), in differentiable torch
    ops: no fused form yet (the module docstring)."""

    shape: LlamaShape

    def first(self, w0: dict, x: torch.Tensor) -> dict:
        """``qwen3_first``'s inputs: layer 0's norm weight folded into ``w``; its row scale."""
        wide = x.dtype if x.dtype in (torch.float64, torch.float32) else torch.float32
        with torch.no_grad():
            r = torch.rsqrt(x.to(wide).pow(2).mean(-1) + self.shape.eps)
        return {"x": x, "w": w0["w_qkv"] * w0["input_norm"], "r": r}

    def qkv(self, w: dict, qkv: torch.Tensor, pos: torch.Tensor, freqs: torch.Tensor):
        """``qkv [M, (NH + 2 NKV) HD]`` (transformers' layout) with each q and k head
        RMS-normalized (``w["q_norm"]``, ``w["k_norm"]``) and rotated as transformers'
        ``apply_rotary_pos_emb`` (``freqs``: inv_freq ``[HD/2]``); v as it is; compiled on the
        GPU (``coda_spec.nn.glue``)."""
        sh = self.shape
        dims = (sh.heads, sh.kv_heads, sh.head_dim, sh.eps)
        return qk_norm_rope(qkv, pos, freqs, w["q_norm"], w["k_norm"], dims)


@compiled
def qk_norm_rope(qkv, pos, freqs, q_norm, k_norm, dims: tuple) -> torch.Tensor:
    """:meth:`QKNormRope.qkv`'s math; ``dims``: (heads, KV heads, head_dim, eps)."""
    heads, kv_heads, hd, eps = dims
    m = qkv.shape[0]
    q, k, v = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=1)
    angle = pos.to(_wide(qkv.dtype))[:, None] * freqs.to(_wide(qkv.dtype))[None, :]
    emb = torch.cat((angle, angle), dim=-1)[:, None, :]  # [M, 1, HD]
    cos, sin = emb.cos().to(qkv.dtype), emb.sin().to(qkv.dtype)

    def norm_rope(t: torch.Tensor, n: int, gamma: torch.Tensor) -> torch.Tensor:
        t = _head_norm(t.view(m, n, hd), gamma, eps)
        return (t * cos + _rotate_half(t) * sin).reshape(m, n * hd)

    return torch.cat([norm_rope(q, heads, q_norm), norm_rope(k, kv_heads, k_norm), v], dim=1)


def inv_freq(shape: LlamaShape, dtype=torch.bfloat16, device=None) -> torch.Tensor:
    """RoPE's ``[HD/2]`` frequencies (transformers', fp32), in ``_wide(dtype)``."""
    return torch.tensor(shape.inv_freq, dtype=torch.float32).to(_wide(dtype)).to(device)


def from_hf_state_dict(sd: dict, shape: LlamaShape) -> dict:
    """A transformers ``Qwen3ForCausalLM`` state dict in coda's names and layouts: the Llama's
    (``coda_spec.nn.layout``), with ``w_qkv`` the projections concatenated (not permuted) and
    each layer's ``q_norm`` / ``k_norm``."""
    out = layout.from_hf_state_dict(sd, shape)
    for i in range(shape.layers):
        attn = f"model.layers.{i}.self_attn."
        parts = [sd[attn + f"{p}_proj.weight"] for p in "qkv"]
        out[f"layers.{i}.w_qkv"] = torch.cat(parts, dim=0)
        out[f"layers.{i}.q_norm"] = sd[attn + "q_norm.weight"]
        out[f"layers.{i}.k_norm"] = sd[attn + "k_norm.weight"]
    return out


def to_hf_state_dict(sd: dict, shape: LlamaShape) -> dict:
    """coda's names and layouts back in transformers' (the inverse of
    :func:`from_hf_state_dict`)."""
    sd = dict(sd)
    norms = {k: sd.pop(k) for k in list(sd) if k.endswith(("q_norm", "k_norm"))}
    out = layout.to_hf_state_dict(sd, shape)
    hd = shape.head_dim
    for i in range(shape.layers):
        attn = f"model.layers.{i}.self_attn."
        sizes = [shape.heads * hd, shape.kv_heads * hd, shape.kv_heads * hd]
        for p, w in zip("qkv", torch.split(sd[f"layers.{i}.w_qkv"], sizes), strict=True):
            out[attn + f"{p}_proj.weight"] = w.contiguous()
        out[attn + "q_norm.weight"] = norms[f"layers.{i}.q_norm"]
        out[attn + "k_norm.weight"] = norms[f"layers.{i}.k_norm"]
    return out


def chains_of(shape: LlamaShape, builds, tuned, recompute: bool = False) -> dict:
    """The Qwen3 chains' ops by role (``chain_ops`` with :data:`NAMES`; no recompute chains)."""
    return chain_ops(shape, builds, tuned, names=NAMES, command=build_command())


class Qwen3ForCausalLM(LlamaForCausalLM):
    """A Qwen3 causal LM from the Qwen3 chains and torch's glue (the module docstring); the
    Llama's model otherwise (its ``forward``, ``from_hf``, arguments and refusals).

    ``config``: a transformers ``Qwen3Config``. ``builds``, ``tuned``, ``dtype``, ``device``,
    ``lm_head_chunk_rows``: as :class:`coda_spec.nn.LlamaForCausalLM`'s; ``recompute=True`` is
    refused (no Qwen3 recompute chains yet)."""

    shape_of = staticmethod(shape_of)
    chains_of = staticmethod(chains_of)

    def __init__(
        self,
        config,
        builds="build",
        tuned=None,
        dtype=torch.bfloat16,
        device=None,
        recompute: bool = False,
        lm_head_chunk_rows: int | None = None,
    ):
        shape_of(config, recompute)  # Qwen3's refusals first
        super().__init__(config, builds, tuned, dtype, device, False, lm_head_chunk_rows)
        shape, kw = self.shape, {"dtype": dtype, "device": device}
        for layer in self.layers:
            layer.q_norm = torch.nn.Parameter(torch.ones(shape.head_dim, **kw))
            layer.k_norm = torch.nn.Parameter(torch.ones(shape.head_dim, **kw))
        self.register_buffer("freqs", inv_freq(shape, dtype, device), persistent=False)
        self.glue = QKNormRope(shape)

    def load_hf_state_dict(self, sd: dict) -> None:
        """Load weights in transformers' names and layouts (:func:`from_hf_state_dict`)."""
        self.load_state_dict(from_hf_state_dict(sd, self.shape))

    def to_hf_state_dict(self) -> dict:
        """The weights in transformers' names and layouts (what its ``load_state_dict`` takes)."""
        sd = {k: v.detach() for k, v in self.state_dict().items()}
        return to_hf_state_dict(sd, self.shape)


def hf_layer(layer, shape: LlamaShape | None = None) -> dict:
    """A transformers ``Qwen3DecoderLayer``'s weights under coda's names and layouts (the
    projections concatenated, gate/up interleaved: differentiable, made per call)."""
    a, mlp = layer.self_attn, layer.mlp
    return {
        "w_qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], dim=0),
        "w_o": a.o_proj.weight,
        "w_gu": layout.fuse_gate_up(mlp.gate_proj.weight, mlp.up_proj.weight),
        "w_down": mlp.down_proj.weight,
        "input_norm": layer.input_layernorm.weight,
        "post_norm": layer.post_attention_layernorm.weight,
        "q_norm": a.q_norm.weight,
        "k_norm": a.k_norm.weight,
    }


def apply_to_hf_qwen3(
    model, builds="build", tuned=None, recompute: bool = False, lm_head_chunk_rows=None
):
    """Patch ``model`` (a transformers ``Qwen3ForCausalLM``) in place to train through the
    Qwen3 chains (``coda_spec.nn.hf.drop_in``: a drop-in for transformers' training loops);
    returns it. Arguments as :class:`Qwen3ForCausalLM`'s. Each served call concatenates the
    q/k/v projections (no permutation) and interleaves gate/up from transformers' weights."""
    shape = shape_of(model.config, recompute)
    rows = checked_chunk_rows(lm_head_chunk_rows)
    chains = chains_of(shape, builds, tuned)
    return patch(model, shape, chains, rows, layer=hf_layer, glue=QKNormRope(shape), table=inv_freq)
