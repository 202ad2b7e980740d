"""``apply_to_hf_llama``: a transformers ``LlamaForCausalLM`` trained through coda's chains.

The patch replaces the model's ``forward`` (an instance attribute: its class, its modules and its
``state_dict`` are untouched) with ``coda_spec.nn.llama.causal_lm_loss`` over the model's own
parameters. transformers keeps its layouts, so each call fuses them into coda's
(``coda_spec.nn.layout``: ``w_qkv`` and ``w_gu``) with differentiable torch ops: gradients reach
the original parameters, and the fused copies cost one read and write of the QKV and gate/up
weights per step (``coda_spec.nn.LlamaForCausalLM`` keeps coda's layout and pays nothing).

What the patched forward serves: a training call with ``input_ids`` and ``labels`` (the loss; the
logits are never made, so the output's ``logits`` is None) and keywords the coda model honours
(``coda_spec.nn.call.HONOURED``: a padding ``attention_mask`` and packed ``position_ids``
included) or that ask for nothing (``use_cache=False``). Any other call (no labels, a cache,
``inputs_embeds``, a keyword the coda model does not know) runs transformers' own forward,
unchanged, as the unpatched model would.
"""

from __future__ import annotations

from coda_spec.nn import layout
from coda_spec.nn.call import HONOURED, REFUSED
from coda_spec.nn.llama import (
    LlamaShape,
    causal_lm_loss,
    chain_ops,
    checked_chunk_rows,
    rope_table,
)


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


def apply_to_hf_llama(
    model, builds="build", tuned=None, recompute: bool = False, lm_head_chunk_rows=None
):
    """Patch ``model`` (a transformers ``LlamaForCausalLM``) in place to train through coda's
    chains (the module docstring); returns it. ``builds``, ``tuned``, ``recompute``,
    ``lm_head_chunk_rows``: as ``coda_spec.nn.LlamaForCausalLM``'s."""
    from transformers.modeling_outputs import CausalLMOutputWithPast  # the patched model's own

    shape = LlamaShape.of(model.config)
    rows = checked_chunk_rows(lm_head_chunk_rows)
    chains = chain_ops(shape, builds, tuned, recompute=recompute)
    original = model.forward
    tables: dict = {}  # (weights' dtype, device) -> RoPE table: the model may move later

    def forward(input_ids=None, attention_mask=None, labels=None, **kw):
        unserved = [
            k
            for k, v in kw.items()
            if k not in HONOURED and not (k in REFUSED and (v is None or v is False))
        ]
        if labels is None or input_ids is None or unserved:
            return original(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kw)
        kw["attention_mask"] = attention_mask
        root = hf_root(model, shape)
        fused: dict = {}  # layer -> its fused weights, made once per call

        def within(i, fn):
            if i not in fused:
                fused[i] = hf_layer(model.model.layers[i], shape)
            return fn(fused[i])

        first = root["embed_tokens.weight"]
        key = (first.dtype, first.device)
        if key not in tables:
            tables[key] = rope_table(shape, first.dtype, first.device)
        table = tables[key]
        loss = causal_lm_loss(
            chains, shape, root, within, input_ids, labels, table, lm_head_chunk_rows=rows, **kw
        )
        return CausalLMOutputWithPast(loss=loss, logits=None)

    model.forward = forward
    model.coda_chains = chains
    return model
