"""What ``coda_spec.nn``'s model takes: every argument honoured or refused in the user's terms
(``coda_spec.nn.call``), and the transformers releases it supports (``coda_spec.versions``).

The refusals are checked on ``call.checked`` (what both the model and the transformers patch
run first) and once through the model; the masks' numerics against transformers are
tests/test_nn_llama.py's.
"""

from __future__ import annotations

import re
import sys

import pytest
import torch

from coda_spec import versions
from coda_spec.nn import call
from coda_spec.runtime import CodaRuntimeError
from tests.conftest import ROOT

V = 1024
IDS = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(0))


def check(input_ids=IDS, labels=IDS, **kw):
    return call.checked(input_ids, labels, kw, V)


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"lables": IDS}, "unknown keyword 'lables'; did you mean 'labels'"),
        ({"postion_ids": IDS}, "unknown keyword 'postion_ids'; did you mean 'position_ids'"),
        ({"attn_mask": IDS}, "unknown keyword 'attn_mask'; did you mean 'attention_mask'"),
        ({"use_cache": True}, r"use_cache=True\) is not supported: .* keeps no KV cache"),
        ({"inputs_embeds": torch.zeros(2, 8, 4)}, r"inputs_embeds=<tensor \(2, 8, 4\)>"),
        ({"output_attentions": True}, "returns no attention weights"),
        ({"logits_to_keep": 1}, "never makes the logits"),
    ],
    ids=["lables", "postion_ids", "attn_mask", "use_cache", "inputs_embeds", "attn", "logits"],
)
def test_unknown_and_unsupported_keywords_are_refused(kw, want):
    """Before: ``forward(input_ids, labels, **kw)`` dropped every keyword it did not read."""
    with pytest.raises(CodaRuntimeError, match=want):
        check(**kw)


def test_keywords_that_ask_for_nothing_pass():
    """What Trainer and generate-style callers pass to mean "off" is accepted."""
    got = check(use_cache=False, output_attentions=None, return_dict=None, num_items_in_batch=3)
    assert got.mask is None and got.n == 3


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ((IDS[0], IDS[0]), r"input_ids must be \[batch, seq\]; got shape \(8,\); one sequence is"),
        ((IDS, None), "needs labels .* labels=input_ids"),
        ((None, IDS), "needs input_ids"),
        ((IDS[:, :0], IDS[:, :0]), r"input_ids has shape \(2, 0\): a batch needs at least one"),
        ((IDS, IDS[:, 1:]), r"labels has shape \(2, 7\), input_ids \(2, 8\): .* labels=input_ids"),
        ((IDS.float(), IDS), r"input_ids must hold integer token ids .* got torch.float32"),
        ((IDS, IDS.float()), "labels must hold integer"),
        ((IDS.tolist(), IDS), "input_ids must be a torch tensor of token ids; got list"),
        ((IDS + V, IDS), r"input_ids holds a token id outside the vocabulary \[0, 1024\)"),
        ((IDS, IDS - V), r"labels holds a token id outside .* \(other than -100"),
    ],
    ids=["1d", "no-labels", "no-ids", "empty", "labels-shape", "float-ids", "float-labels",
         "list", "ids-range", "labels-range"],
)  # fmt: skip
def test_shape_mistakes_are_refused_in_the_users_terms(args, want):
    """Before: raw ValueError/TypeError/IndexError from inside the loss (``b, s =
    input_ids.shape``, ``labels[:, 1:]``, ``F.embedding``)."""
    with pytest.raises(CodaRuntimeError, match=want):
        call.checked(*args, {}, V)


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"attention_mask": torch.ones(2, 7)}, r"attention_mask has shape \(2, 7\)"),
        ({"attention_mask": torch.ones(2, 1, 8, 8)}, "a 4-D mask of your own is not supported"),
        ({"position_ids": torch.arange(7)[None]}, r"position_ids has shape \(1, 7\)"),
    ],
    ids=["mask-shape", "mask-4d", "positions-shape"],
)
def test_mask_and_position_mistakes_are_refused(kw, want):
    with pytest.raises(CodaRuntimeError, match=want):
        check(**kw)


def test_masks_follow_transformers_rule():
    """All ones and unbroken positions: no mask (SDPA's causal path); padding: causal and the
    key kept; positions that restart: causal within each sequence; ``[1, S]`` positions are
    every row's."""
    assert check(attention_mask=torch.ones_like(IDS)).mask is None
    assert check(position_ids=torch.arange(8)[None]).mask is None
    pad = torch.ones_like(IDS)
    pad[0, :3] = 0
    got = check(attention_mask=pad)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    assert torch.equal(got.mask[1, 0], causal)
    assert torch.equal(got.mask[0, 0], causal & (torch.arange(8) >= 3))
    assert torch.equal(got.pos, torch.arange(8).repeat(2).int())  # transformers' positions
    packed = torch.tensor([0, 1, 2, 0, 1, 2, 3, 4])[None]
    got = check(position_ids=packed)
    seq = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    assert torch.equal(got.mask[1, 0], causal & (seq[:, None] == seq[None, :]))
    assert torch.equal(got.pos, packed.expand(2, 8).reshape(-1).int())


# -- transformers versions --------------------------------------------------------------------


@pytest.mark.parametrize("v", ["5.17.0", "5.20.2", "5.24.0", "5.25.0"])
def test_transformers_in_the_range_is_accepted(v):
    assert versions.unsupported_transformers(v) == ""


@pytest.mark.parametrize("v", ["5.16.1", "5.26.0", "5.26.0.dev0", "4.57.6", "6.0.0", "main"])
def test_transformers_outside_the_range_is_refused_naming_it(v):
    why = versions.unsupported_transformers(v)
    assert f"supports transformers>=5.17,<5.26; transformers {v} is installed" in why
    assert "pip install 'coda-spec[train]'" in why


def test_the_model_refuses_an_unsupported_transformers(monkeypatch):
    """A transformers config under a release outside the range: a CodaRuntimeError naming the
    range, before any of transformers' internals is called (5.24's ``from_hf`` was a raw
    TypeError from ``compute_default_rope_parameters``)."""
    pytest.importorskip("transformers")
    from coda_spec.nn import LlamaShape
    from tests.test_nn_llama import config

    monkeypatch.setattr(versions, "version", lambda dist: "5.26.1")
    with pytest.raises(CodaRuntimeError, match=re.escape("transformers>=5.17,<5.26")):
        LlamaShape.of(config(True))
    from coda_spec.nn import LlamaConfig

    LlamaShape.of(LlamaConfig())  # coda's own config needs no transformers


def test_the_range_is_written_once():
    """pyproject's ``[train]`` extra spells ``versions.TRANSFORMERS``; the test extra pins the
    lower tested release; .ci/run's second environment installs the upper one."""
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert f"transformers{versions.transformers_range()}" in extras["train"]
    low, high = versions.TRANSFORMERS_TESTED
    assert f"transformers=={low}" in extras["test"]
    assert f"transformers=={high}" in (ROOT / ".ci" / "run").read_text()
    for v in versions.TRANSFORMERS_TESTED:
        assert versions.unsupported_transformers(v) == ""
