"""Mistral through ``coda_spec.nn``: transformers' ``MistralForCausalLM`` served by the Llama
chains (its decoder is Llama's; ``coda_spec.nn.families``), its sliding window in attention
(``coda_spec.nn.llama.windowed``).

On the CPU at ``tests.test_nn_llama``'s tiny config (its CPU builds, fp64, transformers'
RMSNorm and RoPE lifted to fp64 as there), with a head_dim of its own (32: 4 heads of 32 in a
hidden size of 256, as Mistral-Nemo's 128 in 5120 is not 5120 / 32), the loss and every
gradient equal transformers' within 1e-10: with a window that covers the batch's 32 tokens
or none (attention as Llama's: SDPA's causal path) and with a window of 8 (a band mask), through
``from_hf`` and through the ``apply_to_hf`` patch, on a padded and on a packed batch.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    MistralConfig,
    MistralForCausalLM,
    MistralForSequenceClassification,
)
from transformers.models.mistral import modeling_mistral  # noqa: E402

import coda_spec.nn  # noqa: E402
from coda_spec import ops  # noqa: E402
from coda_spec.nn.llama import CHAINS, LlamaForCausalLM, windowed  # noqa: E402
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402
from tests.test_nn_hf import assert_trains_as_transformers  # noqa: E402

WINDOW = 8  # < tl.S: the band mask is exercised


def config(window: int | None = WINDOW, tied: bool = False, **over) -> MistralConfig:
    shape = {**tl.TINY, "head_dim": 32, **over}
    return MistralConfig(
        **shape, sliding_window=window, tie_word_embeddings=tied, attn_implementation="sdpa"
    )


def mistral(window: int | None = WINDOW, tied: bool = False, dtype=torch.float64):
    return tl.hf_model(tied, dtype, family=(MistralForCausalLM, config(window, tied)))


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The Llama chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, CHAINS)


@pytest.fixture
def hf_fp64(monkeypatch):
    """transformers' Mistral RMSNorm and RoPE at the model's dtype (``tests.test_nn_llama``)."""
    monkeypatch.setattr(modeling_mistral.MistralRMSNorm, "forward", tl.fp64_norm)
    monkeypatch.setattr(modeling_mistral.MistralRotaryEmbedding, "forward", tl.fp64_rotary)


def grads_match(hf, grads: dict) -> None:
    """Every parameter's gradient equals transformers' within 1e-10 (``grads``: by transformers'
    names; a tied model's LM head is its embedding, listed once by transformers)."""
    ref = {n: p.grad for n, p in hf.named_parameters()}
    if hf.config.tie_word_embeddings:
        ref["lm_head.weight"] = ref["model.embed_tokens.weight"]
    assert set(grads) == set(ref)
    worst = {n: tl.rel(grads[n], ref[n]) for n in ref}
    assert max(worst.values()) <= 1e-10, worst


@pytest.mark.parametrize(
    ("window", "tied"),
    [(None, False), (4096, False), (WINDOW, True)],
    ids=["no-window", "window-covers", "window-8"],
)
def test_from_hf_matches_transformers_in_fp64(builds, hf_fp64, window, tied):
    """coda's model of a Mistral: transformers' loss and gradients to 1e-10, with no window
    (``sliding_window=None``: transformers' plain causal mask), a window longer than the batch
    (Mistral-7B's 4096: no mask) and one of 8 tokens (the band)."""
    hf = mistral(window, tied)
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    assert type(coda) is LlamaForCausalLM and coda.shape.window == window
    assert coda.shape.head_dim == 32 and coda.shape.tied == tied
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    want.backward()
    got = coda(ids, labels)
    got.backward()
    assert tl.rel(got, want) <= 1e-10, (got.item(), want.item())
    grads_match(hf, tl.coda_grads_as_hf(coda))


def test_the_window_changes_the_loss_and_the_patch_serves_it(builds, hf_fp64):
    """Through ``apply_to_hf``: a window of 8 gives transformers' loss and gradients (fp64,
    1e-10), and differs from the same weights' full causal loss (before the window was read,
    coda computed that one: rel 7.6e-4), so this test can fail."""
    hf = mistral()
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    out = patched(input_ids=ids, labels=labels)
    assert out.logits is None  # served by the chains, not transformers' forward
    assert tl.rel(out.loss, want) <= 1e-10, (out.loss.item(), want.item())
    want.backward()
    out.loss.backward()
    grads_match(hf, {n: p.grad for n, p in patched.named_parameters()})
    full = copy.deepcopy(hf)
    full.config.sliding_window = None
    with torch.no_grad():
        assert tl.rel(tl.hf_loss(full, ids, labels), want) > 1e-5


def test_a_windowed_padded_or_packed_batch_gets_transformers_loss(builds, hf_fp64):
    """The window and a padding mask (``attention_mask``) or packed sequences
    (``position_ids`` that restart) together: transformers' loss (fp64, 1e-10); the window is
    over sequence indices, the packing's segments on top, as transformers' masks."""
    hf = mistral()
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


def test_the_band_is_transformers_sliding_window():
    """``windowed``: query i keeps keys i - window < j <= i (transformers'
    ``sliding_window_overlay`` on the causal mask); no mask while the window covers the
    sequence; a padding mask is kept under the band."""
    band = windowed(None, 3, 5, "cpu")
    want = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0],
            [0, 0, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert band.shape == (1, 1, 5, 5) and torch.equal(band[0, 0], want)
    assert windowed(None, 5, 5, "cpu") is None and windowed(None, None, 5, "cpu") is None
    keep = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    keep[1, ..., 0] = False  # row 1's first token padded
    both = windowed(keep, 3, 5, "cpu")
    assert torch.equal(both[0, 0], want) and torch.equal(both[1, 0], want & keep[1, 0])


def test_the_state_dict_round_trips_and_the_entry_points_dispatch(builds):
    """A Mistral's state dict has Llama's names: ``from_hf`` of the state dict (with
    ``config=``) loads it, and ``to_hf_state_dict`` gives it back exactly, which transformers'
    ``MistralForCausalLM`` loads strictly; ``apply_to_hf`` patches in place."""
    hf = mistral(dtype=torch.float32)
    sd = hf.state_dict()
    coda = coda_spec.nn.from_hf(sd, config=hf.config, builds=builds)
    back = coda.to_hf_state_dict()
    assert set(back) == set(sd) and all(torch.equal(sd[k], back[k]) for k in sd)
    MistralForCausalLM(hf.config).load_state_dict(back, strict=True)
    patched = copy.deepcopy(hf)
    assert coda_spec.nn.apply_to_hf(patched, builds=builds) is patched
    assert set(patched.coda_chains) == set(CHAINS)


def test_what_a_mistral_config_asks_for_and_the_chains_do_not_serve_is_refused(builds):
    """Attention dropout (coda's SDPA runs none: before, it was silently left out; a Llama's
    too, ``tests/test_nn_llama.py``), a window that is not a positive int, and a Mistral head
    other than the causal LM."""
    with pytest.raises(CodaRuntimeError, match="attention_dropout is 0.1: coda's attention"):
        coda_spec.nn.from_hf(MistralForCausalLM(config(attention_dropout=0.1)), builds=builds)
    with pytest.raises(CodaRuntimeError, match="sliding_window is 0: give a positive int"):
        coda_spec.nn.from_hf(MistralForCausalLM(config(window=0)), builds=builds)
    head = MistralForSequenceClassification(config())
    with pytest.raises(CodaRuntimeError, match="'mistral' is served as transformers' Mistral"):
        coda_spec.nn.apply_to_hf(head, builds=builds)
    assert "forward" not in head.__dict__  # nothing patched


@pytest.mark.slow
def test_the_patched_mistral_trains_under_the_hf_trainer(builds, tmp_path):
    """Two ``Trainer`` steps on the patched Mistral, its window on: the unpatched losses."""
    assert_trains_as_transformers(mistral(dtype=torch.float32), builds, tmp_path)
