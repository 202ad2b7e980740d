"""Qwen3 through ``coda_spec.nn``: transformers' ``Qwen3ForCausalLM`` served by the Qwen3 chains
(``specs/qwen3_*.yaml`` and the Llama's LM head) and torch's per-head q/k RMSNorm and
rotate-half RoPE (``coda_spec.nn.qwen3``).

On the CPU at ``tests.test_nn_llama``'s tiny config with Qwen3's eps (1e-6) and a head_dim of
its own (4 query and 2 KV heads of 96 in a hidden size of 256, as Qwen3-1.7B's 16 x 128 is not
its 2048), in fp64 through the chains' reference (CPU builds at the bundled dims, re-sized at
load), with transformers' RMSNorm (q_norm and k_norm included) and RoPE lifted to fp64 as
there: the loss and every gradient equal transformers' within 1e-10, through ``from_hf`` and
through the ``apply_to_hf`` patch (a padded batch too). Every norm weight is perturbed
(``tests.test_nn_llama.hf_model``), q_norm and k_norm included, so their gradients are exercised.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3ForSequenceClassification,
)
from transformers.models.qwen3 import modeling_qwen3  # noqa: E402

import coda_spec.nn  # noqa: E402
from coda_spec import ops  # noqa: E402
from coda_spec.nn import qwen3  # noqa: E402
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402
from tests.test_nn_hf import assert_trains_as_transformers  # noqa: E402

CHAINS = ("qwen3_first", "qwen3_layer", "qwen3_last_mlp", "llama3_lm_head")


def config(tied: bool = True, **over) -> Qwen3Config:
    shape = {**tl.TINY, "head_dim": 96, "rms_norm_eps": 1e-6, **over}
    return Qwen3Config(**shape, tie_word_embeddings=tied, attn_implementation="sdpa")


def model(tied: bool = True, dtype=torch.float64) -> Qwen3ForCausalLM:
    return tl.hf_model(tied, dtype, family=(Qwen3ForCausalLM, config(tied)))


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The Qwen3 chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, CHAINS)


@pytest.fixture
def hf_fp64(monkeypatch):
    """transformers' Qwen3 RMSNorm (q_norm, k_norm too) and RoPE at the model's dtype."""
    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", tl.fp64_norm)
    monkeypatch.setattr(modeling_qwen3.Qwen3RotaryEmbedding, "forward", tl.fp64_rotary)


def grads_match(hf, grads: dict) -> float:
    """Every parameter's gradient equals transformers' within 1e-10 (``grads``: by transformers'
    names; a tied LM head is the embedding, listed once by transformers); the worst."""
    ref = {n: p.grad for n, p in hf.named_parameters()}
    if hf.config.tie_word_embeddings:
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    assert set(grads) == set(ref)
    worst = {n: tl.rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst
    return max(worst.values())


def test_from_hf_matches_transformers_in_fp64(builds, hf_fp64):
    """coda's model of a tied Qwen3: transformers' loss and every gradient (q_norm and k_norm
    included) to 1e-10, the chains served under Qwen3's names."""
    hf = model(tied=True)
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    assert type(coda) is qwen3.Qwen3ForCausalLM and coda.shape.head_dim == 96
    assert [op.chain.name for op in coda.chains.values()] == list(CHAINS)
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    want.backward()
    got = coda(ids, labels)
    got.backward()
    assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())
    grads = qwen3.to_hf_state_dict({n: p.grad for n, p in coda.named_parameters()}, coda.shape)
    grads_match(hf, grads)


def test_the_patch_matches_transformers_on_a_padded_batch(builds, hf_fp64):
    """Through ``apply_to_hf`` (an untied Qwen3, its own weights): a padded batch's loss and
    every gradient equal transformers' (fp64, 1e-10), the call served by the chains."""
    hf = model(tied=False)
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    ids, labels, mask = tl.padded(*tl.batch(ignored=False))
    want = tl.hf_loss(hf, ids, labels, attention_mask=mask)
    out = patched(input_ids=ids, labels=labels, attention_mask=mask)
    assert out.logits is None  # served by the chains, not transformers' forward
    assert tl.rel(out.loss, want) <= 1e-10, (out.loss.item(), want.item())
    want.backward()
    out.loss.backward()
    grads_match(hf, {n: p.grad for n, p in patched.named_parameters()})


def test_the_glue_is_what_transformers_computes():
    """``QKNormRope.qkv`` on its own against transformers' q_norm / k_norm and
    ``apply_rotary_pos_emb`` (fp64, 1e-12): q and k normalized per head, then rotated by halves
    in transformers' layout; v untouched. Without the norm it differs (the test can fail)."""
    cfg = config()
    torch.manual_seed(0)
    attn = modeling_qwen3.Qwen3Attention(cfg, 0).double()
    shape = qwen3.shape_of(cfg)
    m, hd = 12, shape.head_dim
    with torch.no_grad():
        attn.q_norm.weight.add_(0.1 * torch.randn(hd, dtype=torch.float64))
        attn.k_norm.weight.add_(0.1 * torch.randn(hd, dtype=torch.float64))
        qkv = torch.randn(m, (shape.heads + 2 * shape.kv_heads) * hd, dtype=torch.float64)
        pos = torch.arange(m, dtype=torch.int32) * 5
        w = {"q_norm": attn.q_norm.weight, "k_norm": attn.k_norm.weight}
        got = qwen3.QKNormRope(shape).qkv(w, qkv, pos, qwen3.inv_freq(shape, torch.float64))
        q, k, v = qkv.split([shape.heads * hd, shape.kv_heads * hd, shape.kv_heads * hd], 1)
        q = tl.fp64_norm(attn.q_norm, q.view(1, m, -1, hd)).transpose(1, 2)
        k = tl.fp64_norm(attn.k_norm, k.view(1, m, -1, hd)).transpose(1, 2)
        angle = pos.double()[:, None] * torch.tensor(shape.inv_freq, dtype=torch.float64)
        emb = torch.cat([angle, angle], -1)[None]
        q, k = modeling_qwen3.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
        want = torch.cat([q.transpose(1, 2).reshape(m, -1), k.transpose(1, 2).reshape(m, -1), v], 1)
        assert tl.rel(got, want) <= 1e-12
        unnormed = qwen3.QKNormRope(shape).qkv(
            {"q_norm": torch.ones(hd).double(), "k_norm": torch.ones(hd).double()},
            qkv / 3,
            pos,
            qwen3.inv_freq(shape, torch.float64),
        )
        assert tl.rel(unnormed * 3, want) > 1e-2


def test_the_state_dict_round_trips_and_the_entry_points_dispatch(builds):
    """``from_hf`` of the state dict (with ``config=``) holds ``w_qkv`` as transformers' three
    projections concatenated, NOT permuted (rotate-half RoPE needs no pair reorder), and
    ``to_hf_state_dict`` gives the state dict back exactly, which transformers'
    ``Qwen3ForCausalLM`` loads strictly; ``apply_to_hf`` patches in place."""
    hf = model(tied=False, dtype=torch.float32)
    sd = hf.state_dict()
    coda = coda_spec.nn.from_hf(sd, config=hf.config, builds=builds)
    attn = "model.layers.1.self_attn."
    fused = torch.cat([sd[attn + f"{p}_proj.weight"] for p in "qkv"])
    assert torch.equal(coda.layers[1].w_qkv, fused)
    assert torch.equal(coda.layers[1].q_norm, sd[attn + "q_norm.weight"])
    back = coda.to_hf_state_dict()
    assert set(back) == set(sd) and all(torch.equal(sd[k], back[k]) for k in sd)
    Qwen3ForCausalLM(hf.config).load_state_dict(back, strict=True)
    patched = copy.deepcopy(hf)
    assert coda_spec.nn.apply_to_hf(patched, builds=builds) is patched
    assert [op.chain.name for op in patched.coda_chains.values()] == list(CHAINS)
    assert any(f.model_type == "qwen3" for f in coda_spec.nn.FAMILIES)


def test_what_a_qwen3_config_asks_for_and_the_chains_do_not_serve_is_refused(builds):
    """QKV biases, a sliding window on any layer, Llama-3's eps (the chains hold 1e-6),
    ``recompute=True``, attention dropout, and a Qwen3 other than the causal LM: refused before
    any work, saying what to do. A sliding window that covers no layer (``max_window_layers`` at
    the layer count: transformers' attention is full) is served."""
    refused = {
        "attention_bias=True: the Qwen3 chains' projections have no biases": {
            "attention_bias": True
        },
        r"slides a window of 8 tokens on layers 1..1 \(use_sliding_window=True": {
            "use_sliding_window": True,
            "sliding_window": 8,
            "max_window_layers": 1,
        },
        r"qwen3_layer's norms use eps \[1e-06\]; this config's rms_norm_eps is 1e-05": {
            "rms_norm_eps": 1e-5
        },
        "attention_dropout is 0.1: coda's attention": {"attention_dropout": 0.1},
    }
    for message, over in refused.items():
        with pytest.raises(CodaRuntimeError, match=message):
            coda_spec.nn.from_hf(Qwen3ForCausalLM(config(**over)), builds=builds)
    with pytest.raises(CodaRuntimeError, match="no Qwen3 recompute chains yet"):
        coda_spec.nn.apply_to_hf(Qwen3ForCausalLM(config()), builds=builds, recompute=True)
    head = Qwen3ForSequenceClassification(config())
    with pytest.raises(CodaRuntimeError, match="'qwen3' is served as transformers' Qwen3ForC"):
        coda_spec.nn.apply_to_hf(head, builds=builds)
    assert "forward" not in head.__dict__  # nothing patched
    window = {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 2}
    coda_spec.nn.from_hf(Qwen3ForCausalLM(config(**window)), builds=builds)


@pytest.mark.slow
def test_the_patched_qwen3_trains_under_the_hf_trainer(builds, tmp_path):
    """Two ``Trainer`` steps on the patched Qwen3, each loss the unpatched model's."""
    assert_trains_as_transformers(model(dtype=torch.float32), builds, tmp_path)
