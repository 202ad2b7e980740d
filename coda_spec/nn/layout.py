"""Hugging Face's Llama layout and coda's, and the one map between them.

The bundled chains (``specs/llama3_*.yaml``) read two weights in a layout of their own, so the
model permutes them once, when weights come in (:func:`from_hf_state_dict`), and undoes it when
they go out (:func:`to_hf_state_dict`); every other weight is Hugging Face's tensor as is:

* **QKV.** One fused ``w_qkv [(NH + 2*NKV)*HD, D]``: the rows of ``q_proj``, then ``k_proj``, then
  ``v_proj``. Within each q and k head the rows are reordered so that RoPE's rotary pairs are
  adjacent: Hugging Face rotates halves (pair ``(i, i + HD/2)``), the ``rope`` primitive rotates
  adjacent columns (pair ``(2i, 2i+1)``), so head row ``2i`` is HF's row ``i`` and row ``2i+1``
  is HF's ``i + HD/2``. Attention is unchanged by it: q and k of a head get the same reorder of
  their HD features, and ``q . k`` is a sum over them. v is not reordered.
* **Gate/up.** One ``w_gu [2F, D]`` with rows interleaved, ``(gate_0, up_0, gate_1, up_1, ...)``:
  the pairs ``swiglu`` reads from adjacent accumulator columns.

The kernels could read Hugging Face's layouts natively (a concatenated ``[gate; up]`` read as
interleaved, as QuACK's ``concat_layout`` does; rotate-half pairs inside a head-wide tile); coda
does not yet, hence the permutation at load. Parameter names (:func:`from_hf_state_dict`'s keys)
follow the model's modules (``coda_spec.nn.llama``); the HF names are transformers'
``LlamaForCausalLM``'s.
"""

from __future__ import annotations

import torch


def rope_order(head_dim: int) -> torch.Tensor:
    """The HF row of each coda row within one head: ``[0, HD/2, 1, HD/2 + 1, ...]``."""
    half = head_dim // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).reshape(-1)


def _heads(w: torch.Tensor, head_dim: int, order: torch.Tensor) -> torch.Tensor:
    """Reorder the rows of each head of a ``[heads*HD, D]`` projection."""
    d = w.shape[-1]
    return w.reshape(-1, head_dim, d)[:, order.to(w.device)].reshape(-1, d)


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dim: int) -> torch.Tensor:
    """HF's q/k/v projections as coda's ``w_qkv`` (differentiable: the patch runs it per step)."""
    order = rope_order(head_dim)
    return torch.cat([_heads(q, head_dim, order), _heads(k, head_dim, order), v], dim=0)


def split_qkv(w_qkv: torch.Tensor, n_heads: int, n_kv: int, head_dim: int) -> tuple:
    """coda's ``w_qkv`` as HF's (q, k, v) projections."""
    back = torch.argsort(rope_order(head_dim))
    q, k, v = torch.split(w_qkv, [n_heads * head_dim, n_kv * head_dim, n_kv * head_dim])
    return _heads(q, head_dim, back), _heads(k, head_dim, back), v


def fuse_gate_up(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """HF's gate/up projections (``[F, D]`` each) as coda's interleaved ``w_gu [2F, D]``."""
    return torch.stack([gate, up], dim=1).reshape(-1, gate.shape[-1])


def split_gate_up(w_gu: torch.Tensor) -> tuple:
    pairs = w_gu.reshape(-1, 2, w_gu.shape[-1])
    return pairs[:, 0], pairs[:, 1]


def from_hf_state_dict(sd: dict, shape) -> dict:
    """A transformers ``LlamaForCausalLM`` state dict (``model.`` prefixed keys) in coda's
    names and layouts. ``shape``: a ``coda_spec.nn.llama.LlamaShape``."""
    out = {"embed_tokens.weight": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"]}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        attn, mlp = p + "self_attn.", p + "mlp."
        out[f"layers.{i}.w_qkv"] = fuse_qkv(
            sd[attn + "q_proj.weight"],
            sd[attn + "k_proj.weight"],
            sd[attn + "v_proj.weight"],
            shape.head_dim,
        )
        out[f"layers.{i}.w_o"] = sd[attn + "o_proj.weight"]
        out[f"layers.{i}.w_gu"] = fuse_gate_up(
            sd[mlp + "gate_proj.weight"], sd[mlp + "up_proj.weight"]
        )
        out[f"layers.{i}.w_down"] = sd[mlp + "down_proj.weight"]
        out[f"layers.{i}.input_norm"] = sd[p + "input_layernorm.weight"]
        out[f"layers.{i}.post_norm"] = sd[p + "post_attention_layernorm.weight"]
    if not shape.tied:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def to_hf_state_dict(sd: dict, shape) -> dict:
    """coda's names and layouts back in transformers' (the inverse of
    :func:`from_hf_state_dict`; a tied model writes ``lm_head.weight`` as the embedding, as
    transformers' own state dict does)."""
    out = {"model.embed_tokens.weight": sd["embed_tokens.weight"]}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        q, k, v = split_qkv(sd[f"layers.{i}.w_qkv"], shape.heads, shape.kv_heads, shape.head_dim)
        gate, up = split_gate_up(sd[f"layers.{i}.w_gu"])
        out.update(
            {
                p + "self_attn.q_proj.weight": q,
                p + "self_attn.k_proj.weight": k,
                p + "self_attn.v_proj.weight": v,
                p + "self_attn.o_proj.weight": sd[f"layers.{i}.w_o"],
                p + "mlp.gate_proj.weight": gate,
                p + "mlp.up_proj.weight": up,
                p + "mlp.down_proj.weight": sd[f"layers.{i}.w_down"],
                p + "input_layernorm.weight": sd[f"layers.{i}.input_norm"],
                p + "post_attention_layernorm.weight": sd[f"layers.{i}.post_norm"],
            }
        )
    out["model.norm.weight"] = sd["norm"]
    out["lm_head.weight"] = sd["embed_tokens.weight" if shape.tied else "lm_head.weight"]
    return {k: v.contiguous() for k, v in out.items()}
