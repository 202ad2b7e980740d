"""A Llama-3 causal LM whose every GEMM and its glue runs in the bundled chains.

The schedule is CODA's: a chain runs from one layer's attention output to the next layer's QKV,
so the layer boundary falls mid-block and every norm, residual add, SwiGLU and RoPE is folded
into a GEMM's epilogue (docs/training.md draws it)::

    x = embed(ids)
    qkv = llama3_first(x)                                  # norm 0, QKV 0, RoPE
    for i < L-1:  x, qkv = llama3_layer(x, attn(qkv))      # o-proj i .. QKV i+1
    x2, h2, r2 = llama3_last_mlp(x, attn(qkv))             # o-proj L-1 .. final norm's inputs
    loss = llama3_lm_head(x2, h2, r2, target, row_w = valid / n)   # and its gradients

Attention is torch's SDPA (causal, ``enable_gqa``: the flash kernel on the GPU) on q, k and v
viewed out of ``qkv``; embeddings stay in torch. The LM head is Liger's schedule in three
vocabulary GEMMs (``specs/llama3_lm_head.yaml``): one forward call computes the logits (stored
in bf16), the loss and, in the same call, the loss's gradients (dlogits in bf16, then dx2,
dgamma_f and dW_lm), so the logits GEMM runs once. The model makes that call once per row chunk
of the M tokens (:func:`lm_head_chunk`: C rows, the C x V bf16 logits at most
``LM_HEAD_CHUNK_BYTES``; dlogits is stored over them, in the same buffer), so the logits and
dlogits live only inside one chunk's call; the gradients are gathered over the chunks and held
until the backward scales them by the loss's incoming gradient (:class:`_LMHead`). No M x V fp32
tensor is made, and once M exceeds a chunk no M x V bf16 one. ``specs/llama3_last.yaml`` (the LM
head with four vocabulary GEMMs: its backward recomputes the logits) is kept for comparison; the
model no longer runs it.

A Mistral (``config.model_type == "mistral"``) is served by these chains: its decoder is Llama's,
and it differs in its config alone. Its sliding window is attention's: a band mask once the
sequence is longer than the window (:func:`windowed`).

Weights are coda's layout (``coda_spec.nn.layout``: fused QKV with rotary pairs adjacent,
interleaved gate/up), permuted once at load. Sizes: one build of each chain serves every config
whose dims its kernels support, re-sized at load (``coda_spec.ops.resized``); constructing a
model loads builds and never compiles. A config no build can serve is a ``CodaRuntimeError``
naming the ``coda build`` to run.

Memory: ``recompute=True`` runs the layers through ``llama3_layer_recompute`` and
``llama3_last_mlp_recompute``, which save ``h1`` (M x D) instead of the gate/up pre-activation
``z1`` (M x 2F) and recompute ``z1`` in the backward with one more GEMM per layer; their inputs
and the outputs the model reads are the plain chains', so :func:`causal_lm_loss` is the same.
The LM head holds, between forward and backward, dx2 (M x D bf16), dgamma_f and dW_lm (V x D
bf16: the weight's size, which the backward would make anyway), and inside one chunk's call one
C x V bf16 buffer (the logits, then dlogits written over them) with dv2 (C x D fp32); each
chunk's wgrad reduce-adds its dW_lm into the held one in place (the op's inplace flavour: no
second V x D buffer); docs/training.md has the arithmetic.

Dtypes: on the GPU the weights are bf16 (the chains' declared dtypes); on the CPU the chains run
their reference in fp64 or fp32 when every floating input has that dtype (CI's parity tests),
so the model's parameters, its RoPE table and its residual stream take the model's dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from coda_spec import ops, versions
from coda_spec.artifact import builddir
from coda_spec.nn import layout
from coda_spec.nn.call import IGNORE_INDEX, checked
from coda_spec.runtime import Chain, CodaRuntimeError, load

CHAINS = ("llama3_first", "llama3_layer", "llama3_last_mlp", "llama3_lm_head")
# recompute=True: the chain that serves each role (the same inputs and outputs the model reads;
# the MLP's gate/up pre-activation recomputed in the backward instead of saved)
RECOMPUTE = {
    "llama3_layer": "llama3_layer_recompute",
    "llama3_last_mlp": "llama3_last_mlp_recompute",
}


# The model's specs ship inside the package (``coda_spec/models/``: links to the repository's
# ``specs/``, their one home, copied into a wheel), so an installed coda can build them.
MODEL_SPECS = Path(__file__).resolve().parent.parent / "models"


def spec_path(name: str) -> str:
    """The spec of chain ``name`` as ``coda build`` takes it: ``specs/<name>.yaml`` where the
    working directory is a checkout's root (the same file), else the packaged one. Either
    builds to the same address (a build is hashed under the spec's file name alone)."""
    local = Path("specs", f"{name}.yaml")
    return str(local) if local.is_file() else str(MODEL_SPECS / f"{name}.yaml")


def build_command(recompute: bool = False) -> str:
    """The ``coda build`` that makes the chains a model needs."""
    names = [RECOMPUTE.get(n, n) if recompute else n for n in CHAINS]
    return "coda build " + " ".join(spec_path(n) for n in names)


# The LM head's row chunk: the most rows C (a multiple of LM_HEAD_CHUNK_ALIGN) whose C x V bf16
# logits are at most this many bytes. Its dlogits are stored over them (one buffer: store ...
# over: logits), which the runtime holds until the call returns, at the end of the forward, when
# every layer's saved activations live too: 512 MiB keeps it at 501 MiB (C = 2048 rows at V =
# 128256, a quarter of 8192 tokens) and a chunk's logits GEMM still has 16 x 501 output tiles
# of 128 x 256, enough for every SM.
LM_HEAD_CHUNK_BYTES = 512 << 20
# Chunks start at multiples of C: a multiple of 256 (the rule's) or of 8 (an override's) keeps
# each chunk's 4-byte row vectors (r2, target, row_w) 16-byte aligned, as TMA needs.
LM_HEAD_CHUNK_ALIGN = 256
LM_HEAD_OVERRIDE_ALIGN = 8


def lm_head_chunk(m: int, vocab: int, rows: int | None = None) -> int:
    """The LM head's chunk rows at ``m`` tokens and vocabulary ``vocab``: ``rows`` (an
    override, :func:`checked_chunk_rows`) or the rule: the largest multiple of
    ``LM_HEAD_CHUNK_ALIGN`` (at least one) with ``C * vocab * 2`` bytes at most
    ``LM_HEAD_CHUNK_BYTES``; never more than ``m``."""
    if rows is None:
        fit = LM_HEAD_CHUNK_BYTES // (2 * vocab) // LM_HEAD_CHUNK_ALIGN
        rows = LM_HEAD_CHUNK_ALIGN * max(1, fit)
    return min(rows, m)


def lm_head_chunks(m: int, vocab: int, rows: int | None = None) -> tuple:
    """The LM head's ``(start, stop)`` row chunks over ``m`` tokens (:func:`lm_head_chunk`
    rows each, the last one ragged; one chunk, possibly empty, when ``m`` fits)."""
    c = lm_head_chunk(m, vocab, rows)
    return tuple((i, min(i + c, m)) for i in range(0, m, c)) if m > c else ((0, m),)


def checked_chunk_rows(rows) -> int | None:
    """``lm_head_chunk_rows=`` as given: None (the rule) or a positive multiple of
    ``LM_HEAD_OVERRIDE_ALIGN``; anything else is a ``CodaRuntimeError``."""
    ok = isinstance(rows, int) and not isinstance(rows, bool) and rows > 0
    if rows is None or (ok and rows % LM_HEAD_OVERRIDE_ALIGN == 0):
        return rows
    raise CodaRuntimeError(
        f"lm_head_chunk_rows={rows!r}: give a positive multiple of {LM_HEAD_OVERRIDE_ALIGN} "
        "(each chunk's row vectors must start 16-byte aligned), or None for the rule "
        f"(C x V bf16 logits at most {LM_HEAD_CHUNK_BYTES >> 20} MiB)"
    )


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of transformers' ``LlamaConfig`` the model reads, for use without
    transformers; the defaults are Llama-3.2-1B's (RoPE without its ``llama3`` scaling: pass
    transformers' config for that)."""

    vocab_size: int = 128256
    hidden_size: int = 2048
    intermediate_size: int = 8192
    num_hidden_layers: int = 16
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    tie_word_embeddings: bool = True


@dataclass(frozen=True)
class LlamaShape:
    """A config read once: the chains' dims, and what the model needs besides."""

    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    tied: bool
    inv_freq: tuple  # RoPE's per-pair frequencies of one head, as transformers computes them
    # Mistral's sliding window: a query attends to itself and the window - 1 tokens before it
    # (transformers' sliding_window_overlay); None: full causal attention (:func:`_window`)
    window: int | None = None

    @property
    def dims(self) -> dict:
        """The chains' static dims (``specs/llama3_*.yaml``)."""
        return {
            "D": self.hidden,
            "F": self.inter,
            "NH": self.heads,
            "NKV": self.kv_heads,
            "HD": self.head_dim,
            "V": self.vocab,
        }

    @classmethod
    def of(cls, config) -> LlamaShape:
        """From a transformers ``LlamaConfig`` or ``MistralConfig`` (transformers in
        ``versions.TRANSFORMERS``) or a :class:`LlamaConfig`. What the chains cannot serve is a
        ``CodaRuntimeError``: biases, an MLP other than SwiGLU, attention dropout, RoPE that
        scales cos/sin."""
        if type(config).__module__.split(".")[0] == "transformers":
            require_transformers()
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise CodaRuntimeError("the coda Llama has no attention or MLP biases")
        act = getattr(config, "hidden_act", "silu")
        if act != "silu":
            raise CodaRuntimeError(f"the coda Llama's MLP is SwiGLU (silu); this config has {act}")
        dropout = getattr(config, "attention_dropout", 0.0)
        if dropout:
            raise CodaRuntimeError(
                f"this config's attention_dropout is {dropout}: coda's attention (SDPA) runs "
                "without dropout; set config.attention_dropout = 0.0, or train with transformers"
            )
        return cls(
            config.vocab_size,
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            heads,
            config.num_key_value_heads,
            head_dim,
            float(config.rms_norm_eps),
            bool(config.tie_word_embeddings),
            tuple(_inv_freq(config, head_dim).tolist()),
            _window(config),
        )


def require_transformers() -> None:
    """Refuse an installed transformers outside ``coda_spec.versions.TRANSFORMERS``: a
    ``CodaRuntimeError`` naming the supported range and the pip command."""
    why = versions.unsupported_transformers(versions.version("transformers"))
    if why:
        raise CodaRuntimeError(why)


def _window(config) -> int | None:
    """The sliding window of a Mistral config (``model_type == "mistral"``: transformers'
    ``MistralForCausalLM`` applies ``config.sliding_window`` on every layer, None meaning full
    causal attention); None for every other config (a Llama has none; a family whose window
    depends on other fields, as Qwen2's ``use_sliding_window``, reads it in its own port)."""
    if getattr(config, "model_type", None) != "mistral":
        return None
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise CodaRuntimeError(
            f"this Mistral config's sliding_window is {window!r}: give a positive int (the "
            "tokens a query attends to, itself included), or None for full causal attention"
        )
    return window


def _inv_freq(config, head_dim: int) -> torch.Tensor:
    """RoPE's frequencies: what transformers' own rotary embedding computes for its config
    (``rope_parameters``, any ``rope_type`` whose attention scaling is 1), else the default RoPE
    at ``rope_theta``. Read off a ``LlamaRotaryEmbedding`` built for the config, not its init
    functions: their signatures changed within 5.x (5.24 dropped ``device``)."""
    params = getattr(config, "rope_parameters", None)
    if params is None:
        theta = config.rope_theta
        return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # its configs'

    rotary = LlamaRotaryEmbedding(config)
    if rotary.attention_scaling != 1.0:
        kind = params.get("rope_type", "default")
        raise CodaRuntimeError(
            f"RoPE type {kind!r} scales cos/sin by {rotary.attention_scaling}; the rope "
            "primitive does not"
        )
    return rotary.inv_freq.float()


def rope_table(shape: LlamaShape, weights=torch.bfloat16, device=None) -> torch.Tensor:
    """``freqs [(NH + 2*NKV)*HD/2]``: one frequency per rotary pair of ``qkv``'s columns, the
    head's frequencies on every q and k head and 0 on v (cos 0 = 1: v passes unrotated). Its
    dtype follows the weights' dtype ``weights``: fp64 or fp32 weights get the table in theirs
    (the CPU kernels' wide path wants every floating input alike), others the chains' fp32."""
    inv = torch.tensor(shape.inv_freq, dtype=torch.float32)
    qk = inv.repeat(shape.heads + shape.kv_heads)
    v = torch.zeros(shape.kv_heads * shape.head_dim // 2)
    wide = weights in (torch.float64, torch.float32)
    return torch.cat([qk, v]).to(dtype=weights if wide else torch.float32, device=device)


def chain_ops(
    shape: LlamaShape,
    builds="build",
    tuned=None,
    recompute: bool = False,
    names: dict | None = None,
    command: str | None = None,
    roles: tuple = CHAINS,
) -> dict:
    """The chains' ops at ``shape``'s dims, keyed by role (``CHAINS``): ``builds`` is a
    build root (their ``-latest`` builds) or ``{chain name: build directory or Chain}``.
    ``recompute``: the layer and last roles are served by ``RECOMPUTE``'s chains (looked up under
    their own names). ``names``: ``{role: chain name}`` for a family whose chains differ from the
    Llama's (every role it names is served by that chain; roles it omits keep the Llama's), with
    ``command`` the ``coda build`` that makes them (for the message). ``roles``: the roles to
    load (a family whose layers split into other chains names its own; default the Llama's).
    Loads and re-sizes; compiles nothing."""
    command = command or build_command(recompute)
    got = {}
    for role in roles:
        name = RECOMPUTE.get(role, role) if recompute else role
        name = (names or {}).get(role, name)
        where = (
            builds.get(name) if isinstance(builds, dict) else builddir.latest(Path(builds), name)
        )
        if where is None or not (isinstance(where, Chain) or Path(where, "manifest.json").exists()):
            raise CodaRuntimeError(
                f"no build of {name} at {where if where is not None else builds}; run "
                f"{command} (docs/training.md)"
            )
        chain = where if isinstance(where, Chain) else load(where, tuned)
        dims = {k: v for k, v in shape.dims.items() if k in chain.manifest.static}
        # the LM head sums dW_lm over its row chunks into one buffer (_LMHead)
        op = ops.op(chain, dims=dims, inplace=role == "llama3_lm_head")
        eps = {s.eps for s in op.chain.manifest.all_steps if getattr(s, "op", "") == "rsqrt_mean"}
        if eps and eps != {shape.eps}:  # the LM head has no norm of its own: it is given r2
            raise CodaRuntimeError(
                f"{name}'s norms use eps {sorted(eps)}; this config's rms_norm_eps is "
                f"{shape.eps}: build a copy of the spec with that eps ({command})"
            )
        got[role] = op
    return got


def causal_lm_loss(
    chains: dict,
    shape: LlamaShape,
    root: dict,
    within,
    input_ids,
    labels,
    freqs,
    *,
    lm_head_chunk_rows: int | None = None,
    **kw,
):
    """The loss of a model, the one forward both :class:`LlamaForCausalLM` and the transformers
    patch run. ``root``: the embedding, ``norm`` and (untied) ``lm_head.weight``;
    ``within(i, fn)`` calls ``fn`` with layer ``i``'s weights (``w_qkv, w_o, w_gu, w_down,
    input_norm, post_norm``, coda's layouts) where they are live: inside layer ``i``'s module
    call for :class:`LlamaForCausalLM`, so FSDP2 (``fully_shard`` per layer) gathers them there.
    A chain that spans layers ``i`` and ``i + 1`` runs within both.

    ``input_ids``, ``labels`` and ``kw``: as transformers takes them, each honoured or refused
    (``coda_spec.nn.call``): labels shifted here (row ``t`` predicts ``labels[t + 1]``; ``-100``
    is ignored); ``num_items_in_batch`` (transformers' gradient accumulation) divides the summed
    loss instead of the count of valid targets; ``attention_mask`` and ``position_ids`` as
    transformers' (a padded or packed batch attends through a mask); a Mistral's sliding window
    (``shape.window``) as transformers' (:func:`windowed`).
    ``lm_head_chunk_rows``: the LM head's rows per chunk (:func:`lm_head_chunk`; None: the
    rule)."""
    rows = checked_chunk_rows(lm_head_chunk_rows)
    call = checked(input_ids, labels, kw, shape.vocab)
    b, s = call.ids.shape
    m = b * s
    pos, target = call.pos, call.target
    mask = windowed(call.mask, shape.window, s, call.ids.device)
    x = F.embedding(call.ids, root["embed_tokens.weight"]).reshape(m, shape.hidden)
    qkv = within(
        0,
        lambda w0: chains["llama3_first"](
            x=x, gamma=w0["input_norm"], w_qkv=w0["w_qkv"], pos=pos, freqs=freqs
        ),
    )["qkv"]

    def mlp(w: dict, y) -> dict:
        keep = {"w_o": "w_o", "gamma1": "post_norm", "w_gu": "w_gu", "w_down": "w_down"}
        return {"x0": x, "y": y, **{k: w[v] for k, v in keep.items()}}

    for i in range(shape.layers - 1):
        y = _attention(qkv, shape, b, s, mask)
        out = within(
            i,
            lambda wi, y=y, i=i: within(
                i + 1,
                lambda wn: chains["llama3_layer"](
                    **mlp(wi, y), gamma2=wn["input_norm"], w_qkv=wn["w_qkv"], pos=pos, freqs=freqs
                ),
            ),
        )
        x, qkv = out["x2"], out["qkv"]
    y = _attention(qkv, shape, b, s, mask)
    out = within(
        shape.layers - 1,
        lambda wl: chains["llama3_last_mlp"](**mlp(wl, y), gamma_f=root["norm"]),
    )
    valid = target != IGNORE_INDEX
    # the loss's per-row weight: a mean over the valid rows (or over num_items_in_batch)
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    row_w = valid.to(wide) / (valid.sum() if call.n is None else call.n)
    lm = root["embed_tokens.weight" if shape.tied else "lm_head.weight"]
    chunks = lm_head_chunks(m, shape.vocab, rows)
    head = chains["llama3_lm_head"]
    return _LMHead.apply(
        head, chunks, out["x2"], out["h2"], out["r2"], root["norm"], lm, target, row_w
    )


def windowed(mask, window: int | None, s: int, device) -> torch.Tensor | None:
    """The attention mask of a sequence of ``s`` tokens under a sliding window of ``window``
    tokens: ``mask`` (``coda_spec.nn.call``'s ``[B, 1, S, S]``, or None: causal) with each query
    ``i`` kept to keys ``i - window < j <= i``, transformers' ``sliding_window_overlay`` over
    sequence indices (within a packed sequence too, as transformers). When ``s <= window`` (or
    no window) every key a causal query sees is in its window: ``mask`` as given, so an unmasked
    batch keeps SDPA's ``is_causal`` (flash) path; past it, SDPA takes the ``[1, 1, S, S]``
    band (its math or memory-efficient kernel on the GPU, k and v repeated to the query heads)."""
    if window is None or s <= window:
        return mask
    i = torch.arange(s, device=device)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)  # [query, key]
    return band[None, None] if mask is None else mask & band


class _LMHead(torch.autograd.Function):
    """The LM head and its loss (``specs/llama3_lm_head.yaml``), one chain call per row chunk
    (``chunks``: ``(start, stop)`` pairs covering the M rows): each call computes its rows'
    loss (the chain's ``loss``: the weighted per-row ``nll`` summed in one fixed order) AND their
    gradients (dx2, dgamma_f, dW_lm: Liger's schedule, three vocabulary GEMMs). The chunks'
    losses are added in chunk order, so eager and compiled calls agree bit for bit; dx2's rows
    are the chunks' (one ``cat``); dgamma_f (fp32) is summed over the chunks and dW_lm (bf16,
    each chunk's rounded result reduce-added in bf16 into one zeroed buffer, the chain's
    ``dw_acc``: Liger's default; an fp32 accumulator would be V x D fp32 at the peak) gathers
    them in place. They are held until the backward, which scales them by the incoming
    gradient of the loss. Scaling always multiplies (a ``grad == 1`` test would read the value
    back, a host sync). ``h2``, ``r2``, ``target`` and ``row_w`` get no gradient: h2 and r2 are
    llama3_last_mlp's non-differentiable statistics, so x2's gradient reaches the last layer's
    backward through x2 alone, and a tied ``w_lm`` (the embedding) sums this gradient with the
    embedding's own."""

    @staticmethod
    def forward(ctx, head, chunks, x2, h2, r2, gamma_f, w_lm, target, row_w):
        loss = dgamma_f = None
        dw_lm = torch.zeros_like(w_lm)  # every chunk's wgrad reduce-adds into it (dw_acc)
        dx2 = []
        for i, j in chunks:
            out = head(
                x2=x2[i:j],
                h2=h2[i:j],
                r2=r2[i:j],
                gamma_f=gamma_f,
                w_lm=w_lm,
                target=target[i:j],
                row_w=row_w[i:j],
                dw_acc=dw_lm,
            )
            dx2.append(out["dx2"])
            dw_lm = out["dw_lm"]  # dw_acc itself, accumulated in place (the op's inplace flavour)
            if loss is None:
                loss, dgamma_f = out["loss"], out["dgamma_f"]
            else:
                loss = loss + out["loss"]
                dgamma_f = dgamma_f + out["dgamma_f"]
            del out  # nothing of this chunk's outlives it but dx2 and the sums
        ctx.save_for_backward(dx2[0] if len(dx2) == 1 else torch.cat(dx2), dgamma_f, dw_lm)
        return loss

    @staticmethod
    def backward(ctx, grad):
        dx2, dgamma_f, dw_lm = ctx.saved_tensors
        return None, None, dx2 * grad, None, None, dgamma_f * grad, dw_lm * grad, None, None


class _Heads(torch.autograd.Function):
    """q, k and v of ``qkv [M, (NH + 2*NKV)*HD]`` as SDPA's ``[B, heads, S, HD]`` views (no
    copy), with a backward that writes their three gradients into one ``[M, (NH + 2*NKV)*HD]``
    tensor in one ``cat``. Indexing the heads instead makes autograd's slice backward zero a
    qkv-sized buffer per slice, copy the slice's gradient into it and add the three, then copy
    once more through the transpose: 3 fills, 4 copies and 2 adds of M x (NH + 2*NKV)*HD per
    layer (``tests/test_nn_llama.py`` counts them on the CPU; not yet profiled on the GPU)."""

    @staticmethod
    def forward(ctx, qkv, dims):
        b, s, h, kv, hd = dims
        ctx.dims, ctx.like = dims, (qkv.dtype, qkv.device)
        heads = qkv.view(b, s, h + 2 * kv, hd).transpose(1, 2)
        return heads[:, :h], heads[:, h : h + kv], heads[:, h + kv :]

    @staticmethod
    def backward(ctx, dq, dk, dv):
        b, s, h, kv, hd = ctx.dims
        parts = []
        for g, n in ((dq, h), (dk, kv), (dv, kv)):  # [B, n, S, HD] -> [B, S, n, HD] views
            dtype, device = ctx.like
            g = g if g is not None else torch.zeros(b, n, s, hd, dtype=dtype, device=device)
            parts.append(g.transpose(1, 2))
        return torch.cat(parts, dim=2).view(b * s, (h + 2 * kv) * hd), None


def _attention(qkv: torch.Tensor, shape: LlamaShape, b: int, s: int, mask=None) -> torch.Tensor:
    """SDPA over the heads of ``qkv [M, (NH + 2*NKV)*HD]``; returns ``y [M, NH*HD]``. ``mask``
    (``[B or 1, 1, S, S]`` bool, ``coda_spec.nn.call``): a padded or packed batch's, or a sliding
    window's (:func:`windowed`), with k and v
    repeated to the query heads as transformers does with a mask (SDPA's GQA takes the math
    kernel with one on the GPU); None: causal."""
    h, kv, hd = shape.heads, shape.kv_heads, shape.head_dim
    q, k, v = _Heads.apply(qkv, (b, s, h, kv, hd))
    scale = 1.0 / math.sqrt(hd)
    if mask is None:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale)
    else:
        k, v = (t.repeat_interleave(h // kv, dim=1) for t in (k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return y.transpose(1, 2).reshape(b * s, h * hd)


class LlamaForCausalLM(torch.nn.Module):
    """A Llama-3 causal LM from the bundled chains (the module docstring).

    ``config``: a transformers ``LlamaConfig`` (or ``MistralConfig``) or :class:`LlamaConfig`.
    ``builds``: a build root
    or ``{chain name: build}`` (:func:`chain_ops`). ``recompute=True``: every layer's MLP
    recomputes its gate/up pre-activation in the backward (one more GEMM per layer) instead of
    saving it, through ``llama3_layer_recompute`` and ``llama3_last_mlp_recompute``
    (docs/training.md, "Recompute"). ``lm_head_chunk_rows``: the LM head's rows per chunk (None:
    the rule, :func:`lm_head_chunk`). Parameters are created in ``dtype`` on ``device`` with
    transformers' initialisation (normal(0, 0.02), norms at 1); load weights with
    :meth:`from_hf` or :meth:`load_hf_state_dict`."""

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
        self.recompute = bool(recompute)
        self.lm_head_chunk_rows = checked_chunk_rows(lm_head_chunk_rows)
        self.shape = sh = LlamaShape.of(config)
        self.chains = chain_ops(sh, builds, tuned, recompute=self.recompute)
        kw = {"dtype": dtype, "device": device}
        qkv_rows = (sh.heads + 2 * sh.kv_heads) * sh.head_dim
        self.embed_tokens = torch.nn.Embedding(sh.vocab, sh.hidden, **kw)
        self.layers = torch.nn.ModuleList(
            _Layer(sh.hidden, sh.inter, qkv_rows, sh.heads * sh.head_dim, kw)
            for _ in range(sh.layers)
        )
        self.norm = torch.nn.Parameter(torch.ones(sh.hidden, **kw))
        if not sh.tied:
            self.lm_head = torch.nn.Linear(sh.hidden, sh.vocab, bias=False, **kw)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm"):
                    p.normal_(0.0, 0.02)
        self.register_buffer("freqs", rope_table(sh, dtype, device), persistent=False)

    def forward(self, input_ids=None, labels=None, **kw):
        """The mean cross-entropy of next-token prediction (``causal_lm_loss``). Takes
        transformers' ``attention_mask``, ``position_ids`` and ``num_items_in_batch``; refuses
        every other keyword (``coda_spec.nn.call``)."""
        root = {"embed_tokens.weight": self.embed_tokens.weight, "norm": self.norm}
        if not self.shape.tied:
            root["lm_head.weight"] = self.lm_head.weight
        layers = self.layers

        def within(i, fn):
            return layers[i](fn)

        return causal_lm_loss(
            self.chains,
            self.shape,
            root,
            within,
            input_ids,
            labels,
            self.freqs,
            lm_head_chunk_rows=self.lm_head_chunk_rows,
            **kw,
        )

    @classmethod
    def from_hf(cls, model_or_state_dict, config=None, **kw) -> LlamaForCausalLM:
        """A model with the weights of a transformers ``LlamaForCausalLM`` (or its state dict,
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
        """Load weights in transformers' names and layouts (``coda_spec.nn.layout``)."""
        self.load_state_dict(layout.from_hf_state_dict(sd, self.shape))

    def to_hf_state_dict(self) -> dict:
        """The weights in transformers' names and layouts (what its ``load_state_dict`` takes)."""
        sd = {k: v.detach() for k, v in self.state_dict().items()}
        return layout.to_hf_state_dict(sd, self.shape)


class _Layer(torch.nn.Module):
    """One decoder layer's weights, in coda's layout (``coda_spec.nn.layout``). Calling it runs
    ``fn`` on them (``causal_lm_loss``'s ``within``): the module call is where FSDP2 gathers a
    sharded layer's weights and autograd's hooks find them."""

    def __init__(self, d: int, f: int, qkv_rows: int, attn: int, kw: dict):
        super().__init__()
        self.w_qkv = torch.nn.Parameter(torch.empty(qkv_rows, d, **kw))
        self.w_o = torch.nn.Parameter(torch.empty(d, attn, **kw))
        self.w_gu = torch.nn.Parameter(torch.empty(2 * f, d, **kw))
        self.w_down = torch.nn.Parameter(torch.empty(d, f, **kw))
        self.input_norm = torch.nn.Parameter(torch.ones(d, **kw))
        self.post_norm = torch.nn.Parameter(torch.ones(d, **kw))

    def forward(self, fn):
        return fn(dict(self.named_parameters()))
