"""The unfused baselines ``coda bench`` times each chain against: the contract, the
``equivalent_to`` fallback, and the catalogue's baselines found in the source checkout.

Imports torch at import time. The catalogue's own baselines -- one eager PyTorch function per
bundled spec, and the Liger Kernel ones -- are not part of the installed package: they live next
to the benchmarks, in the repository's ``benchmarks/baselines/`` (what they are and why: its
``__init__``), found by :func:`catalogue`.

Contract
--------
``eager(checked, sizes)`` and ``liger(checked, sizes)`` return a :class:`Baseline`: ``fn`` maps
the spec's inputs by name (declared dtypes, on the device; derived inputs included) to
``{output name: tensor}`` for the outputs in ``produces``. ``prepare``, when set, runs once
outside the timing: it takes the spec inputs and returns the dict ``fn`` takes, with the same
keys (a tensor may come back re-laid-out under its own name, e.g. a weight in Liger's row order)
plus precomputed entries whose names start with ``_`` (RoPE tables). What ``prepare`` returns is
detached: a driver that differentiates ``fn`` (``llama_block``'s backward) marks the prepared
tensors named in ``backward.grads`` as leaves itself, then calls ``fn`` and
``torch.autograd.grad``. ``note`` says what a baseline leaves out or does differently from coda;
it is "" when the baseline produces every spec output in the spec's layout and ``prepare`` moves
no work out of the timing.

* **eager**: the catalogue's function for a bundled spec; any other spec (or no catalogue
  here) evaluates its ``equivalent_to`` with ``coda_spec.expr.evaluate`` at the declared dtypes
  (``note`` starts with ``"equivalent_to fallback"``); without an ``equivalent_to`` there is
  nothing to time and :func:`eager` raises ``ValueError``.
* **liger**: the catalogue's; needs it (:func:`catalogue` raises ``ToolError`` naming where it
  looked); ``None`` where Liger has no op for the chain.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch

from coda_spec.errors import ToolError
from coda_spec.expr import parse, uses_vjp
from coda_spec.expr.evaluate import eval_node

FALLBACK = "equivalent_to fallback"
CATALOGUE = "benchmarks.baselines"  # the module name the catalogue's baselines import as
CATALOGUE_ENV = "CODA_BASELINES"  # a folder to take them from instead of the checkout's
CHECKOUT = Path(__file__).resolve().parents[2] / "benchmarks" / "baselines"


@dataclass(frozen=True)
class Baseline:
    name: str  # "eager" or "liger"
    fn: Callable[[dict], dict]  # fn(tensors) -> {output name: tensor}
    produces: tuple[str, ...]  # output names fn returns
    note: str = ""  # what it leaves out / how it differs; "" when it produces every spec output
    prepare: Callable[[dict], dict] | None = None  # one-time setup outside timing -> fn's dict


@dataclass(frozen=True)
class Impl:
    """One registry entry: ``fn(tensors, sizes)``, ``prepare(tensors, sizes)``."""

    fn: Callable[[dict, dict], dict]
    prepare: Callable[[dict, dict], dict] | None = None
    note: str = ""
    produces: tuple[str, ...] | None = None  # None: every spec output
    heads: bool = False  # needs whole heads of head_dim columns (Liger RoPE / per-head norm)


def grad_leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().requires_grad_(True)


# -- the catalogue's baselines (benchmarks/baselines/ of a source checkout) ---------------------
def catalogue():
    """The catalogue's baselines package (``benchmarks.baselines``): already imported, else
    loaded from ``$CODA_BASELINES`` or the source checkout this coda runs from. Raises
    ``ToolError`` saying where it looked and what to do when it is not there (an installed
    coda has no ``benchmarks/``)."""
    if CATALOGUE in sys.modules:
        return sys.modules[CATALOGUE]
    where = Path(os.environ.get(CATALOGUE_ENV) or CHECKOUT)
    init = where / "__init__.py"
    if not init.is_file():
        raise ToolError(
            f"the catalogue baselines (eager per chain, liger) are not at {where}: they live "
            "in the coda repository's benchmarks/baselines/, not in the installed package; run "
            f"coda bench from a source checkout (pip install -e .), set {CATALOGUE_ENV} to that "
            "folder, or time without them: --baselines eager (equivalent_to) or none"
        )
    spec = importlib.util.spec_from_file_location(
        CATALOGUE, init, submodule_search_locations=[str(where)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[CATALOGUE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(CATALOGUE, None)
        raise
    return module


def _eager_registry():
    """The catalogue's eager functions by spec name; {} without the catalogue."""
    try:
        return catalogue().EAGER
    except ToolError:
        return {}


# -- the equivalent_to fallback -----------------------------------------------------------------
def _eval_equivalent(prog, produces, differentiable, sizes, tensors):
    """``equivalent_to`` at the inputs' dtypes; outputs keep their graph when the driver will
    differentiate them (a spec with ``backward:``)."""
    env = {**sizes, **tensors}
    vjp = uses_vjp(prog)
    if vjp:  # vjp(y, x, dy) needs x in the graph; a leaf the driver made stays that leaf
        env.update(
            {
                k: grad_leaf(v)
                for k, v in tensors.items()
                if v.is_floating_point() and not v.requires_grad
            }
        )
    with torch.enable_grad() if vjp or differentiable else torch.no_grad():
        for target, node in prog.statements:
            env[target] = eval_node(node, env)
    out = {n: env[n] for n in produces}
    return out if differentiable else {n: v.detach() for n, v in out.items()}


def _fallback(checked, sizes: dict) -> Baseline:
    spec = checked.spec
    if not spec.equivalent_to:
        raise ValueError(
            f"no eager baseline for spec '{spec.name}': it is not a catalogue chain "
            f"({', '.join(sorted(_eager_registry()))}) and has no equivalent_to to evaluate "
            "instead"
        )
    prog = parse(spec.equivalent_to)
    produces = tuple(o.name for o in spec.outputs if o.name in prog.targets)
    if not produces:
        raise ValueError(
            f"no eager baseline for spec '{spec.name}': its equivalent_to assigns none of its "
            f"outputs ({', '.join(o.name for o in spec.outputs)})"
        )
    fn = partial(_eval_equivalent, prog, produces, spec.backward is not None, dict(sizes))
    return Baseline("eager", fn, produces, FALLBACK)


# -- the two entry points ------------------------------------------------------------------------
def bind(name: str, impl: Impl, checked, sizes: dict) -> Baseline:
    sizes = dict(sizes)
    produces = impl.produces
    if produces is None:
        produces = tuple(o.name for o in checked.spec.outputs)
    prepare = None if impl.prepare is None else partial(impl.prepare, sizes=sizes)
    return Baseline(name, partial(impl.fn, sizes=sizes), produces, impl.note, prepare)


def eager(checked, sizes: dict) -> Baseline:
    """The plain-PyTorch baseline of ``checked`` at ``sizes`` (every dim bound, M included):
    the catalogue's function for the spec, else its ``equivalent_to`` (the note says so, and
    says when the catalogue was not there to ask)."""
    try:
        registry, why = catalogue().EAGER, ""
    except ToolError:
        registry, why = (
            {},
            f" (no catalogue baselines at {os.environ.get(CATALOGUE_ENV) or CHECKOUT})",
        )
    impl = registry.get(checked.spec.name)
    if impl is None:
        base = _fallback(checked, sizes)
        return replace(base, note=base.note + why)
    return bind("eager", impl, checked, sizes)


def liger(checked, sizes: dict) -> Baseline | None:
    """The cuBLAS + Liger Kernel baseline (the catalogue's), or None where Liger has no op for
    the chain, its heads do not fit or liger_kernel does not import. Raises ``ToolError``
    without the catalogue (:func:`catalogue`)."""
    return catalogue().liger_baseline(checked, sizes)
