"""An OLMo-2 causal LM (transformers' ``Olmo2ForCausalLM``, ``model_type == "olmo2"``) whose
GEMMs run in the bundled chains, and whose post-norms, full-width QK-norm and RoPE run in torch.

OLMo-2 differs from Llama where the norms are: no norm before attention or the MLP; each block's
output is normalized before the residual add, and q and k are normalized over their WHOLE
projection (``NH*HD`` and ``NKV*HD`` wide, not per head) before rotate-half RoPE::

    x = embed(ids)
    for each layer:
        z = olmo2_qkv(x)                                     # x @ [q; k; v]^T, HF's rows
        q, k, v = rms_norm(z_q, q_norm), rms_norm(z_k, k_norm), z_v      # torch
        q, k = rope_half(q), rope_half(k)                                 # torch
        x = x + rms_norm(olmo2_attn_out(attn(q, k, v)), post_attention)   # torch norm + add
        x = x + rms_norm(olmo2_mlp(x), post_feedforward)                  # torch norm + add
    loss = llama3_lm_head(x, x * norm, rsqrt(mean(x^2) + eps), target, row_w)

**Glue with no fused form yet** (run in torch, differentiable ops, in the model's dtype with
transformers' fp32 upcast for bf16): the two post-norms and their residual adds, q_norm and
k_norm, and RoPE. Each is a norm of a GEMM's *output* that spans every N tile of that GEMM, so
its scale exists only after the GEMM; the Llama chains defer a pre-norm's row scale into the
GEMM that reads the normalized tensor, which OLMo-2 has none of (the next GEMM reads the
residual stream ``x0 + rms_norm(o)``, not ``o``). A host step after the GEMM could apply it, but
``coda grad`` derives no backward for such a host step (only a LayerNorm's), and a
``pairs: half`` RoPE epilogue stores one full-width tile, so the raw ``z`` (the norm's input)
and the rotated q/k cannot both leave the QKV kernel. The final norm's ``h2 = x * gamma_f`` and
``r2`` (statistics: the LM head's dx2 carries the norm's whole backward) are computed in torch
too, at the config's eps. docs/training.md, "OLMo-2", lists what would fuse them.

The LM head is the Llama's (``specs/llama3_lm_head.yaml``: no norm of its own, its row chunks,
``_LMHead``); attention is the Llama's (``_attention``: SDPA, causal, or the padding/packing
mask). Weights: ``w_qkv`` is transformers' ``q_proj``, ``k_proj`` and ``v_proj`` concatenated
(rows as they are: RoPE is rotate-half in torch, so no permutation), ``w_gu`` the Llama's
interleaved gate/up (``coda_spec.nn.layout``); every other weight is transformers' tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coda_spec.nn import layout
from coda_spec.nn.call import IGNORE_INDEX, checked
from coda_spec.nn.glue import compiled
from coda_spec.nn.hf import drop_in
from coda_spec.nn.llama import (
    LlamaShape,
    _attention,
    _LMHead,
    chain_ops,
    checked_chunk_rows,
    lm_head_chunks,
    spec_path,
)
from coda_spec.runtime import CodaRuntimeError

# role -> chain; the LM head is the Llama's (it has no norm of its own: it is given r2)
CHAINS = ("olmo2_qkv", "olmo2_attn_out", "olmo2_mlp", "llama3_lm_head")


def build_command() -> str:
    """The ``coda build`` that makes the chains an OLMo-2 needs."""
    return "coda build " + " ".join(spec_path(n) for n in CHAINS)


def olmo2_shape(config) -> LlamaShape:
    """An OLMo-2 config read as ``LlamaShape.of`` reads a Llama's (its refusals: biases, an MLP
    other than SwiGLU, attention dropout, RoPE that scales cos/sin), and what OLMo-2 alone asks
    for refused here."""
    if getattr(config, "model_type", None) != "olmo2":
        raise CodaRuntimeError(
            f"coda_spec.nn.olmo2 serves model_type 'olmo2'; got {config.model_type!r}: use "
            "coda_spec.nn.from_hf, which picks the family"
        )
    return LlamaShape.of(config)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' ``Olmo2RMSNorm``: in fp32 for a narrower dtype, the weight multiplied
    before the cast back; in the input's dtype for fp32 and fp64 (the CPU parity path)."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    y = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * y).to(x.dtype)


def rope_half(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int):
    """transformers' rotate-half RoPE of ``t [M, heads*HD]`` (``cos``/``sin``: ``[M, HD]``)."""
    m = t.shape[0]
    h = t.view(m, -1, head_dim)
    a, b = h[..., : head_dim // 2], h[..., head_dim // 2 :]
    rot = torch.cat((-b, a), dim=-1)
    return (h * cos[:, None] + rot * sin[:, None]).to(t.dtype).reshape(m, -1)


@compiled
def qk_norm_rope(z, q_norm, k_norm, cos, sin, dims: tuple) -> torch.Tensor:
    """The QKV chain's ``z`` with q and k each RMS-normalized over its full width and rotated
    (rotate-half), v as it is; ``dims``: (q width, k width, head_dim, eps). Compiled on the GPU
    (``coda_spec.nn.glue``)."""
    q_w, k_w, hd, eps = dims
    q = rope_half(rms_norm(z[:, :q_w], q_norm, eps), cos, sin, hd)
    k = rope_half(rms_norm(z[:, q_w : q_w + k_w], k_norm, eps), cos, sin, hd)
    return torch.cat([q, k, z[:, q_w + k_w :]], dim=1)


@compiled
def post_norm(x, out, weight, eps: float) -> torch.Tensor:
    """``x + rms_norm(out, weight)``: a block's post-norm and its residual add, compiled on the
    GPU (``coda_spec.nn.glue``)."""
    return x + rms_norm(out, weight, eps)


def olmo2_loss(chains, shape, root, within, input_ids, labels, inv_freq, rows=None, **kw):
    """The loss of an OLMo-2 (the module docstring), the one forward both
    :class:`Olmo2ForCausalLM` and the transformers patch run. ``root``: the embedding,
    ``norm`` and (untied) ``lm_head.weight``; ``within(i, fn)`` calls ``fn`` with layer ``i``'s
    weights (``w_qkv, w_o, w_gu, w_down, q_norm, k_norm, post_attention_norm,
    post_feedforward_norm``) where they are live. ``input_ids``, ``labels``, ``kw``: as
    ``coda_spec.nn.llama.causal_lm_loss`` takes them (``coda_spec.nn.call``)."""
    call = checked(input_ids, labels, kw, shape.vocab)
    b, s = call.ids.shape
    m = b * s
    eps, hd = shape.eps, shape.head_dim
    q_w, k_w = shape.heads * hd, shape.kv_heads * hd
    x = F.embedding(call.ids, root["embed_tokens.weight"]).reshape(m, shape.hidden)
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = call.pos[:, None].to(wide) * inv_freq.to(wide)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def layer(w: dict, x: torch.Tensor) -> torch.Tensor:
        z = chains["olmo2_qkv"](x=x, w_qkv=w["w_qkv"])["z"]
        qkv = qk_norm_rope(z, w["q_norm"], w["k_norm"], cos, sin, (q_w, k_w, hd, eps))
        y = _attention(qkv, shape, b, s, call.mask)
        o = chains["olmo2_attn_out"](y=y, w_o=w["w_o"])["o"]
        x1 = post_norm(x, o, w["post_attention_norm"], eps)
        d = chains["olmo2_mlp"](x1=x1, w_gu=w["w_gu"], w_down=w["w_down"])["d"]
        return post_norm(x1, d, w["post_feedforward_norm"], eps)

    for i in range(shape.layers):
        x = within(i, lambda w, x=x: layer(w, x))
    gamma_f = root["norm"]
    with torch.no_grad():  # the final norm's statistics; dx2 carries its backward (_LMHead)
        xw = x.to(wide)
        r2 = torch.rsqrt(xw.pow(2).mean(-1) + eps)
        h2 = x * gamma_f
    valid = call.target != IGNORE_INDEX
    row_w = valid.to(wide) / (valid.sum() if call.n is None else call.n)
    lm = root["embed_tokens.weight" if shape.tied else "lm_head.weight"]
    chunks = lm_head_chunks(m, shape.vocab, rows)
    head = chains["llama3_lm_head"]
    return _LMHead.apply(head, chunks, x, h2, r2, gamma_f, lm, call.target, row_w)


def _inv_freq(shape: LlamaShape, dtype, device) -> torch.Tensor:
    wide = dtype if dtype in (torch.float64, torch.float32) else torch.float32
    return torch.tensor(shape.inv_freq, dtype=torch.float32).to(dtype=wide, device=device)


def ops_for(shape: LlamaShape, builds, tuned) -> dict:
    """The chains' ops at ``shape``'s dims, by role (``CHAINS``)."""
    return chain_ops(shape, builds, tuned, command=build_command(), roles=CHAINS)


# transformers' names (under ``model.layers.<i>.``) of the weights held as they are
_PLAIN = {
    "w_o": "self_attn.o_proj.weight",
    "w_down": "mlp.down_proj.weight",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "post_attention_norm": "post_attention_layernorm.weight",
    "post_feedforward_norm": "post_feedforward_layernorm.weight",
}
_QKV = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")


def fused_layer(get) -> dict:
    """One layer's weights under coda's names from ``get(transformers' name)``: ``w_qkv`` the
    concatenated q/k/v rows, ``w_gu`` interleaved (differentiable: the patch runs it per step)."""
    out = {k: get(v) for k, v in _PLAIN.items()}
    out["w_qkv"] = torch.cat([get(n) for n in _QKV], dim=0)
    out["w_gu"] = layout.fuse_gate_up(get("mlp.gate_proj.weight"), get("mlp.up_proj.weight"))
    return out


def from_hf_state_dict(sd: dict, shape: LlamaShape) -> dict:
    """A transformers ``Olmo2ForCausalLM`` state dict in coda's names and layouts."""
    out = {"embed_tokens.weight": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"]}
    for i in range(shape.layers):
        w = fused_layer(lambda n, i=i: sd[f"model.layers.{i}.{n}"])
        out.update({f"layers.{i}.{k}": v for k, v in w.items()})
    if not shape.tied:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def to_hf_state_dict(sd: dict, shape: LlamaShape) -> dict:
    """coda's names and layouts back in transformers' (the inverse of
    :func:`from_hf_state_dict`; a tied model writes ``lm_head.weight`` as the embedding)."""
    out = {"model.embed_tokens.weight": sd["embed_tokens.weight"]}
    sizes = [n * shape.head_dim for n in (shape.heads, shape.kv_heads, shape.kv_heads)]
    for i in range(shape.layers):
        p, c = f"model.layers.{i}.", f"layers.{i}."
        out.update({p + v: sd[c + k] for k, v in _PLAIN.items()})
        out.update(zip((p + n for n in _QKV), torch.split(sd[c + "w_qkv"], sizes), strict=True))
        gate, up = layout.split_gate_up(sd[c + "w_gu"])
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
    out["model.norm.weight"] = sd["norm"]
    out["lm_head.weight"] = sd["embed_tokens.weight" if shape.tied else "lm_head.weight"]
    return {k: v.contiguous() for k, v in out.items()}


class Olmo2ForCausalLM(torch.nn.Module):
    """An OLMo-2 causal LM from the bundled chains (the module docstring). ``config``: a
    transformers ``Olmo2Config``; ``builds``, ``tuned``, ``lm_head_chunk_rows``, ``dtype``,
    ``device``: as ``coda_spec.nn.LlamaForCausalLM``'s (no ``recompute``: OLMo-2's MLP chain
    has no recompute form yet). Parameters get transformers' initialisation (normal(0, 0.02),
    norms at 1); load weights with :meth:`from_hf` or :meth:`load_hf_state_dict`."""

    def __init__(
        self,
        config,
        builds="build",
        tuned=None,
        dtype=torch.bfloat16,
        device=None,
        lm_head_chunk_rows: int | None = None,
        recompute: bool = False,
    ):
        super().__init__()
        if recompute:
            raise CodaRuntimeError(
                "recompute=True: the coda OLMo-2 has no recompute chains yet (its MLP chain "
                "saves the gate/up pre-activation); drop recompute="
            )
        self.config = config
        self.lm_head_chunk_rows = checked_chunk_rows(lm_head_chunk_rows)
        self.shape = sh = olmo2_shape(config)
        self.chains = ops_for(sh, builds, tuned)
        kw = {"dtype": dtype, "device": device}
        self.embed_tokens = torch.nn.Embedding(sh.vocab, sh.hidden, **kw)
        self.layers = torch.nn.ModuleList(_Layer(sh, kw) for _ in range(sh.layers))
        self.norm = torch.nn.Parameter(torch.ones(sh.hidden, **kw))
        if not sh.tied:
            self.lm_head = torch.nn.Linear(sh.hidden, sh.vocab, bias=False, **kw)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm"):
                    p.normal_(0.0, 0.02)
        self.register_buffer("inv_freq", _inv_freq(sh, dtype, device), persistent=False)

    def forward(self, input_ids=None, labels=None, **kw):
        """The mean cross-entropy of next-token prediction (:func:`olmo2_loss`); takes what
        ``coda_spec.nn.LlamaForCausalLM.forward`` takes."""
        root = {"embed_tokens.weight": self.embed_tokens.weight, "norm": self.norm}
        if not self.shape.tied:
            root["lm_head.weight"] = self.lm_head.weight
        layers = self.layers
        return olmo2_loss(
            self.chains,
            self.shape,
            root,
            lambda i, fn: layers[i](fn),
            input_ids,
            labels,
            self.inv_freq,
            self.lm_head_chunk_rows,
            **kw,
        )

    @classmethod
    def from_hf(cls, model_or_state_dict, config=None, **kw) -> Olmo2ForCausalLM:
        """A model with the weights of a transformers ``Olmo2ForCausalLM`` (or its state dict,
        with ``config``), in their dtype and device unless ``dtype``/``device`` are given."""
        sd = model_or_state_dict
        if not isinstance(sd, dict):
            config = config or sd.config
            sd = sd.state_dict()
        if config is None:
            raise CodaRuntimeError("from_hf(state_dict) needs the model's config=")
        first = sd["model.embed_tokens.weight"]
        kw.setdefault("dtype", first.dtype)
        kw.setdefault("device", first.device)
        model = cls(config, **kw)
        model.load_hf_state_dict(sd)
        return model

    def load_hf_state_dict(self, sd: dict) -> None:
        """Load weights in transformers' names and layouts."""
        self.load_state_dict(from_hf_state_dict(sd, self.shape))

    def to_hf_state_dict(self) -> dict:
        """The weights in transformers' names and layouts (what its ``load_state_dict`` takes)."""
        sd = {k: v.detach() for k, v in self.state_dict().items()}
        return to_hf_state_dict(sd, self.shape)


class _Layer(torch.nn.Module):
    """One decoder layer's weights in coda's layout; calling it runs ``fn`` on them (as
    ``coda_spec.nn.llama``'s layers: where FSDP2 gathers a sharded layer)."""

    def __init__(self, sh: LlamaShape, kw: dict):
        super().__init__()
        d, f, hd = sh.hidden, sh.inter, sh.head_dim
        q, kv = sh.heads * hd, sh.kv_heads * hd

        def p(*size):
            return torch.nn.Parameter(torch.empty(*size, **kw))

        self.w_qkv, self.w_o = p(q + 2 * kv, d), p(d, q)
        self.w_gu, self.w_down = p(2 * f, d), p(d, f)
        self.q_norm = torch.nn.Parameter(torch.ones(q, **kw))
        self.k_norm = torch.nn.Parameter(torch.ones(kv, **kw))
        self.post_attention_norm = torch.nn.Parameter(torch.ones(d, **kw))
        self.post_feedforward_norm = torch.nn.Parameter(torch.ones(d, **kw))

    def forward(self, fn):
        return fn(dict(self.named_parameters()))


def apply_to_hf_olmo2(model, builds="build", tuned=None, lm_head_chunk_rows=None, **kw):
    """Patch ``model`` (a transformers ``Olmo2ForCausalLM``) in place to train through coda's
    chains (``coda_spec.nn.hf.drop_in``: the calls coda serves, transformers' forward for the
    rest); returns it. Its weights stay transformers' parameters; each served call fuses
    ``w_qkv`` and ``w_gu`` from them with differentiable ops. ``kw``: ``recompute=True`` is
    refused, as by :class:`Olmo2ForCausalLM`."""
    if kw.get("recompute"):
        raise CodaRuntimeError("recompute=True: the coda OLMo-2 has no recompute chains yet")
    shape = olmo2_shape(model.config)
    rows = checked_chunk_rows(lm_head_chunk_rows)
    chains = ops_for(shape, builds, tuned)

    def loss(input_ids, labels, call_kw: dict):
        m = model.model
        root = {"embed_tokens.weight": m.embed_tokens.weight, "norm": m.norm.weight}
        if not shape.tied:
            root["lm_head.weight"] = model.lm_head.weight
        first = root["embed_tokens.weight"]
        inv_freq = _inv_freq(shape, first.dtype, first.device)

        def within(i, fn):
            named = dict(m.layers[i].named_parameters())
            return fn(fused_layer(named.__getitem__))

        return olmo2_loss(chains, shape, root, within, input_ids, labels, inv_freq, rows, **call_kw)

    drop_in(model, loss)
    model.coda_chains = chains
    return model
