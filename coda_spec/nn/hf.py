"""``apply_to_hf_llama``: a transformers ``LlamaForCausalLM`` trained through coda's chains, as a
drop-in for transformers' training loops (``coda_spec.nn.apply_to_hf`` dispatches here).

The patch replaces the model's ``forward`` (an instance attribute: its class, its modules and its
``state_dict`` are untouched) with :func:`drop_in`'s: a call coda serves runs
``coda_spec.nn.llama.causal_lm_loss`` over the model's own parameters; any other runs
transformers' forward, unchanged, with the same weights. transformers keeps its layouts, so each
served call fuses them into coda's (``coda_spec.nn.layout``: ``w_qkv`` and ``w_gu``) with
differentiable torch ops: gradients reach the original parameters, and the fused copies cost one
read and write of the QKV and gate/up weights per step (``coda_spec.nn.LlamaForCausalLM`` keeps
coda's layout and pays nothing).

Which calls coda serves follows Liger-Kernel's patched forward (``skip_logits``): the logits are
made only when asked for. A call is served when it has ``input_ids`` and ``labels`` and either
the model is training or autograd is recording (Liger: training only; a model fresh from
``from_pretrained`` is in eval mode, and a loop that never calls ``train()`` should not silently
leave the chains), and every other keyword is one the coda model honours
(``coda_spec.nn.call.HONOURED``) or asks for nothing (``use_cache=False``). It returns
transformers' ``CausalLMOutputWithPast`` with the loss and ``logits=None`` (a tuple
``(loss,)`` under ``return_dict=False``). ``skip_logits=True`` forces coda (its door refuses what
it cannot serve, saying why); ``skip_logits=False`` forces transformers' forward (logits, and
transformers' loss when labels are given). So ``Trainer.train`` runs coda, while
``Trainer.evaluate`` (eval mode, no grad), ``model.generate`` (no labels, a cache) and a call for
logits run transformers'.

The patched forward carries the original's signature (``functools.wraps``): positional
arguments bind as transformers' do, and ``Trainer`` sees the columns and loss keywords
(``num_items_in_batch``) the model takes. Patching a patched model re-patches its original.
"""

from __future__ import annotations

import functools
import inspect

import torch

from coda_spec.nn import layout
from coda_spec.nn.call import HONOURED, REFUSED
from coda_spec.nn.llama import (
    LlamaShape,
    causal_lm_loss,
    chain_ops,
    checked_chunk_rows,
    rope_table,
)
from coda_spec.runtime import CodaRuntimeError

# keywords the patched forward reads itself: Liger's flag, and the output's form
_OWN = ("skip_logits", "return_dict")


def hf_root(model, shape: LlamaShape) -> dict:
    """A transformers Llama's embedding, final norm and (untied) LM head, under coda's names."""
    m = model.model
    w = {"embed_tokens.weight": m.embed_tokens.weight, "norm": m.norm.weight}
    if not shape.tied:
        w["lm_head.weight"] = model.lm_head.weight
    return w


def hf_layer(layer, shape: LlamaShape) -> dict:
    """A transformers decoder layer's weights under coda's names, fused into coda's layouts."""
    a, mlp = layer.self_attn, layer.mlp
    return {
        "w_qkv": layout.fuse_qkv(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, shape.head_dim),
        "w_o": a.o_proj.weight,
        "w_gu": layout.fuse_gate_up(mlp.gate_proj.weight, mlp.up_proj.weight),
        "w_down": mlp.down_proj.weight,
        "input_norm": layer.input_layernorm.weight,
        "post_norm": layer.post_attention_layernorm.weight,
    }


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    """A call's arguments by name, as transformers' forward binds them (its ``**kwargs``
    flattened in)."""
    bound = signature.bind_partial(*args, **kwargs).arguments
    out = {}
    for name, value in bound.items():
        kind = signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind != inspect.Parameter.VAR_POSITIONAL:
            out[name] = value
    return out


def drop_in(model, loss):
    """Patch ``model.forward`` (a transformers causal LM) to run ``loss(input_ids, labels, kw)``
    (a 0-dim loss; ``kw``: the call's other keywords) on the calls coda serves, and transformers'
    own forward on the rest (the module docstring); returns ``model``. A family's
    ``apply_to_hf_<family>`` is this over its loss."""
    from transformers.modeling_outputs import CausalLMOutputWithPast  # the model's own

    original = getattr(model.forward, "coda_original", model.forward)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def forward(*args, **kwargs):
        kw = _arguments(signature, args, kwargs)
        skip = kw.pop("skip_logits", None)
        kwargs.pop("skip_logits", None)  # transformers' forward does not take it
        return_dict = kw.pop("return_dict", None)
        input_ids, labels = kw.pop("input_ids", None), kw.pop("labels", None)
        if skip and labels is None:
            raise CodaRuntimeError(
                "forward(skip_logits=True) computes the loss without the logits and needs "
                "labels [batch, seq]; pass labels, or skip_logits=False for the logits"
            )
        if skip is None:
            unserved = [
                k
                for k, v in kw.items()
                if k not in HONOURED and not (k in REFUSED and (v is None or v is False))
            ]
            wants = model.training or torch.is_grad_enabled()
            skip = labels is not None and input_ids is not None and wants and not unserved
        if not skip:
            return original(*args, **kwargs)
        out = CausalLMOutputWithPast(loss=loss(input_ids, labels, kw), logits=None)
        return out.to_tuple() if return_dict is False else out

    forward.coda_original = original
    model.forward = forward
    return model


def apply_to_hf_llama(
    model, builds="build", tuned=None, recompute: bool = False, lm_head_chunk_rows=None
):
    """Patch ``model`` (a transformers ``LlamaForCausalLM``, or a ``MistralForCausalLM``: the same
    decoder, its sliding window read from its config) in place to train through coda's chains
    (the module docstring); returns it. ``builds``, ``tuned``, ``recompute``,
    ``lm_head_chunk_rows``: as ``coda_spec.nn.LlamaForCausalLM``'s."""
    shape = LlamaShape.of(model.config)
    rows = checked_chunk_rows(lm_head_chunk_rows)
    chains = chain_ops(shape, builds, tuned, recompute=recompute)
    return patch(model, shape, chains, rows)


def patch(
    model,
    shape: LlamaShape,
    chains: dict,
    rows,
    layer=hf_layer,
    qkv_inputs=(),
    glue=None,
    table=rope_table,
):
    """:func:`drop_in` over ``causal_lm_loss`` with ``chains`` (by role) on ``model``'s own
    parameters; returns ``model``. ``layer(decoder_layer, shape)``: a layer's weights under
    coda's names, fused per call (:func:`hf_layer`); ``qkv_inputs``, ``glue``: as
    ``causal_lm_loss``'s (a family's: Qwen2's QKV bias, Qwen3's q/k norm and RoPE in torch);
    ``table(shape, dtype, device)``: the RoPE frequencies the chains or the glue read."""
    tables: dict = {}  # (weights' dtype, device) -> RoPE table: the model may move later

    def loss(input_ids, labels, kw: dict):
        root = hf_root(model, shape)
        fused: dict = {}  # layer -> its fused weights, made once per call

        def within(i, fn):
            if i not in fused:
                fused[i] = layer(model.model.layers[i], shape)
            return fn(fused[i])

        first = root["embed_tokens.weight"]
        key = (first.dtype, first.device)
        if key not in tables:
            tables[key] = table(shape, first.dtype, first.device)
        return causal_lm_loss(
            chains,
            shape,
            root,
            within,
            input_ids,
            labels,
            tables[key],
            lm_head_chunk_rows=rows,
            qkv_inputs=qkv_inputs,
            glue=glue,
            **kw,
        )

    drop_in(model, loss)
    model.coda_chains = chains
    return model
