"""Qwen2 through ``coda_spec.nn``: transformers' ``Qwen2ForCausalLM`` served by its own chains
(``specs/qwen2_*.yaml``: the QKV bias added before RoPE in the QKV epilogue, RMSNorm eps 1e-6)
and the Llama's LM head (``coda_spec.nn.qwen2``).

On the CPU at ``tests.test_nn_llama``'s tiny config with Qwen2's eps (its CPU builds of the
Qwen2 chains, fp64, transformers' RMSNorm and RoPE lifted to fp64 as there), with the biases
drawn at random (transformers initialises them to zero, which would hide a misplaced bias), the
loss and every parameter's gradient equal transformers' within 1e-10, through ``from_hf`` and
through the ``apply_to_hf`` patch; the state dict round-trips exactly; what the chains do not
serve is refused.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2ForSequenceClassification,
)
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402

import coda_spec.nn  # noqa: E402
from coda_spec import ops  # noqa: E402
from coda_spec.nn import qwen2  # noqa: E402
from coda_spec.nn.llama import CHAINS  # noqa: E402
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402
from tests.test_nn_hf import assert_trains_as_transformers  # noqa: E402


def config(tied: bool = False, **over) -> Qwen2Config:
    shape = {**tl.TINY, "rms_norm_eps": 1e-6, **over}
    return Qwen2Config(**shape, tie_word_embeddings=tied, attn_implementation="sdpa")


def model(tied: bool = False, dtype=torch.float64, **over) -> Qwen2ForCausalLM:
    """A transformers Qwen2 at the tiny config, its norms perturbed (``tl.hf_model``) and its
    QKV biases drawn (zeros as transformers initialises them would not test their place)."""
    hf = tl.hf_model(tied, dtype, family=(Qwen2ForCausalLM, config(tied, **over)))
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("proj.bias"):
                p.copy_(0.5 * torch.randn_like(p))
    return hf


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The Qwen2 chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, qwen2.NAMES.values())


@pytest.fixture
def hf_fp64(monkeypatch):
    """transformers' Qwen2 RMSNorm and RoPE at the model's dtype (``tests.test_nn_llama``)."""
    monkeypatch.setattr(modeling_qwen2.Qwen2RMSNorm, "forward", tl.fp64_norm)
    monkeypatch.setattr(modeling_qwen2.Qwen2RotaryEmbedding, "forward", tl.fp64_rotary)


def grads_match(hf, grads: dict) -> float:
    """Every parameter's gradient equals transformers' within 1e-10 (``grads``: by
    transformers' names); returns the worst relative error."""
    ref = {n: p.grad for n, p in hf.named_parameters()}
    if hf.config.tie_word_embeddings:
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    assert set(grads) == set(ref)
    assert sum(n.endswith("proj.bias") for n in ref) == 3 * hf.config.num_hidden_layers
    worst = {n: tl.rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst
    return max(worst.values())


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_from_hf_matches_transformers_in_fp64(builds, hf_fp64, tied):
    """coda's model of a Qwen2: transformers' loss and every gradient (the biases' included)
    to 1e-10; a padded batch's loss too."""
    hf = model(tied)
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    assert type(coda) is qwen2.Qwen2ForCausalLM and coda.shape.eps == 1e-6
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    want.backward()
    got = coda(ids, labels)
    got.backward()
    assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())
    grads = {n: p.grad for n, p in coda.named_parameters()}
    grads_match(hf, qwen2.to_hf_state_dict(grads, coda.shape))
    ids, labels, mask = tl.padded(*tl.batch(ignored=False))
    with torch.no_grad():
        want = tl.hf_loss(hf, ids, labels, attention_mask=mask)
        got = coda(ids, labels, attention_mask=mask)
    assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())


def test_the_patch_matches_transformers_in_fp64(builds, hf_fp64):
    """Through ``apply_to_hf``: the chains serve the call (no logits), with transformers' loss
    and gradients on the model's own parameters (the biases fused per call) to 1e-10; and the
    biases matter: zeroing them changes the loss, so this test can fail."""
    hf = model()
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    assert set(patched.coda_chains) == set(CHAINS)
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is None  # served by the chains, not transformers' forward
    assert tl.rel(out.loss, want) <= 1e-10, (out.loss.item(), want.item())
    want.backward()
    out.loss.backward()
    grads_match(hf, {n: p.grad for n, p in patched.named_parameters()})
    unbiased = copy.deepcopy(hf)
    with torch.no_grad():
        for name, p in unbiased.named_parameters():
            if name.endswith("proj.bias"):
                p.zero_()
        assert tl.rel(tl.hf_loss(unbiased, ids, labels), want) > 1e-5


def test_the_state_dict_round_trips_and_the_entry_points_dispatch(builds):
    """``from_hf`` of a state dict (with ``config=``) loads it, the bias in ``w_qkv``'s row
    order (each q and k head's pairs adjacent), and ``to_hf_state_dict`` gives it back exactly,
    which transformers' ``Qwen2ForCausalLM`` loads strictly."""
    hf = model(dtype=torch.float32)
    sd = hf.state_dict()
    coda = coda_spec.nn.from_hf(sd, config=hf.config, builds=builds)
    hd = hf.config.head_dim
    b = coda.layers[1].b_qkv.detach()
    bq = sd["model.layers.1.self_attn.q_proj.bias"]
    assert torch.equal(b[:2], bq[[0, hd // 2]])  # rotary pair (0, HD/2) adjacent
    bv = sd["model.layers.1.self_attn.v_proj.bias"]
    assert torch.equal(b[-bv.numel() :], bv)  # v unpermuted, last
    back = coda.to_hf_state_dict()
    assert set(back) == set(sd) and all(torch.equal(sd[k], back[k]) for k in sd)
    Qwen2ForCausalLM(hf.config).load_state_dict(back, strict=True)
    assert all(torch.equal(p, torch.zeros_like(p)) for n, p in qwen2_fresh(builds) if "b_qkv" in n)


def qwen2_fresh(builds):
    return qwen2.Qwen2ForCausalLM(config(), builds=builds, dtype=torch.float32).named_parameters()


def test_what_a_qwen2_config_asks_for_and_the_chains_do_not_serve_is_refused(builds):
    """A sliding-window layer (coda serves full attention), another eps than the chains' 1e-6,
    recompute (no Qwen2 recompute chains), attention dropout, and a Qwen2 head other than the
    causal LM; each before any work."""
    windowed = config(use_sliding_window=True, sliding_window=8, max_window_layers=1)
    with pytest.raises(CodaRuntimeError, match=r"sliding-window attention on layers \[1\]"):
        coda_spec.nn.from_hf(Qwen2ForCausalLM(windowed), builds=builds)
    with pytest.raises(CodaRuntimeError, match=r"sliding-window attention on layers \[1\]"):
        coda_spec.nn.apply_to_hf(Qwen2ForCausalLM(windowed), builds=builds)
    with pytest.raises(CodaRuntimeError, match=r"qwen2_first's norms use eps \[1e-06\]; this"):
        coda_spec.nn.from_hf(Qwen2ForCausalLM(config(rms_norm_eps=1e-5)), builds=builds)
    with pytest.raises(CodaRuntimeError, match="no Qwen2 recompute chains yet"):
        coda_spec.nn.from_hf(Qwen2ForCausalLM(config()), builds=builds, recompute=True)
    with pytest.raises(CodaRuntimeError, match="attention_dropout is 0.1: coda's attention"):
        coda_spec.nn.from_hf(Qwen2ForCausalLM(config(attention_dropout=0.1)), builds=builds)
    with pytest.raises(CodaRuntimeError, match="no build of qwen2_first at .* specs/qwen2_first"):
        coda_spec.nn.from_hf(Qwen2ForCausalLM(config()), builds={})
    head = Qwen2ForSequenceClassification(config())
    with pytest.raises(CodaRuntimeError, match="'qwen2' is served as transformers' Qwen2ForCaus"):
        coda_spec.nn.apply_to_hf(head, builds=builds)
    assert "forward" not in head.__dict__  # nothing patched
    # a window on no layer (max_window_layers past the last) is full attention: served
    full = config(use_sliding_window=True, sliding_window=8, max_window_layers=2)
    assert coda_spec.nn.from_hf(Qwen2ForCausalLM(full), builds=builds).shape.window is None


@pytest.mark.slow
def test_the_patched_qwen2_trains_under_the_hf_trainer(builds, tmp_path):
    """Two ``Trainer`` steps on the patched Qwen2, each loss the unpatched model's."""
    assert_trains_as_transformers(model(dtype=torch.float32), builds, tmp_path)
