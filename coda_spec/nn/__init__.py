"""``coda_spec.nn``: models assembled from the bundled chains (docs/training.md).

* :func:`from_hf` / :func:`apply_to_hf` (``coda_spec.nn.families``): the entry point for every
  family, dispatching on transformers' ``config.model_type`` (today ``"llama"``, and
  ``"mistral"`` through the Llama's chains, its sliding window in attention): coda's own
  model of a transformers model, or the transformers model patched in place as a drop-in for
  its training loops (``Trainer`` included).
* :class:`LlamaForCausalLM` (``coda_spec.nn.llama``): a Llama-3 decoder with GQA whose GEMMs and
  glue run in ``specs/llama3_*.yaml``; ``from_hf`` / ``to_hf_state_dict`` read and write
  transformers' names and layouts (``coda_spec.nn.layout``).
* :func:`apply_to_hf_llama` (``coda_spec.nn.hf``): the same chains patched into an existing
  transformers ``LlamaForCausalLM`` (what ``apply_to_hf`` runs for a Llama).
* :class:`Gemma3ForCausalLM` (``coda_spec.nn.gemma3``): Gemma-3, text only, its MLP and LM head
  in chains and its sandwich norms, QK-norm and RoPE in torch; :func:`apply_to_hf_gemma3` the
  patch of a transformers ``Gemma3ForCausalLM``.
* :class:`Qwen2ForCausalLM` and :func:`apply_to_hf_qwen2` (``coda_spec.nn.qwen2``): Qwen2, the
  Llama's decoder with QKV biases, through its own chains (``specs/qwen2_*.yaml``).
* :class:`Qwen3ForCausalLM` / :func:`apply_to_hf_qwen3` (``coda_spec.nn.qwen3``): Qwen3 from
  ``specs/qwen3_*.yaml``, its per-head q/k norm and rotate-half RoPE in torch.
* :class:`Olmo2ForCausalLM` / :func:`apply_to_hf_olmo2` (``coda_spec.nn.olmo2``): OLMo-2, its
  GEMMs in ``specs/olmo2_*.yaml`` and the Llama's LM head, its post-norms and QK-norm in torch.
* ``coda_spec.nn.call``: what a call takes, each argument honoured (padding and packing masks
  as transformers makes them) or refused.
"""

from coda_spec.nn.families import FAMILIES, apply_to_hf, from_hf
from coda_spec.nn.gemma3 import Gemma3ForCausalLM, apply_to_hf_gemma3
from coda_spec.nn.hf import apply_to_hf_llama
from coda_spec.nn.llama import LlamaConfig, LlamaForCausalLM, LlamaShape
from coda_spec.nn.olmo2 import Olmo2ForCausalLM, apply_to_hf_olmo2
from coda_spec.nn.qwen2 import Qwen2ForCausalLM, apply_to_hf_qwen2
from coda_spec.nn.qwen3 import Qwen3ForCausalLM, apply_to_hf_qwen3

__all__ = [
    "FAMILIES",
    "Gemma3ForCausalLM",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaShape",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Olmo2ForCausalLM",
    "apply_to_hf",
    "apply_to_hf_gemma3",
    "apply_to_hf_llama",
    "apply_to_hf_qwen2",
    "apply_to_hf_qwen3",
    "apply_to_hf_olmo2",
    "from_hf",
]
