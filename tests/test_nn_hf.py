"""``coda_spec.nn.from_hf`` / ``apply_to_hf`` (the one entry point, ``coda_spec.nn.families``) and
the patched model as a drop-in for transformers' training loops (``coda_spec.nn.hf``), on the
CPU at ``tests.test_nn_llama``'s tiny config and CPU builds (the chains' reference).

What a drop-in owes transformers' loops, as Liger-Kernel's patched models do: transformers'
output types, logits only when asked for, ``generate`` and evaluation through transformers' own
forward (same weights), positional arguments bound as transformers binds them, and a ``Trainer``
run that gets the unpatched model's losses.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaForSequenceClassification,
)
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

import coda_spec.nn  # noqa: E402
from coda_spec import ops  # noqa: E402
from coda_spec.nn.llama import CHAINS  # noqa: E402
from coda_spec.runtime import CodaRuntimeError  # noqa: E402
from tests import test_nn_llama as tl  # noqa: E402


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The Llama chains' CPU builds at the bundled dims; ops of earlier tests forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    return tl.cpu_builds(tmp_path, monkeypatch, CHAINS)


def counted(model) -> list:
    """Count the patched model's LM head chain calls (one per served call at the tiny config):
    the evidence that coda, not transformers, computed a loss."""
    calls: list = []
    head = model.coda_chains["llama3_lm_head"]

    def call(**kw):
        calls.append(kw["x2"].shape[0])
        return head(**kw)

    model.coda_chains["llama3_lm_head"] = call  # the dict the patch's loss reads
    return calls


def hf_trainer(model, tmp_path, steps: int):
    """transformers' ``Trainer`` over ``steps`` steps (AdamW, fp32 on the CPU, lr 1e-3, a loss
    logged every step) on one seeded batch of ``tests.test_nn_llama``'s tiny shape, which is also
    its evaluation set."""
    pytest.importorskip("accelerate")  # the Trainer's; in the test extra
    from transformers import Trainer, TrainingArguments

    g = torch.Generator().manual_seed(3)
    rows = torch.randint(0, tl.TINY["vocab_size"], (tl.B, tl.S), generator=g)
    data = [{"input_ids": r, "labels": r} for r in rows]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=tl.B,
        per_device_eval_batch_size=tl.B,
        max_steps=steps,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    return Trainer(model=model, args=args, train_dataset=data, eval_dataset=data)


def trainer_losses(trainer) -> list:
    """Each training step's logged loss, after ``trainer.train()``."""
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def assert_trains_as_transformers(hf, builds, tmp_path, steps: int = 2) -> None:
    """The patched copy of ``hf`` under the Trainer: each step's loss the unpatched model's
    (1e-4 relative) and every step through coda's chains (the LM head chain called once)."""
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    calls = counted(patched)
    got, want = [], []
    for model, losses in ((patched, got), (hf, want)):
        trainer = hf_trainer(model, tmp_path, steps)
        trainer.train()
        losses += trainer_losses(trainer)
    assert len(calls) == steps and len(got) == len(want) == steps
    assert all(abs(a - b) <= 1e-4 * b for a, b in zip(got, want, strict=True)), (got, want)


# -- the entry point ---------------------------------------------------------------------------


def test_the_entry_point_serves_a_llama(builds):
    """``from_hf`` gives coda's Llama, ``apply_to_hf`` patches in place: both the Llama path's
    loss, to fp32 rounding of transformers'."""
    hf = tl.hf_model(tied=False, dtype=torch.float32)
    ids, labels = tl.batch()
    want = tl.hf_loss(hf, ids, labels)
    coda = coda_spec.nn.from_hf(hf, builds=builds)
    assert type(coda) is coda_spec.nn.LlamaForCausalLM
    sd_coda = coda_spec.nn.from_hf(hf.state_dict(), config=hf.config, builds=builds)
    patched = copy.deepcopy(hf)
    assert coda_spec.nn.apply_to_hf(patched, builds=builds) is patched
    assert set(patched.coda_chains) == set(CHAINS)
    for loss in (coda(ids, labels), sd_coda(ids, labels), patched(ids, labels=labels).loss):
        assert tl.rel(loss, want) <= 1e-5, (loss.item(), want.item())


def test_the_entry_point_refuses_what_it_cannot_serve(builds):
    """A model type not served, a served type's other heads, a config with no model_type, a
    state dict with no config: a ``CodaRuntimeError`` that names what was given, the families
    served and what to do."""
    small = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64, "bos_token_id": 0}
    gpt2 = GPT2LMHeadModel(GPT2Config(**small, eos_token_id=0))
    for entry in (coda_spec.nn.from_hf, coda_spec.nn.apply_to_hf):
        with pytest.raises(CodaRuntimeError) as e:
            entry(gpt2, builds=builds)
        msg = str(e.value)
        assert f"coda_spec.nn.{entry.__name__}: model_type 'gpt2' is not served" in msg, msg
        assert "serves 'llama' (LlamaForCausalLM)" in msg and "port its family" in msg, msg
    assert "forward" not in gpt2.__dict__  # nothing patched
    classify = LlamaForSequenceClassification(tl.config(tied=True))
    with pytest.raises(CodaRuntimeError, match="served as transformers' LlamaForCausalLM .*got "):
        coda_spec.nn.apply_to_hf(classify, builds=builds)
    with pytest.raises(CodaRuntimeError, match="got LlamaConfig, which has none"):
        coda_spec.nn.from_hf({}, config=coda_spec.nn.LlamaConfig(), builds=builds)
    with pytest.raises(CodaRuntimeError, match=r"from_hf\(state_dict\) needs the model's config"):
        coda_spec.nn.from_hf({}, builds=builds)


def test_a_family_is_one_entry():
    """The dispatch table: each family's model type once, with its coda model (a ``from_hf``)
    and its patch."""
    kinds = [f.model_type for f in coda_spec.nn.FAMILIES]
    assert kinds[:2] == ["llama", "mistral"] and len(set(kinds)) == len(kinds)
    assert {"gemma3_text", "qwen2", "qwen3", "olmo2"} <= set(kinds)
    for fam in coda_spec.nn.FAMILIES:
        assert callable(fam.model.from_hf) and callable(fam.apply)


# -- the drop-in -------------------------------------------------------------------------------


def test_outputs_are_transformers_and_logits_come_only_when_asked(builds):
    """Training (``train()`` or autograd recording) with labels: coda's loss in a
    ``CausalLMOutputWithPast``, no logits (also under ``return_dict=True``; a tuple ``(loss,)``
    under ``return_dict=False``).
    Evaluation (eval mode, no grad), no labels, or ``skip_logits=False``: transformers' forward,
    with logits. ``skip_logits=True`` forces coda; without labels it is refused."""
    hf = tl.hf_model(tied=True, dtype=torch.float32)
    ids, labels = tl.batch()
    with torch.no_grad():
        want = hf(input_ids=ids, labels=labels)
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    calls = counted(patched)
    patched.train()
    out = patched(input_ids=ids, labels=labels)
    assert type(out) is CausalLMOutputWithPast and out.logits is None and out.loss.requires_grad
    assert abs(out.loss.item() - want.loss.item()) <= 1e-5 * want.loss.item()
    assert patched(ids, labels=labels, return_dict=False)[0].item() == out.loss.item()
    assert len(patched(ids, labels=labels, return_dict=False)) == 1
    assert patched(ids, labels=labels, return_dict=True).logits is None  # before: transformers'
    assert len(calls) == 4
    patched.eval()  # as from_pretrained leaves it: a loop that records gradients is served
    assert patched(ids, labels=labels).logits is None and len(calls) == 5
    with torch.no_grad():
        evaluated = patched(input_ids=ids, labels=labels)  # Trainer.evaluate's call
        assert torch.equal(evaluated.logits, want.logits)
        assert evaluated.loss.item() == want.loss.item()
        assert patched(ids, labels=labels, skip_logits=True).logits is None
    patched.train()
    asked = patched(ids, labels=labels, skip_logits=False)
    assert torch.equal(asked.logits, want.logits) and asked.loss.item() == want.loss.item()
    assert torch.equal(patched(ids).logits, want.logits)  # no labels
    assert len(calls) == 6  # the skip_logits=True call alone among the last four
    with pytest.raises(CodaRuntimeError, match=r"skip_logits=True\) .* needs labels"):
        patched(ids, skip_logits=True)


def test_positional_arguments_bind_as_transformers_binds_them(builds):
    """The patched forward has transformers' signature; ``model(ids, mask, position_ids)`` is
    transformers' call (before: the third argument was taken as the labels, and coda returned a
    loss against the positions)."""
    hf = tl.hf_model(tied=True, dtype=torch.float32)
    ids, labels = tl.batch()
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    assert inspect.signature(patched.forward) == inspect.signature(hf.forward)
    mask, pos = torch.ones_like(ids), torch.arange(ids.shape[1])[None].expand_as(ids)
    got = patched(ids, mask, pos)
    assert got.loss is None and torch.equal(got.logits, hf(ids, mask, pos).logits)
    want = tl.hf_loss(hf, ids, labels)
    assert tl.rel(patched(ids, mask, pos, None, None, labels).loss, want) <= 1e-5


def test_patching_twice_patches_the_original(builds):
    hf = tl.hf_model(tied=True, dtype=torch.float32)
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    first = patched.forward.coda_original
    coda_spec.nn.apply_to_hf(patched, builds=builds)
    assert patched.forward.coda_original is first


def test_generate_is_transformers_greedy_output(builds):
    """``model.generate`` (no labels, a KV cache) runs transformers' forward with the same
    weights: the greedy tokens are the unpatched model's."""
    hf = tl.hf_model(tied=True, dtype=torch.float32)
    hf.generation_config.pad_token_id = 0
    ids, _ = tl.batch()
    prompt = ids[:, :8]
    want = hf.generate(prompt, max_new_tokens=4, do_sample=False)
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    calls = counted(patched)
    got = patched.generate(prompt, max_new_tokens=4, do_sample=False)
    assert got.shape == (tl.B, 12) and torch.equal(got, want) and not calls


@pytest.mark.slow
def test_the_patched_model_trains_under_the_hf_trainer(builds, tmp_path):
    """``Trainer.train`` on the patched model: 4 AdamW steps on one batch of random tokens (fp32,
    the CPU reference), each step's loss the unpatched model's under the same Trainer (1e-4
    relative), falling at every step, every step through coda's chains; then
    ``Trainer.evaluate`` through transformers' forward (no coda call), its loss the unpatched
    model's."""

    def run(model):
        trainer = hf_trainer(model, tmp_path, 4)
        trainer.train()
        return trainer_losses(trainer), trainer.evaluate()["eval_loss"]

    hf = tl.hf_model(tied=True, dtype=torch.float32)
    patched = coda_spec.nn.apply_to_hf(copy.deepcopy(hf), builds=builds)
    calls = counted(patched)
    got, got_eval = run(patched)
    assert len(calls) == 4  # every training step coda's, evaluation transformers'
    want, want_eval = run(hf)
    assert len(got) == len(want) == 4 and all(map(torch.isfinite, torch.tensor(got)))
    assert all(abs(a - b) <= 1e-4 * b for a, b in zip(got, want, strict=True)), (got, want)
    assert all(b < a for a, b in zip(got, got[1:], strict=False)), got
    assert abs(got_eval - want_eval) <= 1e-4 * want_eval, (got_eval, want_eval)
