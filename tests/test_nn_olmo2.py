"""OLMo-2 through ``coda_spec.nn``: transformers' ``Olmo2ForCausalLM`` against
``coda_spec.nn.Olmo2ForCausalLM`` (its GEMMs in ``specs/olmo2_*.yaml`` and the Llama's LM head,
its post-norms, full-width QK-norm and rotate-half RoPE in torch).

On the CPU at ``tests.test_nn_llama``'s tiny config (2 layers, hidden 256, 4 query and 2 KV
heads of 64, intermediate 512, vocab 1024, batch 2 x 32, OLMo-2's eps 1e-6), the chains' CPU
builds at their bundled dims re-sized at load, in fp64 with transformers' RMSNorm and RoPE lifted
to fp64 (``tests.test_nn_llama.hf_fp64``'s reasons): the loss and every parameter's gradient equal
transformers' within 1e-10, through ``from_hf`` and through the ``apply_to_hf`` patch; a padded
and a packed batch; the state dict's exact round trip; the entry points; the refusals.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    Olmo2Config,
    Olmo2ForCausalLM,
    Olmo2ForSequenceClassification,
)
from transformers.models.olmo2 import modeling_olmo2  # noqa: E402

import coda_spec.nn  # noqa: E402
from coda_spec import ops  # noqa: E402
from coda_spec.nn import olmo2  # noqa: E402
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402
from tests.test_nn_hf import assert_trains_as_transformers  # noqa: E402


def config(tied: bool = False, **over) -> Olmo2Config:
    shape = {**tl.TINY, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "eos_token_id": 2, **over}
    return Olmo2Config(**shape, tie_word_embeddings=tied, attn_implementation="sdpa")


def model(tied: bool = False, dtype=torch.float64) -> Olmo2ForCausalLM:
    return tl.hf_model(tied, dtype, family=(Olmo2ForCausalLM, config(tied)))


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The OLMo-2 chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, olmo2.CHAINS)


@pytest.fixture
def hf_fp64(monkeypatch):
    """transformers' OLMo-2 RMSNorm and RoPE at the model's dtype (``tests.test_nn_llama``)."""
    monkeypatch.setattr(modeling_olmo2.Olmo2RMSNorm, "forward", tl.fp64_norm)
    monkeypatch.setattr(modeling_olmo2.Olmo2RotaryEmbedding, "forward", tl.fp64_rotary)


def grads_match(hf, grads: dict) -> float:
    """Every parameter's gradient equals transformers' within 1e-10 (``grads`` by transformers'
    names); returns the worst relative error."""
    ref = {n: p.grad for n, p in hf.named_parameters()}
    if hf.config.tie_word_embeddings:
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    assert set(grads) == set(ref)
    worst = {n: tl.rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst
    return max(worst.values())


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_from_hf_matches_transformers_in_fp64(builds, hf_fp64, tied):
    """coda's OLMo-2: transformers' loss and every gradient to 1e-10."""
    hf = model(tied)
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    assert type(coda) is olmo2.Olmo2ForCausalLM and coda.shape.tied == tied
    assert {r: op.chain.name for r, op in coda.chains.items()} == {r: r for r in olmo2.CHAINS}
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    want.backward()
    got = coda(ids, labels)
    got.backward()
    assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())
    grads = {n: p.grad for n, p in coda.named_parameters()}
    grads_match(hf, olmo2.to_hf_state_dict(grads, coda.shape))


def test_the_patch_matches_transformers_and_post_norms_matter(builds, hf_fp64):
    """Through ``apply_to_hf``: transformers' loss and gradients (fp64, 1e-10), logits not
    made; and the post-norms are read: with both norm weights of layer 0 doubled the loss
    moves (so a port that dropped them could not pass)."""
    hf = model()
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is None  # served by the chains, not transformers' forward
    assert tl.rel(out.loss, want) <= 1e-10, (out.loss.item(), want.item())
    want.backward()
    out.loss.backward()
    grads_match(hf, {n: p.grad for n, p in patched.named_parameters()})
    with torch.no_grad():
        layer = patched.model.layers[0]
        layer.post_feedforward_layernorm.weight.mul_(2.0)
        moved = patched(input_ids=ids, labels=labels).loss
        assert tl.rel(moved, want) > 1e-4


def test_a_padded_or_packed_batch_gets_transformers_loss(builds, hf_fp64):
    """A padding mask (``attention_mask``) and packed sequences (``position_ids`` that restart:
    RoPE's positions in torch follow them) give transformers' loss (fp64, 1e-10)."""
    hf = model()
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
    """``from_hf`` of the state dict (with ``config=``) loads it; ``to_hf_state_dict`` gives
    it back exactly, which transformers' ``Olmo2ForCausalLM`` loads strictly; ``apply_to_hf``
    patches in place with the OLMo-2 chains."""
    hf = model(dtype=torch.float32)
    sd = hf.state_dict()
    coda = coda_spec.nn.from_hf(sd, config=hf.config, builds=builds)
    assert type(coda) is olmo2.Olmo2ForCausalLM
    back = coda.to_hf_state_dict()
    assert set(back) == set(sd) and all(torch.equal(sd[k], back[k]) for k in sd)
    Olmo2ForCausalLM(hf.config).load_state_dict(back, strict=True)
    patched = copy.deepcopy(hf)
    assert coda_spec.nn.apply_to_hf(patched, builds=builds) is patched
    assert set(patched.coda_chains) == set(olmo2.CHAINS)


def test_what_an_olmo2_config_asks_for_and_the_chains_do_not_serve_is_refused(builds):
    """Biases, attention dropout, an MLP other than SwiGLU, ``recompute=True``, a missing
    build (naming the ``coda build`` to run) and an OLMo-2 other than the causal LM."""
    cases = [
        ({"attention_bias": True}, "no attention or MLP biases"),
        ({"attention_dropout": 0.1}, "attention_dropout is 0.1: coda's attention"),
        ({"hidden_act": "gelu"}, "MLP is SwiGLU"),
    ]
    for over, message in cases:
        with pytest.raises(CodaRuntimeError, match=message):
            coda_spec.nn.from_hf(Olmo2ForCausalLM(config(**over)), builds=builds)
    hf = model(dtype=torch.float32)
    with pytest.raises(CodaRuntimeError, match="no recompute chains yet"):
        coda_spec.nn.from_hf(hf, builds=builds, recompute=True)
    with pytest.raises(CodaRuntimeError, match="no recompute chains yet"):
        coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds, recompute=True)
    partial = {k: v for k, v in builds.items() if k != "olmo2_mlp"}
    with pytest.raises(CodaRuntimeError, match=r"no build of olmo2_mlp .*olmo2_mlp\.yaml"):
        coda_spec.nn.from_hf(hf, builds=partial)
    with pytest.raises(CodaRuntimeError, match="serves model_type 'olmo2'; got 'llama'"):
        olmo2.Olmo2ForCausalLM(tl.config(False), builds=builds)
    head = Olmo2ForSequenceClassification(config())
    with pytest.raises(CodaRuntimeError, match="'olmo2' is served as transformers' Olmo2"):
        coda_spec.nn.apply_to_hf(head, builds=builds)
    assert "forward" not in head.__dict__  # nothing patched


@pytest.mark.slow
def test_the_patched_olmo2_trains_under_the_hf_trainer(builds, tmp_path):
    """Two ``Trainer`` steps on the patched OLMo-2, each loss the unpatched model's."""
    assert_trains_as_transformers(model(dtype=torch.float32), builds, tmp_path)
