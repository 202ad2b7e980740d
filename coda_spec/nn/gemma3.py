"""A Gemma-3 causal LM (text only: transformers' ``Gemma3ForCausalLM``, ``model_type ==
"gemma3_text"``), its feed-forward block (both its sandwich norms, the GeGLU MLP, the residual
add) and LM head in coda's chains, the rest of its glue in torch.

Gemma-3's decoder differs from Llama's in its glue (``transformers.models.gemma3``):

* RMSNorm scales by ``1 + w`` (weights stored zero-centred), computed in fp32;
* the embeddings are scaled by ``sqrt(hidden)`` (the scale cast to the weights' dtype first);
* four norms per layer, "sandwich" norms: ``input_layernorm`` before attention,
  ``post_attention_layernorm`` on the attention output BEFORE the residual add,
  ``pre_feedforward_layernorm`` before the MLP and ``post_feedforward_layernorm`` on its output
  before the residual add;
* per-head RMSNorm of q and k (``q_norm``, ``k_norm``, ``1 + w`` over ``head_dim``) before RoPE;
* attention scaled by ``query_pre_attn_scalar ** -0.5``;
* a GeGLU MLP (``gelu_pytorch_tanh``);
* layers of two types (``config.layer_types``): ``sliding_attention`` (a window of
  ``sliding_window`` tokens, RoPE at ``rope_local_base_freq``) and ``full_attention`` (causal,
  RoPE at ``rope_theta``, possibly scaled): two RoPE tables;
* a tied LM head (an untied one is served too).

The schedule, per layer (``causal_lm_loss``)::

    x = embed(ids) * sqrt(D)
    for each layer:
        q, k, v = norm(x, input_layernorm) @ w_qkv^T       # torch
        q, k = rope(norm_head(q), norm_head(k))            # torch, the layer type's table
        o = attention(q, k, v) @ w_o^T                     # SDPA, torch
        x = x + norm(o, post_attention_layernorm)          # torch
        x = gemma3_ffn(x, pre_ff, w_gu, w_down, post_ff)   # chain: x + norm(mlp(norm(x)))
    loss = llama3_lm_head(x, x * (1 + w_f), 1/rms(x), 1 + w_f, W_lm, target)   # chain

``specs/gemma3_ffn.yaml`` takes the residual stream x1 after attention and returns the layer's
output: the pre-feedforward norm as a prologue host step (``h = x1 (1 + g)``, ``sum x1^2``; its
row scale deferred into the gate/up GEMM's epilogue, with GeGLU), the post-feedforward norm in
two passes of the down GEMM (a ``sumsq`` of its output, then the GEMM again with
``x2 = x1 + acc r (1 + g)``): a sandwich norm normalizes a GEMM's OUTPUT, complete only after
that GEMM. Its backward is derived by ``coda grad``.

**No fused form yet** (differentiable torch ops, named here and in docs/training.md; the
norms, RoPE and the residual add compiled by ``torch.compile`` on the GPU,
``coda_spec.nn.glue``: :func:`input_norm`, :func:`qk_norm_rope`, :func:`post_norm`): the input
and post-attention norms and the per-head q/k norms, the attention block's residual add, the
embedding's scale, RoPE (transformers' rotate-half, on its own layout: no weight permutation),
the QKV and out-projection GEMMs (``F.linear``) and attention (SDPA, as the Llama's). The
per-head q/k norm is a prepass statistic ``coda grad`` does not derive (docs/grad.md,
"Limits"); the post-attention norm and the input norm could take the same forms as the
feed-forward block's (a two-pass out-projection; a prologue) but have no chain yet. The
chains that run are the ones whose backward is derived: ``specs/gemma3_ffn.yaml`` and the
Llama's LM head
``specs/llama3_lm_head.yaml`` unchanged (Gemma's final norm is the Llama's with ``1 + w`` for
gamma: given ``gamma_f = 1 + w``, the chain's dgamma_f is w's gradient; h2 and r2 are made in
torch at ``rms_norm_eps``).

Precision follows transformers: the norms and RoPE's angles are computed in fp32 (fp64 in an
fp64 model, so the CPU parity test compares the math) and cast back to the weights' dtype.

Weights: transformers' tensors as they are, but for two fused ones held as parameters and
mapped both ways at load and save (:func:`from_hf_state_dict`, :func:`to_hf_state_dict`):
``w_qkv = [q_proj; k_proj; v_proj]`` (rows concatenated, no permutation: RoPE runs in torch on
transformers' layout) and ``w_gu`` (gate and up rows interleaved, ``coda_spec.nn.layout``: the
pairs ``geglu`` reads). The transformers patch (:func:`apply_to_hf_gemma3`) fuses them per step,
as the Llama's does.

Refused with a ``CodaRuntimeError`` (:meth:`Gemma3Shape.of`): logit softcapping (final or
attention), bidirectional attention, attention biases and dropout, an activation other than
``gelu_pytorch_tanh``, RoPE that scales cos/sin, a layer type other than the two, and
``recompute=True``; the multimodal ``Gemma3ForConditionalGeneration`` (``model_type ==
"gemma3"``) is refused by the entry point (``coda_spec.nn.families``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from coda_spec.nn import layout
from coda_spec.nn.call import IGNORE_INDEX, checked
from coda_spec.nn.glue import compiled
from coda_spec.nn.hf import drop_in
from coda_spec.nn.llama import (
    LlamaForCausalLM,
    _attention,
    _LMHead,
    chain_ops,
    checked_chunk_rows,
    lm_head_chunks,
    require_transformers,
    spec_path,
    windowed,
)
from coda_spec.runtime import CodaRuntimeError

# role -> chain: Gemma's feed-forward block, and the Llama's LM head unchanged
CHAINS = ("gemma3_ffn", "llama3_lm_head")
SLIDING, FULL = "sliding_attention", "full_attention"
MULTIMODAL = (
    "model_type 'gemma3' is Gemma-3's multimodal model (Gemma3ForConditionalGeneration: a vision "
    "tower and a projector around the text decoder); coda_spec.nn serves the text decoder alone, "
    "model_type 'gemma3_text' (Gemma3ForCausalLM): train a text-only Gemma3ForCausalLM (e.g. "
    "Gemma3ForCausalLM(config.text_config) with the language model's weights), or train the "
    "multimodal model with transformers"
)


def build_command() -> str:
    """The ``coda build`` that makes the chains a Gemma-3 needs."""
    return "coda build " + " ".join(spec_path(n) for n in CHAINS)


@dataclass(frozen=True)
class Gemma3Shape:
    """A ``Gemma3TextConfig`` read once: the chains' dims, and what the model needs besides."""

    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    tied: bool
    scaling: float  # attention's logit scale, query_pre_attn_scalar ** -0.5
    window: int  # a sliding layer's window (tokens, the query included)
    sliding: tuple  # per layer: True for sliding_attention, False for full_attention
    inv_freq: dict  # layer type -> RoPE's per-pair frequencies (a tuple), as transformers'
    pad: int | None  # the embedding's padding_idx (its row gets no gradient, as transformers')

    @property
    def dims(self) -> dict:
        """The chains' static dims (``specs/gemma3_ffn.yaml``, ``specs/llama3_lm_head.yaml``)."""
        return {"D": self.hidden, "F": self.inter, "V": self.vocab}

    @classmethod
    def of(cls, config) -> Gemma3Shape:
        """From a transformers ``Gemma3TextConfig`` (transformers in ``versions.TRANSFORMERS``).
        What the model cannot serve is a ``CodaRuntimeError`` saying what to do."""
        require_transformers()
        kind = getattr(config, "model_type", None)
        if kind == "gemma3":
            raise CodaRuntimeError(MULTIMODAL)
        if kind != "gemma3_text":
            raise CodaRuntimeError(
                f"coda_spec.nn.Gemma3ForCausalLM takes a Gemma3TextConfig (model_type "
                f"'gemma3_text'); got model_type {kind!r}: use coda_spec.nn.from_hf, which "
                "dispatches on it"
            )
        _refuse(config)
        heads = config.num_attention_heads
        window = config.sliding_window
        types = tuple(config.layer_types)
        odd = sorted(set(types) - {SLIDING, FULL})
        if odd:
            raise CodaRuntimeError(
                f"this Gemma-3 config's layer_types has {odd}: the coda Gemma-3 serves "
                f"{SLIDING!r} and {FULL!r} layers; train this model with transformers"
            )
        if SLIDING in types and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise CodaRuntimeError(
                f"this Gemma-3 config's sliding_window is {window!r}: give a positive int (the "
                "tokens a sliding layer's query attends to, itself included)"
            )
        return cls(
            config.vocab_size,
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            heads,
            config.num_key_value_heads,
            config.head_dim,
            float(config.rms_norm_eps),
            bool(config.tie_word_embeddings),
            float(config.query_pre_attn_scalar) ** -0.5,
            window,
            tuple(t == SLIDING for t in types),
            _inv_freq(config),
            config.pad_token_id,
        )


def _refuse(config) -> None:
    """The config fields the model does not serve (:meth:`Gemma3Shape.of`)."""
    for field in ("final_logit_softcapping", "attn_logit_softcapping"):
        cap = getattr(config, field, None)
        if cap is not None:
            raise CodaRuntimeError(
                f"this Gemma-3 config's {field} is {cap}: the coda Gemma-3 has no logit "
                f"softcapping; set config.{field} = None (Gemma-3's checkpoints have none), or "
                "train with transformers"
            )
    if getattr(config, "use_bidirectional_attention", False):
        raise CodaRuntimeError(
            "this Gemma-3 config has use_bidirectional_attention: the coda Gemma-3 is a causal "
            "LM; train this model with transformers"
        )
    if getattr(config, "attention_bias", False):
        raise CodaRuntimeError("the coda Gemma-3 has no attention biases (attention_bias=True)")
    act = getattr(config, "hidden_activation", None)
    if act != "gelu_pytorch_tanh":
        raise CodaRuntimeError(
            f"the coda Gemma-3's MLP is GeGLU with gelu_pytorch_tanh (the tanh approximation); "
            f"this config's hidden_activation is {act!r}"
        )
    dropout = getattr(config, "attention_dropout", 0.0)
    if dropout:
        raise CodaRuntimeError(
            f"this config's attention_dropout is {dropout}: coda's attention (SDPA) runs "
            "without dropout; set config.attention_dropout = 0.0, or train with transformers"
        )


def _inv_freq(config) -> dict:
    """RoPE's frequencies per layer type, read off transformers' ``Gemma3RotaryEmbedding``
    built for the config (its ``rope_parameters`` per layer type, any ``rope_type`` whose
    attention scaling is 1: Gemma-3's ``linear`` scaling of the full layers is served)."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    rotary = Gemma3RotaryEmbedding(config)
    out = {}
    for kind in sorted(set(config.layer_types)):
        scaling = getattr(rotary, f"{kind}_attention_scaling")
        if scaling != 1.0:
            raise CodaRuntimeError(
                f"the {kind} layers' RoPE ({rotary.rope_type[kind]!r}) scales cos/sin by "
                f"{scaling}; the coda Gemma-3 does not: train with transformers"
            )
        out[kind] = tuple(getattr(rotary, f"{kind}_inv_freq").float().tolist())
    return out


def _wide(t: torch.Tensor) -> torch.dtype:
    """transformers' fp32 islands, fp64 in an fp64 model (the parity test's math)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def rope_freqs(shape: Gemma3Shape, device=None) -> dict:
    """``{layer type: inv_freq [HD/2]}``: transformers' fp32 frequencies, on ``device`` (made
    once: the model holds them as buffers, the patch per device)."""
    return {
        kind: torch.tensor(f, dtype=torch.float32, device=device)
        for kind, f in shape.inv_freq.items()
    }


def _rotary(pos: torch.Tensor, inv_freq: torch.Tensor, like: torch.Tensor) -> tuple:
    """cos and sin ``[M, 1, HD]`` of transformers' rotate-half RoPE at positions ``pos [M]``,
    the angles in fp32 (:func:`_wide`), cast to ``like``'s dtype."""
    wide = _wide(like)
    angles = pos[:, None].to(wide) * inv_freq.to(wide)[None]
    emb = torch.cat((angles, angles), dim=-1)[:, None]
    return emb.cos().to(like.dtype), emb.sin().to(like.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """``Gemma3RMSNorm``: ``x * rsqrt(mean(x^2) + eps) * (1 + w)`` over the last dim, in fp32
    (:func:`_wide`), cast back to x's dtype; differentiable torch ops, which ``torch.compile``
    fuses on the GPU (``coda_spec.nn.glue``: it saves x and the row scale, not fp32 copies of
    the row)."""
    xf = x.to(_wide(x))
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.to(xf.dtype))).to(
        x.dtype
    )


@compiled
def input_norm(x, w, eps: float) -> torch.Tensor:
    """The input norm before the QKV projection (compiled on the GPU)."""
    return _norm(x, w, eps)


@compiled
def qk_norm_rope(qkv, q_norm, k_norm, cos, sin, dims: tuple) -> torch.Tensor:
    """q and k of ``qkv [M, (H + 2 KV) HD]`` each normalized per head (``(1 + w)``) and rotated
    (rotate-half), v as it is; ``dims``: (H, KV, HD, eps). Compiled on the GPU."""
    h, kv, hd, eps = dims
    m = qkv.shape[0]
    q, k, v = qkv.view(m, h + 2 * kv, hd).split([h, kv, kv], dim=1)
    q = _rope(_norm(q, q_norm, eps), cos, sin)
    k = _rope(_norm(k, k_norm, eps), cos, sin)
    return torch.cat([q, k, v], dim=1).view(m, (h + 2 * kv) * hd)


@compiled
def post_norm(x, out, w, eps: float) -> torch.Tensor:
    """``x + _norm(out, w)``: the post-attention norm and its residual add (compiled on
    the GPU)."""
    return x + _norm(out, w, eps)


def causal_lm_loss(
    chains: dict,
    shape: Gemma3Shape,
    root: dict,
    within,
    input_ids,
    labels,
    freqs: dict,
    *,
    lm_head_chunk_rows: int | None = None,
    **kw,
):
    """The loss of a Gemma-3, the one forward both :class:`Gemma3ForCausalLM` and the
    transformers patch run (the module docstring's schedule). ``root``: the embedding,
    ``norm`` and (untied) ``lm_head.weight``; ``within(i, fn)`` calls ``fn`` with layer ``i``'s
    weights (``w_qkv, q_norm, k_norm, w_o, w_gu, w_down`` and the four norms) where they are
    live; ``freqs``: :func:`rope_freqs`. ``input_ids``, ``labels`` and ``kw``: as transformers
    takes them, each honoured or refused (``coda_spec.nn.call``); ``lm_head_chunk_rows`` as the
    Llama's."""
    rows = checked_chunk_rows(lm_head_chunk_rows)
    call = checked(input_ids, labels, kw, shape.vocab)
    b, s = call.ids.shape
    m, eps = b * s, shape.eps
    h, kv, hd = shape.heads, shape.kv_heads, shape.head_dim
    weight = root["embed_tokens.weight"]
    # Gemma3TextScaledWordEmbedding: the fp32 scale cast to the weights' dtype, then multiplied
    scale = torch.tensor(shape.hidden**0.5).to(weight.dtype).item()
    x = F.embedding(call.ids, weight, padding_idx=shape.pad).reshape(m, shape.hidden) * scale
    masks = {False: call.mask, True: windowed(call.mask, shape.window, s, call.ids.device)}
    tables = {
        sliding: _rotary(call.pos, freqs[SLIDING if sliding else FULL], x)
        for sliding in set(shape.sliding)
    }

    def layer(w: dict, x, sliding: bool):
        qkv = F.linear(input_norm(x, w["input_norm"], eps), w["w_qkv"])
        cos, sin = tables[sliding]
        qkv = qk_norm_rope(qkv, w["q_norm"], w["k_norm"], cos, sin, (h, kv, hd, eps))
        y = _attention(qkv, shape, b, s, masks[sliding], scale=shape.scaling)
        x = post_norm(x, F.linear(y, w["w_o"]), w["post_attn_norm"], eps)
        ffn = chains["gemma3_ffn"]
        return ffn(
            x1=x,
            g_pre=w["pre_ff_norm"],
            w_gu=w["w_gu"],
            w_down=w["w_down"],
            g_post=w["post_ff_norm"],
        )["x2"]

    for i, sliding in enumerate(shape.sliding):
        x = within(i, lambda w, x=x, sliding=sliding: layer(w, x, sliding))
    valid = call.target != IGNORE_INDEX
    wide = _wide(x)
    row_w = valid.to(wide) / (valid.sum() if call.n is None else call.n)
    gamma_f = 1.0 + root["norm"]  # Gemma's (1 + w): the chain's dgamma_f is w's gradient
    with torch.no_grad():  # the final norm's statistics: the chain's dx2 covers their paths
        h2 = x * gamma_f
        xf = x.to(wide)
        r2 = torch.rsqrt(xf.pow(2).mean(-1) + eps).to(wide)
    lm = root["embed_tokens.weight" if shape.tied else "lm_head.weight"]
    chunks = lm_head_chunks(m, shape.vocab, rows)
    head = chains["llama3_lm_head"]
    return _LMHead.apply(head, chunks, x, h2, r2, gamma_f, lm, call.target, row_w)


def from_hf_state_dict(sd: dict, shape: Gemma3Shape) -> dict:
    """A transformers ``Gemma3ForCausalLM`` state dict in coda's names and layouts."""
    out = {"embed_tokens.weight": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"]}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        out.update({f"layers.{i}.{k}": v for k, v in _fused(sd, p).items()})
    if not shape.tied:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


# coda's per-layer name -> transformers' (under model.layers.<i>.), the weights kept as they are
_SAME = {
    "w_o": "self_attn.o_proj.weight",
    "w_down": "mlp.down_proj.weight",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "input_norm": "input_layernorm.weight",
    "post_attn_norm": "post_attention_layernorm.weight",
    "pre_ff_norm": "pre_feedforward_layernorm.weight",
    "post_ff_norm": "post_feedforward_layernorm.weight",
}


def _fused(get, prefix: str) -> dict:
    """One layer's weights in coda's names (``get``: transformers' tensors by name), fused with
    differentiable ops (the patch runs it per step)."""
    a, mlp = prefix + "self_attn.", prefix + "mlp."
    qkv = [get[a + f"{n}_proj.weight"] for n in "qkv"]
    return {
        "w_qkv": torch.cat(qkv, dim=0),
        "w_gu": layout.fuse_gate_up(get[mlp + "gate_proj.weight"], get[mlp + "up_proj.weight"]),
        **{k: get[prefix + v] for k, v in _SAME.items()},
    }


def to_hf_state_dict(sd: dict, shape: Gemma3Shape) -> dict:
    """coda's names and layouts back in transformers' (the inverse of
    :func:`from_hf_state_dict`; ``lm_head.weight`` is the embedding when tied, as transformers'
    own state dict has it)."""
    out = {"model.embed_tokens.weight": sd["embed_tokens.weight"]}
    sizes = [shape.heads * shape.head_dim] + [shape.kv_heads * shape.head_dim] * 2
    for i in range(shape.layers):
        p, c = f"model.layers.{i}.", f"layers.{i}."
        q, k, v = torch.split(sd[c + "w_qkv"], sizes)
        gate, up = layout.split_gate_up(sd[c + "w_gu"])
        out.update(
            {p + f"self_attn.{n}_proj.weight": t for n, t in zip("qkv", (q, k, v), strict=True)}
        )
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
        out.update({p + v: sd[c + k] for k, v in _SAME.items()})
    out["model.norm.weight"] = sd["norm"]
    out["lm_head.weight"] = sd["embed_tokens.weight" if shape.tied else "lm_head.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def _chains(shape: Gemma3Shape, builds, tuned, recompute) -> dict:
    if recompute:
        raise CodaRuntimeError(
            "recompute=True: the coda Gemma-3 has no recompute chains; its feed-forward block "
            "saves its gate/up pre-activation (specs/gemma3_ffn.yaml): leave recompute=False"
        )
    return chain_ops(shape, builds, tuned, command=build_command(), roles=CHAINS)


class Gemma3ForCausalLM(torch.nn.Module):
    """A Gemma-3 causal LM (text only) from the bundled chains and torch (the module
    docstring). ``config``: a transformers ``Gemma3TextConfig``. ``builds``, ``tuned``,
    ``lm_head_chunk_rows``: as ``coda_spec.nn.LlamaForCausalLM``'s; ``recompute`` is refused
    (no recompute chains yet). Parameters are created in ``dtype`` on ``device`` with
    transformers' initialisation (normal(0, 0.02), norms at 0: the scale is ``1 + w``); load
    weights with :meth:`from_hf` or :meth:`load_hf_state_dict`."""

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
        super().__init__()
        self.config = config
        self.lm_head_chunk_rows = checked_chunk_rows(lm_head_chunk_rows)
        self.shape = sh = Gemma3Shape.of(config)
        self.chains = _chains(sh, builds, tuned, recompute)
        kw = {"dtype": dtype, "device": device}
        self.embed_tokens = torch.nn.Embedding(sh.vocab, sh.hidden, **kw)
        self.layers = torch.nn.ModuleList(_Layer(sh, kw) for _ in range(sh.layers))
        self.norm = torch.nn.Parameter(torch.zeros(sh.hidden, **kw))
        if not sh.tied:
            self.lm_head = torch.nn.Linear(sh.hidden, sh.vocab, bias=False, **kw)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm"):
                    p.normal_(0.0, 0.02)
        for kind, f in rope_freqs(sh, device).items():
            self.register_buffer(f"freqs_{kind}", f, persistent=False)

    def forward(self, input_ids=None, labels=None, **kw):
        """The mean cross-entropy of next-token prediction (:func:`causal_lm_loss`). Takes
        transformers' ``attention_mask``, ``position_ids`` and ``num_items_in_batch``; refuses
        every other keyword (``coda_spec.nn.call``)."""
        root = {"embed_tokens.weight": self.embed_tokens.weight, "norm": self.norm}
        if not self.shape.tied:
            root["lm_head.weight"] = self.lm_head.weight
        layers = self.layers
        return causal_lm_loss(
            self.chains,
            self.shape,
            root,
            lambda i, fn: layers[i](fn),
            input_ids,
            labels,
            {kind: getattr(self, f"freqs_{kind}") for kind in self.shape.inv_freq},
            lm_head_chunk_rows=self.lm_head_chunk_rows,
            **kw,
        )

    # from a transformers model or its state dict (with config=), as the Llama's: its
    # load_hf_state_dict is this class's
    from_hf = classmethod(LlamaForCausalLM.from_hf.__func__)

    def load_hf_state_dict(self, sd: dict) -> None:
        """Load weights in transformers' names and layouts (:func:`from_hf_state_dict`)."""
        self.load_state_dict(from_hf_state_dict(sd, self.shape))

    def to_hf_state_dict(self) -> dict:
        """The weights in transformers' names and layouts (what its ``load_state_dict`` takes)."""
        sd = {k: v.detach() for k, v in self.state_dict().items()}
        return to_hf_state_dict(sd, self.shape)


class _Layer(torch.nn.Module):
    """One decoder layer's weights in coda's names; calling it runs ``fn`` on them (where FSDP2
    gathers a sharded layer's weights, as the Llama's ``_Layer``)."""

    def __init__(self, sh: Gemma3Shape, kw: dict):
        super().__init__()
        d, f, hd = sh.hidden, sh.inter, sh.head_dim

        def weight(*size):
            return torch.nn.Parameter(torch.empty(*size, **kw))

        self.w_qkv = weight((sh.heads + 2 * sh.kv_heads) * hd, d)
        self.w_o = weight(d, sh.heads * hd)
        self.w_gu = weight(2 * f, d)
        self.w_down = weight(d, f)
        for name, n in (("q_norm", hd), ("k_norm", hd)):
            setattr(self, name, torch.nn.Parameter(torch.zeros(n, **kw)))
        for name in ("input_norm", "post_attn_norm", "pre_ff_norm", "post_ff_norm"):
            setattr(self, name, torch.nn.Parameter(torch.zeros(d, **kw)))

    def forward(self, fn):
        return fn(dict(self.named_parameters()))


def apply_to_hf_gemma3(
    model, builds="build", tuned=None, recompute: bool = False, lm_head_chunk_rows=None
):
    """Patch ``model`` (a transformers ``Gemma3ForCausalLM``) in place to train through coda's
    chains (``coda_spec.nn.hf.drop_in``: the calls coda serves run :func:`causal_lm_loss` over
    the model's own parameters, its QKV and gate/up weights fused per call with differentiable
    ops; the rest run transformers' forward); returns it. Arguments as
    :class:`Gemma3ForCausalLM`'s."""
    shape = Gemma3Shape.of(model.config)
    rows = checked_chunk_rows(lm_head_chunk_rows)
    chains = _chains(shape, builds, tuned, recompute)
    tables: dict = {}  # device -> rope_freqs: the model may move later

    def loss(input_ids, labels, kw: dict):
        m = model.model
        device = m.embed_tokens.weight.device
        if device not in tables:
            tables[device] = rope_freqs(shape, device)
        root = {"embed_tokens.weight": m.embed_tokens.weight, "norm": m.norm.weight}
        if not shape.tied:
            root["lm_head.weight"] = model.lm_head.weight

        def within(i, fn):
            layer = dict(m.layers[i].named_parameters())
            return fn(_fused(layer, ""))

        return causal_lm_loss(
            chains,
            shape,
            root,
            within,
            input_ids,
            labels,
            tables[device],
            lm_head_chunk_rows=rows,
            **kw,
        )

    drop_in(model, loss)
    model.coda_chains = chains
    return model
