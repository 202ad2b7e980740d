"""Qwen2 (transformers' ``Qwen2ForCausalLM``, ``model_type == "qwen2"``) from its own chains.

Qwen2's decoder is Llama's with two differences the chains compute (transformers'
``modeling_qwen2.py``), and a config the model reads:

* **QKV biases.** ``q_proj``, ``k_proj`` and ``v_proj`` carry biases (``o_proj`` and the MLP
  none). ``specs/qwen2_first.yaml`` and ``specs/qwen2_layer.yaml`` add the fused bias ``b_qkv``
  in the QKV GEMM's epilogue, after the deferred norm's row scale and before RoPE (a
  ``load_row`` of a vector laid out like ``w_qkv``'s rows, then ``add``); their backward
  sections, derived by ``coda grad``, give its gradient as a column sum of the pre-RoPE
  gradient. The bias is held as one parameter per layer, ``b_qkv [(NH + 2*NKV)*HD]``, in
  ``w_qkv``'s row order (each q and k head's entries permuted so that rotary pairs are
  adjacent, ``coda_spec.nn.layout``), and mapped both ways in the state dicts.
* **RMSNorm eps.** Qwen2(.5) checkpoints use 1e-6, the Llama chains 1e-5; the eps is a literal
  of each chain, so ``qwen2_first``, ``qwen2_layer`` and ``qwen2_last_mlp`` carry 1e-6. The LM
  head holds none (it is given the final norm's row scale r2, which ``qwen2_last_mlp``
  computes): ``llama3_lm_head`` serves unchanged. A config with another ``rms_norm_eps`` is
  refused by ``chain_ops``, naming the build to make.
* **Sliding window.** transformers' Qwen2 windows the layers whose ``layer_types`` entry is
  ``"sliding_attention"`` (``use_sliding_window`` with the layers from ``max_window_layers``
  on). coda serves full attention on every layer; a config with a windowed layer is refused
  (:func:`shape_of`). Qwen2(.5) checkpoints ship ``use_sliding_window: false``.

Everything else is the Llama's (``coda_spec.nn.llama``): :class:`Qwen2ForCausalLM` is a
``LlamaForCausalLM`` whose config reader, chains and QKV inputs are Qwen2's, and
:func:`apply_to_hf_qwen2` is the Llama's patch (``coda_spec.nn.hf.patch``) with the fused bias.
Every piece of Qwen2's glue runs in a chain; none runs in torch. ``recompute=True`` is refused:
there are no Qwen2 recompute chains yet.
"""

from __future__ import annotations

import torch

from coda_spec.nn import layout
from coda_spec.nn.hf import hf_layer, patch
from coda_spec.nn.llama import (
    LlamaForCausalLM,
    LlamaShape,
    chain_ops,
    checked_chunk_rows,
    spec_path,
)
from coda_spec.runtime import CodaRuntimeError

# role (coda_spec.nn.llama.CHAINS) -> Qwen2's chain; the LM head is the Llama's (no eps of its own)
NAMES = {
    "llama3_first": "qwen2_first",
    "llama3_layer": "qwen2_layer",
    "llama3_last_mlp": "qwen2_last_mlp",
    "llama3_lm_head": "llama3_lm_head",
}
QKV_INPUTS = ("b_qkv",)


def build_command() -> str:
    """The ``coda build`` that makes the chains a Qwen2 needs."""
    return "coda build " + " ".join(spec_path(n) for n in NAMES.values())


def shape_of(config) -> LlamaShape:
    """A transformers ``Qwen2Config`` read (``LlamaShape.of``: sizes, RoPE, what a Llama config
    is refused for), with a sliding-window layer refused: coda serves full attention."""
    shape = LlamaShape.of(config)
    types = list(getattr(config, "layer_types", None) or ())
    windowed = [i for i, t in enumerate(types) if t != "full_attention"]
    if windowed:
        raise CodaRuntimeError(
            f"this Qwen2 config has sliding-window attention on layers {windowed} "
            f"(use_sliding_window={getattr(config, 'use_sliding_window', None)}, "
            f"max_window_layers={getattr(config, 'max_window_layers', None)}, layer_types "
            f"{sorted(set(types))}): coda's Qwen2 serves full attention on every layer; set "
            "config.use_sliding_window = False and layer_types to 'full_attention' (Qwen2.5 "
            "checkpoints ship use_sliding_window false), or train with transformers"
        )
    return shape


def chains_of(shape: LlamaShape, builds, tuned, recompute: bool) -> dict:
    """Qwen2's chains' ops by role (``coda_spec.nn.llama.chain_ops``)."""
    if recompute:
        raise CodaRuntimeError(
            "recompute=True: coda has no Qwen2 recompute chains yet; pass recompute=False"
        )
    return chain_ops(shape, builds, tuned, names=NAMES, command=build_command())


def _bias(b: torch.Tensor) -> torch.Tensor:
    return b[:, None]  # a bias as a one-column weight, for layout's row maps


def fuse_bias(bq, bk, bv, head_dim: int) -> torch.Tensor:
    """transformers' q/k/v biases as coda's ``b_qkv``, in ``w_qkv``'s row order
    (differentiable: the patch runs it per step)."""
    return layout.fuse_qkv(_bias(bq), _bias(bk), _bias(bv), head_dim)[:, 0]


def split_bias(b_qkv, shape: LlamaShape) -> tuple:
    """coda's ``b_qkv`` as transformers' (q, k, v) biases."""
    parts = layout.split_qkv(_bias(b_qkv), shape.heads, shape.kv_heads, shape.head_dim)
    return tuple(p[:, 0] for p in parts)


def _bias_keys(i: int) -> tuple:
    attn = f"model.layers.{i}.self_attn."
    return tuple(attn + f"{n}_proj.bias" for n in "qkv")


class Qwen2ForCausalLM(LlamaForCausalLM):
    """A Qwen2 causal LM from its chains (the module docstring): ``LlamaForCausalLM``'s
    arguments and calls, with each layer's fused QKV bias ``layers.{i}.b_qkv`` (zeros at
    construction, as transformers initialises a bias)."""

    QKV_INPUTS = QKV_INPUTS
    shape_of = staticmethod(shape_of)
    chains_of = staticmethod(chains_of)

    def __init__(self, config, *args, **kw):
        super().__init__(config, *args, **kw)
        like = self.layers[0].w_qkv
        for layer in self.layers:
            layer.b_qkv = torch.nn.Parameter(
                torch.zeros(like.shape[0], dtype=like.dtype, device=like.device)
            )

    def load_hf_state_dict(self, sd: dict) -> None:
        """Load weights in transformers' names and layouts (:func:`from_hf_state_dict`)."""
        self.load_state_dict(from_hf_state_dict(sd, self.shape))

    def to_hf_state_dict(self) -> dict:
        """The weights in transformers' names and layouts (what its ``load_state_dict`` takes)."""
        return to_hf_state_dict({k: v.detach() for k, v in self.state_dict().items()}, self.shape)


def from_hf_state_dict(sd: dict, shape: LlamaShape) -> dict:
    """A transformers ``Qwen2ForCausalLM`` state dict in coda's names and layouts: the Llama's
    (``coda_spec.nn.layout``) and each layer's biases fused as ``w_qkv``'s rows are."""
    out = layout.from_hf_state_dict(sd, shape)
    for i in range(shape.layers):
        out[f"layers.{i}.b_qkv"] = fuse_bias(*(sd[k] for k in _bias_keys(i)), shape.head_dim)
    return out


def to_hf_state_dict(sd: dict, shape: LlamaShape) -> dict:
    """coda's names and layouts back in transformers' (the inverse of
    :func:`from_hf_state_dict`)."""
    out = layout.to_hf_state_dict(sd, shape)
    for i in range(shape.layers):
        biases = split_bias(sd[f"layers.{i}.b_qkv"], shape)
        out.update((k, b.contiguous()) for k, b in zip(_bias_keys(i), biases, strict=True))
    return out


def hf_qwen2_layer(layer, shape: LlamaShape) -> dict:
    """A transformers Qwen2 decoder layer's weights under coda's names, fused (``hf_layer``
    and the bias)."""
    a = layer.self_attn
    return {
        **hf_layer(layer, shape),
        "b_qkv": fuse_bias(a.q_proj.bias, a.k_proj.bias, a.v_proj.bias, shape.head_dim),
    }


def apply_to_hf_qwen2(
    model, builds="build", tuned=None, recompute: bool = False, lm_head_chunk_rows=None
):
    """Patch ``model`` (a transformers ``Qwen2ForCausalLM``) in place to train through Qwen2's
    chains, a drop-in for transformers' training loops (``coda_spec.nn.hf``); returns it.
    ``builds``, ``tuned``, ``recompute``, ``lm_head_chunk_rows``: as
    :class:`Qwen2ForCausalLM`'s."""
    shape = shape_of(model.config)
    rows = checked_chunk_rows(lm_head_chunk_rows)
    chains = chains_of(shape, builds, tuned, recompute)
    return patch(model, shape, chains, rows, layer=hf_qwen2_layer, qkv_inputs=QKV_INPUTS)
