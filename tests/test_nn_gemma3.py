"""Gemma-3 (text only) through ``coda_spec.nn``: transformers' ``Gemma3ForCausalLM`` served by
``coda_spec.nn.gemma3`` (its feed-forward block, both its norms and the residual add included,
in ``specs/gemma3_ffn.yaml``, its LM head in the Llama's ``specs/llama3_lm_head.yaml``; the
input and post-attention norms, QK-norm and RoPE in torch).

A tiny Gemma-3 (3 layers: sliding, full, sliding; hidden 256, 4 query and 2 KV heads of 64,
intermediate 512, vocab 1024, a window of 8 tokens, RoPE bases 10^4 and 10^6,
``query_pre_attn_scalar`` 48, not the head_dim) runs in fp64 through the chains' CPU kernels
(``tests.test_nn_llama``'s CPU builds) and through transformers, whose fp32 islands (the
RMSNorm, ``1 + w`` included, and RoPE's angles) are lifted to fp64 (:func:`hf_fp64`): the loss
and every parameter's gradient equal transformers' within 1e-10, through ``from_hf`` and through
the ``apply_to_hf`` patch, tied and untied, on a padded and a packed batch.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    Gemma3TextForSequenceClassification,
)
from transformers.models.gemma3 import modeling_gemma3  # noqa: E402

import coda_spec.nn  # noqa: E402
from coda_spec import ops  # noqa: E402
from coda_spec.nn import gemma3  # noqa: E402
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402
from tests.test_nn_hf import assert_trains_as_transformers  # noqa: E402

WINDOW = 8  # < tl.S: the sliding layers' band is exercised
TYPES = ["sliding_attention", "full_attention", "sliding_attention"]
ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
}


def config(tied: bool = True, **over) -> Gemma3TextConfig:
    shape = {k: v for k, v in tl.TINY.items() if k != "rms_norm_eps"}
    shape.update(num_hidden_layers=len(TYPES), layer_types=TYPES, sliding_window=WINDOW)
    shape.update({"rope_parameters": ROPE, "query_pre_attn_scalar": 48, **over})
    return Gemma3TextConfig(**shape, tie_word_embeddings=tied, attn_implementation="sdpa")


def gemma(tied: bool = True, dtype=torch.float64):
    return tl.hf_model(tied, dtype, family=(Gemma3ForCausalLM, config(tied)))


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The Gemma-3 chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, gemma3.CHAINS)


def fp64_norm(self, x):
    """``Gemma3RMSNorm`` at the input's dtype (transformers' runs in fp32, ``1 + w`` too)."""
    out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    return out * (1.0 + self.weight)


def fp64_rotary(self, x, position_ids, layer_type):
    """``Gemma3RotaryEmbedding`` at the input's dtype (transformers' forces fp32)."""
    inv_freq = getattr(self, f"{layer_type}_inv_freq").to(x.dtype)
    angles = position_ids[:, :, None].to(x.dtype) * inv_freq[None, None]
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


@pytest.fixture
def hf_fp64(monkeypatch):
    monkeypatch.setattr(modeling_gemma3.Gemma3RMSNorm, "forward", fp64_norm)
    monkeypatch.setattr(modeling_gemma3.Gemma3RotaryEmbedding, "forward", fp64_rotary)


def grads_match(hf, grads: dict) -> float:
    """Every parameter's gradient equals transformers' within 1e-10 (``grads``: by
    transformers' names); returns the worst relative error."""
    ref = {n: p.grad for n, p in hf.named_parameters()}
    if hf.config.tie_word_embeddings:
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    assert set(grads) == set(ref)
    worst = {n: tl.rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst
    return max(worst.values())


def coda_grads_as_hf(model) -> dict:
    grads = {n: p.grad for n, p in model.named_parameters()}
    return gemma3.to_hf_state_dict(grads, model.shape)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_from_hf_matches_transformers_in_fp64(builds, hf_fp64, tied):
    """coda's model of a Gemma-3: transformers' loss and every gradient to 1e-10."""
    hf = gemma(tied)
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    assert type(coda) is gemma3.Gemma3ForCausalLM and coda.shape.sliding == (True, False, True)
    ids, labels = tl.batch()
    ids[1, 3] = 0  # the padding token: its embedding row gets no gradient, as transformers'
    want = tl.hf_loss(hf, ids, labels)
    want.backward()
    got = coda(ids, labels)
    got.backward()
    assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())
    grads_match(hf, coda_grads_as_hf(coda))


def test_the_patch_serves_the_loss_and_gradients(builds, hf_fp64):
    """Through ``apply_to_hf``: transformers' loss and gradients (fp64, 1e-10), the chains
    serving the call (no logits); a call without labels (evaluation, ``generate``) runs
    transformers' forward, its logits the unpatched model's."""
    hf = gemma()
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is None
    assert tl.rel(out.loss, want) <= 1e-10, (out.loss.item(), want.item())
    want.backward()
    out.loss.backward()
    grads = {n: p.grad for n, p in patched.named_parameters()}
    grads["lm_head.weight"] = grads["model.embed_tokens.weight"]  # tied: listed once
    grads_match(hf, grads)
    with torch.no_grad():
        logits = patched(input_ids=ids).logits
        assert torch.equal(logits, hf(input_ids=ids).logits)


def test_a_padded_or_packed_batch_gets_transformers_loss(builds, hf_fp64):
    """A padding mask (``attention_mask``) or packed sequences (``position_ids`` that restart)
    under the sliding and the full layers: transformers' loss (fp64, 1e-10)."""
    hf = gemma()
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    ids, labels, mask = tl.padded(*tl.batch(ignored=False))
    with torch.no_grad():
        want = tl.hf_loss(hf, ids, labels, attention_mask=mask)
        got = coda(ids, labels, attention_mask=mask)
        assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())
        pos = torch.cat([torch.arange(12), torch.arange(tl.S - 12)]).expand(tl.B, tl.S).clone()
        want = tl.hf_loss(hf, ids, labels, position_ids=pos, use_cache=False)
        got = coda(ids, labels, position_ids=pos)
        assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())


def test_the_state_dict_round_trips_and_the_entry_points_dispatch(builds):
    """``from_hf`` of the state dict (with ``config=``) loads it and ``to_hf_state_dict``
    gives it back exactly, which transformers loads strictly; ``apply_to_hf`` patches in
    place with the Gemma-3 chains."""
    for tied in (True, False):
        hf = gemma(tied, dtype=torch.float32)
        sd = hf.state_dict()
        coda = coda_spec.nn.from_hf(sd, config=hf.config, builds=builds)
        assert type(coda) is gemma3.Gemma3ForCausalLM
        back = coda.to_hf_state_dict()
        assert set(back) == set(sd) and all(torch.equal(sd[k], back[k]) for k in sd)
        Gemma3ForCausalLM(hf.config).load_state_dict(back, strict=True)
    (fam,) = [f for f in coda_spec.nn.FAMILIES if f.model_type == "gemma3_text"]
    assert fam.model is gemma3.Gemma3ForCausalLM and fam.apply is gemma3.apply_to_hf_gemma3
    patched = copy.deepcopy(hf)
    assert coda_spec.nn.apply_to_hf(patched, builds=builds) is patched
    assert set(patched.coda_chains) == set(gemma3.CHAINS)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping is 30.0: the coda Gemma-3"),
        ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping is 50.0: the coda Gemma-3"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention: the coda Gemma-3"),
        ({"hidden_activation": "gelu"}, "hidden_activation is 'gelu'"),
        ({"attention_dropout": 0.1}, "attention_dropout is 0.1: coda's attention"),
        ({"attention_bias": True}, "no attention biases"),
        (
            {"rope_parameters": {**ROPE, "full_attention": {"rope_type": "yarn", "factor": 4.0}}},
            "the full_attention layers' RoPE \\('yarn'\\) scales cos/sin",
        ),
    ],
    ids=["final-softcap", "attn-softcap", "bidirectional", "gelu-erf", "dropout", "bias", "yarn"],
)
def test_what_a_gemma3_config_asks_for_and_the_model_does_not_serve_is_refused(
    builds, over, message
):
    with pytest.raises(CodaRuntimeError, match=message):
        coda_spec.nn.from_hf(Gemma3ForCausalLM(config(**over)), builds=builds)


def test_the_multimodal_model_other_heads_and_recompute_are_refused(builds):
    """The multimodal ``Gemma3ForConditionalGeneration`` (model_type 'gemma3') is refused by
    both entry points with its own message (before: 'not served', naming no way on), a Gemma-3
    head other than the causal LM by the entry point, and ``recompute=True`` (no recompute
    chains); nothing is patched."""
    multi = Gemma3Config(text_config=config().to_dict())
    with pytest.raises(CodaRuntimeError, match="model_type 'gemma3' is Gemma-3's multimodal"):
        coda_spec.nn.from_hf({}, config=multi, builds=builds)
    if hasattr(modeling_gemma3, "Gemma3ForConditionalGeneration"):
        model = Gemma3ForConditionalGeneration.__new__(Gemma3ForConditionalGeneration)
        torch.nn.Module.__init__(model)
        model.config = multi
        with pytest.raises(CodaRuntimeError, match="serves the text decoder alone"):
            coda_spec.nn.apply_to_hf(model, builds=builds)
    head = Gemma3TextForSequenceClassification(config())
    with pytest.raises(CodaRuntimeError, match="served as transformers' Gemma3ForCausalLM"):
        coda_spec.nn.apply_to_hf(head, builds=builds)
    assert "forward" not in head.__dict__
    with pytest.raises(CodaRuntimeError, match="no recompute chains"):
        coda_spec.nn.from_hf(gemma(dtype=torch.float32), builds=builds, recompute=True)


@pytest.mark.slow
def test_the_patched_gemma3_trains_under_the_hf_trainer(builds, tmp_path):
    """Two ``Trainer`` steps on the patched Gemma-3, each loss the unpatched model's."""
    assert_trains_as_transformers(gemma(dtype=torch.float32), builds, tmp_path)
