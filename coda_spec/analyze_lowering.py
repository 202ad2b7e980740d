"""What a GEMM epilogue cannot hold whatever the tile config, for ``analyze``'s walk.

Part of stage ``analyze`` (``coda_spec.analyze_steps`` calls :func:`epilogue_refusals` once a
kernel's pairing mode is known), so that ``coda check`` never calls valid a spec that ``coda
build`` refuses at its lower stage. The answers are the lowering's own, asked of the same
places, and the diagnostics are the ones the build gives, at the same item:

* a primitive without a GEMM-epilogue lowering, or whose lowering cannot serve the kernel's
  pairing mode (``Primitive.epilogue_refusal``, from its ``lower`` and ``no_mode``);
* a per-(row, group) statistic (``Primitive.prepass_of``: ``prepass``, a grouped
  ``reduce_row``) in a packed kernel, which QuACK's prepass refuses, or one whose input
  depends on an item the prepass fn cannot re-compute (``lower_api.prepass_slice``).

What depends on the config (``Primitive.supports``) is judged by the build, which knows it.
"""

from __future__ import annotations

from coda_spec.errors import ItemError
from coda_spec.lower_api import NO_PACKED_PREPASS, prepass_slice


def epilogue_refusals(w, ops, mode: str) -> None:
    """Report each item of a kernel's epilogue (``ops``, pairing ``mode``) that its lowering
    would refuse; ``w`` is the ``StepWalker``."""
    producers: dict = {}  # value name -> (item index, item), as the lowering walk records them
    for idx, op in enumerate(ops):
        p = w.prims[op.prim]
        no = p.epilogue_refusal(mode)
        if no is None:
            no = _statistic_refusal(p.prepass_of(op), mode, producers, w.prims)
        if no is not None:
            w.err(op.loc.path, f"cannot lower '{op.prim}': {no.message}", no.hint)
        for r in op.results:
            producers[r] = (idx, op)


def _statistic_refusal(inputs, mode, producers, prims) -> ItemError | None:
    if not inputs:
        return None
    if mode == "packed_pair":
        message, hint = NO_PACKED_PREPASS
        return ItemError(message, hint=hint)
    try:
        for raw in inputs:
            prepass_slice(raw, producers, prims, {})
    except ItemError as e:
        return e
    return None
