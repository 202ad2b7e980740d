"""What a GEMM epilogue cannot hold whatever the tile config, for ``analyze``'s walk.

Part of stage ``analyze`` (``coda_spec.check.steps`` calls :func:`epilogue_refusals` once a
kernel's pairing mode is known), so that ``coda check`` never calls valid a spec that ``coda
build`` refuses at its lower stage. The answers are the lowering's own, asked of the same
places, and the diagnostics are the ones the build gives, at the same item:

* a primitive without a GEMM-epilogue lowering, or whose lowering cannot serve the kernel's
  pairing mode (``Primitive.epilogue_refusal``, from its ``lower`` and ``no_mode``);
* a per-(row, group) statistic (``Primitive.prepass_of``: ``prepass``, a grouped
  ``reduce_row``) in a packed kernel, which QuACK's prepass refuses, or one whose input
  depends on an item the prepass fn cannot re-compute (``primitives.lower_api.prepass_slice``);
* a full-width store after the kernel's first (D) that accumulates (``add_to``), or any in an
  acc_pair kernel (``primitives/store.py``'s rule, :class:`_StoreOrder`).

What depends on the config (``Primitive.supports``) is judged by the build, which knows it.
"""

from __future__ import annotations

from coda_spec.errors import ItemError
from coda_spec.primitives._reduce import HALF_COL
from coda_spec.primitives.base import FP8_DTYPES, double, half
from coda_spec.primitives.lower_api import NO_PACKED_PREPASS, prepass_slice
from coda_spec.primitives.store import ADD_TO_NOT_D, PAIR_ONE_FULL


def epilogue_refusals(w, ops, mode: str, width, scope, env) -> None:
    """Report each item of a kernel's epilogue (``ops``, pairing ``mode``, GEMM N ``width``,
    the chain tensors ``scope``, the value types ``env``) that its lowering would refuse; ``w``
    is the ``StepWalker``."""
    producers: dict = {}  # value name -> (item index, item), as the lowering walk records them
    stores = _StoreOrder(mode, width, scope)
    for idx, op in enumerate(ops):
        p = w.prims[op.prim]
        no = p.epilogue_refusal(mode)
        if no is None:
            no = p.item_refusal(op, mode, w.sizes)
        if no is None:
            no = _statistic_refusal(p.prepass_of(op), mode, producers, w.prims)
        if no is None and op.prim == "store":
            no = stores.refusal(op) or _fp8_pair_refusal(op, mode, width, scope)
        if no is None and op.prim == "reduce_col" and mode == "acc_pair":
            no = _half_col_refusal(op, width, env)
        if no is not None:
            at = op.loc.path + ((no.key,) if no.key else ())
            w.err(at, f"cannot lower '{op.prim}': {no.message}", no.hint)
        for r in op.results:
            producers[r] = (idx, op)


def _fp8_pair_refusal(op, mode: str, width, scope) -> ItemError | None:
    """fp8 tiles are stored from plain kernels, and as the half-width tiles of acc_pair kernels
    (``PairF8Store``: QuACK's gated store with an 8-bit element on sm90); an acc_pair kernel's
    D (its one full-width tile) is not stored in fp8 (neither built nor verified beside the
    gated store), and a packed kernel's D is 16-bit pairs."""
    info = scope.get(op.get("to"))
    if mode == "plain" or info is None or info.dtype not in FP8_DTYPES:
        return None
    if mode == "acc_pair" and len(info.shape) == 2 and info.shape[1] != width:
        return None  # a half-width tile: PairF8Store
    what = "full-width tile (D)" if mode == "acc_pair" else "tile"
    return ItemError(
        f"an {info.dtype} {what} cannot be stored from an {mode} kernel (coda stores fp8 from "
        "plain kernels, and as an acc_pair kernel's half-width tiles)",
        hint="store it in bf16 here and quantize it in a plain kernel or a host step",
    )


def _half_col_refusal(op, width, env) -> ItemError | None:
    """A reduce_col of a half-width value in an acc_pair kernel (``_reduce.HALF_COL``)."""
    of = op.get("of")
    for raw in of if isinstance(of, list) else [of]:
        t = env.get(raw, (None,))[0] if isinstance(raw, str) else None
        if t is not None and t.kind == "tile" and t.width == half(width):
            return ItemError(HALF_COL[0], "of", HALF_COL[1])
    return None


def host_refusals(w, ops) -> None:
    """Report each item of a host step's body that its host lowering refuses for its arguments
    (``Primitive.item_refusal`` with ``"host"``), as ``coda build`` would."""
    for op in ops:
        no = w.prims[op.prim].item_refusal(op, "host", w.sizes)
        if no is not None:
            at = op.loc.path + ((no.key,) if no.key else ())
            w.err(at, f"cannot lower '{op.prim}' in a host step: {no.message}", no.hint)


class _StoreOrder:
    """The store lowering's rule (``primitives/store.py``): the first full-width store is the
    GEMM's D; only D can accumulate (``add_to``), and an acc_pair kernel has one full-width
    store, its other tiles half-width."""

    def __init__(self, mode: str, width, scope):
        self.d_width = double(width) if mode == "packed_pair" else width  # D's, as store's
        self.mode, self.scope, self.has_d = mode, scope, False

    def refusal(self, op) -> ItemError | None:
        info = self.scope.get(op.get("to"))
        if info is None or len(info.shape) != 2 or info.shape[1] != self.d_width:
            return None  # a half-width tile, or a per-row value: not D
        if not self.has_d:
            self.has_d = True
            return None
        if op.get("add_to") is not None:
            return ItemError(ADD_TO_NOT_D[0], hint=ADD_TO_NOT_D[1])
        if self.mode == "acc_pair":
            return ItemError(PAIR_ONE_FULL[0], hint=PAIR_ONE_FULL[1])
        return None


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
