"""``from_hf`` and ``apply_to_hf``: one entry point for every model family ``coda_spec.nn``
serves, dispatching on transformers' ``config.model_type``.

* :func:`from_hf` makes coda's own model of a transformers model (its weights permuted once into
  coda's layouts; ``forward`` returns the loss tensor), e.g. ``coda_spec.nn.LlamaForCausalLM``.
* :func:`apply_to_hf` patches the transformers model in place (``coda_spec.nn.hf.drop_in``): a
  drop-in for transformers' training loops, ``Trainer`` included, as Liger-Kernel's patched
  models are.

A model type not in :data:`FAMILIES`, or a model of a served type that is not its causal LM
(``LlamaForSequenceClassification``), is refused with a ``CodaRuntimeError`` naming it, the
families served and what to do. Adding a family is one :class:`Family` entry and its module
(its coda model with a ``from_hf`` classmethod, its ``apply_to_hf_<family>`` over
``drop_in``), or an entry alone where a family's decoder is one already served (Mistral's is
Llama's); docs/training.md, "One entry point".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coda_spec.nn.gemma3 import MULTIMODAL, Gemma3ForCausalLM, apply_to_hf_gemma3
from coda_spec.nn.hf import apply_to_hf_llama
from coda_spec.nn.llama import LlamaForCausalLM
from coda_spec.nn.olmo2 import Olmo2ForCausalLM, apply_to_hf_olmo2
from coda_spec.nn.qwen2 import Qwen2ForCausalLM, apply_to_hf_qwen2
from coda_spec.nn.qwen3 import Qwen3ForCausalLM, apply_to_hf_qwen3
from coda_spec.runtime import CodaRuntimeError


@dataclass(frozen=True)
class Family:
    """One served family: transformers' ``model_type``, the transformers class it serves (by
    name: a subclass is served too; the check needs no transformers import), coda's model
    (``model.from_hf(model_or_state_dict, config=None, **kw)``) and the in-place patch
    (``apply(model, **kw)``)."""

    model_type: str
    hf_class: str
    model: type
    apply: Callable


# Mistral's decoder is Llama's (the same projections, names and layouts, RMSNorm, SwiGLU, RoPE,
# no biases); its config differs, and ``LlamaShape.of`` reads it: the sliding window (attention's
# mask, ``coda_spec.nn.llama.windowed``) and a head_dim that need not be hidden / heads.
FAMILIES = (
    Family("llama", "LlamaForCausalLM", LlamaForCausalLM, apply_to_hf_llama),
    Family("mistral", "MistralForCausalLM", LlamaForCausalLM, apply_to_hf_llama),
    Family("gemma3_text", "Gemma3ForCausalLM", Gemma3ForCausalLM, apply_to_hf_gemma3),
    # Qwen2: Llama's decoder with QKV biases (its own chains, specs/qwen2_*.yaml), eps 1e-6
    Family("qwen2", "Qwen2ForCausalLM", Qwen2ForCausalLM, apply_to_hf_qwen2),
    # Qwen3: the per-head q/k RMSNorm and rotate-half RoPE in torch between its chains and SDPA
    Family("qwen3", "Qwen3ForCausalLM", Qwen3ForCausalLM, apply_to_hf_qwen3),
    # OLMo-2: chains of its own (specs/olmo2_*.yaml), its post-norms and QK-norm in torch
    Family("olmo2", "Olmo2ForCausalLM", Olmo2ForCausalLM, apply_to_hf_olmo2),
)

# model types refused with a reason of their own (a model of a served family that coda_spec.nn
# does not train), before the generic "not served"
REFUSED_TYPES = (("gemma3", MULTIMODAL),)


def _served() -> str:
    return ", ".join(f"{f.model_type!r} ({f.hf_class})" for f in FAMILIES)


def family(config, model=None, entry: str = "from_hf") -> Family:
    """The family serving ``config`` (a transformers config) and, when given, ``model`` (its
    class checked); else a ``CodaRuntimeError`` naming what was given and what is served.
    ``entry``: the calling entry point's name, for the message."""
    kind = getattr(config, "model_type", None)
    if not isinstance(kind, str) or not kind:
        got = type(config).__name__ if config is not None else f"{type(model).__name__} (no config)"
        raise CodaRuntimeError(
            f"coda_spec.nn.{entry} reads the family from a transformers config's model_type; "
            f"got {got}, which has none: pass a transformers model (or a "
            "state dict with config=its transformers config); for coda_spec.nn.LlamaConfig "
            "use coda_spec.nn.LlamaForCausalLM"
        )
    why = dict(REFUSED_TYPES).get(kind)
    if why is not None:
        raise CodaRuntimeError(f"coda_spec.nn.{entry}: {why}")
    found = [f for f in FAMILIES if f.model_type == kind]
    if not found:
        raise CodaRuntimeError(
            f"coda_spec.nn.{entry}: model_type {kind!r} is not served; coda_spec.nn serves "
            f"{_served()}: train this model with transformers as it is, or port its family "
            '(docs/training.md, "One entry point")'
        )
    (fam,) = found
    if model is not None:
        names = [c.__name__ for c in type(model).__mro__]
        if fam.hf_class not in names:
            raise CodaRuntimeError(
                f"coda_spec.nn.{entry}: model_type {kind!r} is served as transformers' "
                f"{fam.hf_class} (a causal LM with its head); got {type(model).__name__}: "
                f"load the model as {fam.hf_class}"
            )
    return fam


def from_hf(model_or_state_dict, config=None, **kw):
    """coda's model of a transformers causal LM (or of its state dict, with ``config=``), with
    its weights, in their dtype and device unless ``dtype``/``device`` are given; ``kw``: the
    family's model's (``builds``, ``tuned``, ``recompute``, ``lm_head_chunk_rows``, ...)."""
    is_dict = isinstance(model_or_state_dict, dict)
    if is_dict and config is None:
        raise CodaRuntimeError("coda_spec.nn.from_hf(state_dict) needs the model's config=")
    model = None if is_dict else model_or_state_dict
    fam = family(config if config is not None else getattr(model, "config", None), model)
    return fam.model.from_hf(model_or_state_dict, config=config, **kw)


def apply_to_hf(model, **kw):
    """Patch ``model`` (a transformers causal LM of a served family) in place to train through
    coda's chains, a drop-in for transformers' training loops (``coda_spec.nn.hf``); returns
    it. ``kw``: the family's patch's (``builds``, ``tuned``, ``recompute``,
    ``lm_head_chunk_rows``)."""
    return family(getattr(model, "config", None), model, "apply_to_hf").apply(model, **kw)
