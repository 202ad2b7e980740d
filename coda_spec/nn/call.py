"""What a call of the model takes: its arguments checked, and the attention mask they ask for.

``coda_spec.nn.LlamaForCausalLM.forward`` and the ``apply_to_hf_llama`` patch run one loss
(``coda_spec.nn.llama.causal_lm_loss``), and :func:`checked` is its door: every argument is
honoured, or refused with a ``CodaRuntimeError`` that says what to do instead; nothing is
ignored.

* **Honoured** (:data:`HONOURED`, transformers' names and meanings): ``input_ids [B, S]`` and
  ``labels [B, S]`` (both integer, shifted inside as transformers does), ``attention_mask``,
  ``position_ids`` and ``num_items_in_batch``.
* **Refused** (:data:`REFUSED`): transformers' keywords the model has no use for (a KV cache,
  ``inputs_embeds``, logits, attention weights, hidden states). Each passes as ``None`` or
  ``False``, the values that ask for nothing (Trainer passes ``use_cache=False``).
* **Anything else** is refused with a did-you-mean: a misspelt ``lables=`` is never swallowed.

The mask follows transformers' rule for a call without a cache (``masking_utils``,
``create_causal_mask``), so a padded or packed batch gets transformers' loss:

* ``attention_mask [B, S]`` (1 keeps a token, 0 pads it): causal and the key kept. Positions are
  ``position_ids`` if given, else ``0 .. S-1`` on every row, padded rows included (transformers
  derives positions from the mask only in ``generate``).
* no ``attention_mask`` and ``position_ids`` that restart (packed sequences, ``[0 1 2 0 1 ..]``):
  causal within each run of consecutive positions.
* otherwise no mask: SDPA's ``is_causal`` (the flash kernel on the GPU). An all-ones mask and
  positions that never restart are that case too; telling them apart reads the batch back
  (one host sync per call, shared with the token-range checks). Under ``torch.compile`` nothing
  is read back: a given ``attention_mask`` or ``position_ids`` always makes the mask, as
  transformers does while tracing, and token ranges are not checked.

A query row whose keys are all masked (a left pad's own row) is SDPA's: zeros, as in
transformers; its label is the caller's to ignore (-100), as with transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coda_spec.errors import did_you_mean
from coda_spec.runtime import CodaRuntimeError

IGNORE_INDEX = -100
HONOURED = ("input_ids", "labels", "attention_mask", "position_ids", "num_items_in_batch")
_CACHE = (
    "the coda model computes a training loss and keeps no KV cache: generate with transformers' "
    "LlamaForCausalLM (load model.to_hf_state_dict() into it)"
)
_NO_LOGITS = (
    "the coda model never makes the logits (the LM head's epilogue keeps the log-sum-exp and the "
    "target logit): compute them with transformers' LlamaForCausalLM"
)
REFUSED = {
    "inputs_embeds": "the coda model embeds input_ids itself: pass input_ids",
    "past_key_values": _CACHE,
    "use_cache": _CACHE,
    "cache_position": _CACHE,
    "logits_to_keep": _NO_LOGITS,
    "return_dict": "forward returns the loss, a 0-dim tensor, not a ModelOutput",
    "output_attentions": "attention runs in torch's SDPA, which returns no attention weights",
    "output_hidden_states": "the hidden states stay inside the chains' kernels",
}


@dataclass(frozen=True)
class Call:
    """A checked call: ``pos [B*S]`` int32 positions, ``target [B*S]`` int32 (the shifted
    labels), ``mask`` (``[B, 1, S, S]`` bool, True where a query attends to a key) or None for
    plain causal attention, and the loss's divisor override ``n``."""

    ids: torch.Tensor
    pos: torch.Tensor
    target: torch.Tensor
    mask: torch.Tensor | None
    n: object


def _refuse_keywords(kw: dict) -> None:
    for key, value in kw.items():
        if key in REFUSED:
            if value is None or value is False:
                continue
            raise CodaRuntimeError(
                f"forward({key}={_show(value)}) is not supported: {REFUSED[key]}"
            )
        hint = did_you_mean(key, (*HONOURED, *REFUSED))
        raise CodaRuntimeError(
            f"forward() got an unknown keyword {key!r}"
            + (f"; {hint}" if hint else "")
            + f" (it takes {', '.join(HONOURED)})"
        )


def _show(value) -> str:
    return f"<tensor {tuple(value.shape)}>" if isinstance(value, torch.Tensor) else repr(value)


def _integer(name: str, t, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise CodaRuntimeError(f"{name} must be a torch tensor of {what}; got {type(t).__name__}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise CodaRuntimeError(
            f"{name} must hold integer {what} (torch.long); got {t.dtype}: pass {name}.long() "
            "if these are ids"
        )
    return t


def _shaped(name: str, t: torch.Tensor, ids: torch.Tensor, why: str) -> None:
    if t.device != ids.device:
        raise CodaRuntimeError(f"{name} is on {t.device}, input_ids on {ids.device}: move it")
    if tuple(t.shape) != tuple(ids.shape):
        raise CodaRuntimeError(
            f"{name} has shape {tuple(t.shape)}, input_ids {tuple(ids.shape)}: {why}"
        )


def checked(input_ids, labels, kw: dict, vocab: int) -> Call:
    """The call's arguments checked (the module docstring) and turned into what the chains read.
    ``kw``: every keyword besides ``input_ids`` and ``labels``."""
    _refuse_keywords({k: v for k, v in kw.items() if k not in HONOURED})
    if input_ids is None:
        raise CodaRuntimeError("forward needs input_ids [batch, seq] (token ids)")
    if labels is None:
        raise CodaRuntimeError(
            "forward computes the training loss and needs labels [batch, seq] (next-token "
            "prediction: labels=input_ids, -100 where a token is not predicted); the coda model "
            "makes no logits, so a call without labels has nothing to return"
        )
    ids = _integer("input_ids", input_ids, "token ids")
    if ids.dim() != 2:
        one = "; one sequence is input_ids[None]" if ids.dim() == 1 else ""
        raise CodaRuntimeError(f"input_ids must be [batch, seq]; got shape {tuple(ids.shape)}{one}")
    b, s = ids.shape
    if b == 0 or s == 0:
        raise CodaRuntimeError(
            f"input_ids has shape {(b, s)}: a batch needs at least one sequence of one token"
        )
    labels = _integer("labels", labels, "token ids (-100 where ignored)")
    _shaped(
        "labels",
        labels,
        ids,
        "labels are input_ids-shaped, shifted inside as transformers "
        "does (row t predicts labels[t + 1]): pass labels=input_ids, -100 where ignored",
    )
    attention_mask, position_ids = kw.get("attention_mask"), kw.get("position_ids")
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
            got = (
                tuple(attention_mask.shape)
                if isinstance(attention_mask, torch.Tensor)
                else (type(attention_mask).__name__)
            )
            raise CodaRuntimeError(
                f"attention_mask must be [batch, seq] of 1 (keep) and 0 (padding); got {got} "
                "(a 4-D mask of your own is not supported)"
            )
        _shaped("attention_mask", attention_mask, ids, "one 0/1 per token")
    if position_ids is not None:
        position_ids = _integer("position_ids", position_ids, "positions")
        if position_ids.dim() == 2 and position_ids.shape[0] == 1:
            position_ids = position_ids.expand(b, s) if position_ids.shape[1] == s else position_ids
        _shaped("position_ids", position_ids, ids, "[batch, seq] or [1, seq]")
    target = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    mask, segments = None, None
    if attention_mask is not None:
        mask = attention_mask.to(torch.bool)
    elif position_ids is not None:
        # transformers' find_packed_sequence_indices: a new sequence where a position is not
        # its predecessor + 1
        first = position_ids[:, :1] - 1
        segments = (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)
    if not torch.compiler.is_compiling():
        mask, segments = _read_back(ids, target, mask, segments, vocab)
    pos = position_ids if position_ids is not None else torch.arange(s, device=ids.device)
    pos = pos.expand(b, s).reshape(b * s).to(torch.int32)
    return Call(
        ids,
        pos,
        target.reshape(b * s).to(torch.int32),
        _mask(mask, segments, s),
        kw.get("num_items_in_batch"),
    )


def _read_back(ids, target, mask, segments, vocab: int):
    """One host sync: token ids and labels within the vocabulary (an id past it would read
    another row of a weight, or past it, on the GPU), and whether the padding or packing mask
    masks anything (else None: plain causal attention)."""
    valid = target != IGNORE_INDEX
    flags = [
        ((ids < 0) | (ids >= vocab)).any(),
        (valid & ((target < 0) | (target >= vocab))).any(),
        ~mask.all() if mask is not None else ids.new_zeros((), dtype=torch.bool),
        (segments[:, -1] != 0).any()
        if segments is not None
        else ids.new_zeros((), dtype=torch.bool),
    ]
    bad_ids, bad_labels, padded, packed = torch.stack(flags).tolist()
    for bad, name in ((bad_ids, "input_ids"), (bad_labels, "labels")):
        if bad:
            raise CodaRuntimeError(
                f"{name} holds a token id outside the vocabulary [0, {vocab})"
                + (" (other than -100, the ignored label)" if name == "labels" else "")
            )
    return (mask if padded else None), (segments if packed else None)


def _mask(keep, segments, s: int):
    """``[B, 1, S, S]`` bool: causal, and the key kept (``keep [B, S]``) or in the query's
    sequence (``segments [B, S]``); None when neither is given."""
    if keep is None and segments is None:
        return None
    causal = torch.ones(
        s, s, dtype=torch.bool, device=(keep if keep is not None else segments).device
    )
    causal = causal.tril()
    if keep is not None:
        return (causal[None] & keep[:, None, :])[:, None]
    same = segments[:, :, None] == segments[:, None, :]
    return (causal[None] & same)[:, None]
