"""``coda grad``: derive a chain's fused ``backward:`` section from its forward steps.

Contract
--------
``derive_text(checked, wrt=None, incoming=None, policy="min", keep=())`` returns
:class:`Derived`: the spec's text with a derived ``backward:`` section, and what it costs. It
raises :class:`~coda_spec.grad.facts.Unsupported` (located at the forward item, naming the op)
for what the derivation cannot handle; the command proves the result with ``check --math``
before writing it, so a derivation that fails its own proof is a tool failure, never output.

- ``wrt``: the inputs that get gradients. Default: every floating input that is neither derived
  (``derive:``) nor marked ``differentiable: false``.
- ``incoming``: the outputs whose gradients come in, named ``d_<output>``. Default: every
  floating output not marked ``differentiable: false``.
- ``policy`` (``--save``): ``min`` saves only what the backward cannot recompute and recomputes
  the normalized and activated GEMM inputs in dgrad epilogues (CODA's schedule); ``balanced``
  also keeps the activations the forward already writes (no recompute store for them); ``max``
  keeps every GEMM input the forward writes, so weight gradients read them and backward
  epilogues store nothing extra. ``keep`` names tensors to keep on top of the policy.

What it derives (the schedule is ``coda_spec.grad.derive``; the per-primitive rules are
``coda_spec.grad.rules``): GEMM kernels ``acc = A @ W.T`` (or ``A @ W``) whose epilogues are
elementwise items, row and column vector loads, residual tile loads, the deferred RMSNorm row
scale and its ``sumsq`` statistic (finalize ``rsqrt_mean``, or a derived ``rsqrt(mean(square(x),
-1) + eps)`` input), swiglu / geglu, adjacent-pair rope, an online log-sum-exp and a
target-logit gather; any of these elementwise items over a column range (``cols:``, the rules'
module doc); an input or weight read by several GEMMs (its gradients summed; two kernels running
the same GEMM, a post-norm's statistic pass and its scaled pass, share one dgrad and wgrad).
Not derived (a located error suggesting a hand-written ``backward:``): forward host steps,
prepass statistics, repeated row vectors, a kernel storing the A operands of two GEMMs, an
incoming gradient of a swiglu / geglu input (the packed epilogue reads one tile), and ops
without a rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coda_spec.dtypes import names
from coda_spec.grad.derive import Derivation, words
from coda_spec.grad.facts import Unsupported, read_forward
from coda_spec.grad.text import section, with_backward, without_backward

POLICIES = ("min", "balanced", "max")

__all__ = ["POLICIES", "Derived", "Unsupported", "derive_text", "default_incoming", "default_wrt"]


@dataclass(frozen=True)
class Derived:
    text: str  # the whole spec: the forward as written, then the derived backward section
    backward: str  # the section alone
    kernels: int
    hosts: int
    finalizes: int
    save: tuple
    wrt: tuple
    incoming: tuple


def _floating(dtype: str) -> bool:
    return dtype in names("float")


def default_wrt(spec) -> tuple:
    return tuple(
        t.name for t in spec.tensors if _floating(t.dtype) and t.derive is None and t.differentiable
    )


def default_incoming(spec) -> tuple:
    return tuple(o.name for o in spec.outputs if _floating(o.dtype) and o.differentiable)


def _kept(checked, kernels, policy: str, keep) -> set:
    kept = set(keep)
    if policy == "min":
        return kept
    for j in kernels:
        if any(k.stored_value(j.a) for k in kernels):
            if policy == "max" or j.row_scale is None:
                kept.add(j.a)
    return kept


def derive_text(checked, wrt=None, incoming=None, policy: str = "min", keep=()) -> Derived:
    spec = checked.spec
    kernels, stats = read_forward(checked)
    wrt = tuple(wrt) if wrt is not None else default_wrt(spec)
    incoming = tuple(incoming) if incoming is not None else default_incoming(spec)
    d = Derivation(
        checked,
        kernels,
        stats,
        wrt,
        incoming,
        _kept(checked, kernels, policy, keep),
        checked.source.lines,
    )
    steps = d.run()
    used = set(words(steps))
    for g in [g for g, t in d.st.grads.items() if g not in d.st.outputs and g not in used]:
        del d.st.grads[g]  # an incoming gradient that reaches no wanted input is not taken
    incoming = tuple(t for g, t in d.st.grads.items() if g not in d.st.outputs)
    missing = [t for t in wrt if t not in d.st.grads.values()]
    via = [
        (t, x.name)
        for t in missing
        for x in spec.tensors
        if x.derive and re.search(rf"\b{re.escape(t)}\b", x.derive)
    ]
    if via:
        t, x = via[0]
        raise Unsupported(
            f"a gradient of '{t}' through the derived input '{x}': derive: expressions are "
            "not differentiated (only an RMSNorm statistic's is)",
            spec.tensor(t).loc,
            f"leave '{t}' out of --wrt, or mark it 'differentiable: false'",
        )
    if missing:
        raise Unsupported(
            f"gradients of {', '.join(missing)}: none reaches them from the incoming "
            f"{', '.join('d_' + o for o in incoming) or 'gradients (there are none)'}",
            spec.tensor(missing[0]).loc,
            "leave it out of --wrt, or check which outputs take an incoming gradient",
        )
    backward = section(d, steps, policy)
    text = with_backward(without_backward(checked.source.text), backward)
    count = lambda kind: sum(1 for s in steps if s.kind == kind)  # noqa: E731
    return Derived(
        text,
        backward,
        count("kernel"),
        count("host"),
        count("finalize"),
        tuple(sorted(d.st.save)),
        wrt,
        incoming,
    )
