"""Algebra checks: the spec's own math against the unfused math it claims to replace.

* ``check_equivalence``: every output that ``equivalent_to`` assigns is compared, in fp64 on the
  same bf16-valued inputs, with the reference interpreter's value. Agreement to ~1e-10 relative
  proves the reparameterization (deferred norm, zdz, dSwiGLU, RoPE orthogonality, LSE fold).
* ``check_backward``: for a spec with a ``backward:`` section, EVERY backward output is compared
  with ``torch.autograd`` of the forward's ``equivalent_to`` under the same random cotangents
  (an output in ``backward.recomputes``, a forward value the backward recomputes and stores,
  e.g. dGeGLU's activation for the weight gradient, with that value: the input, or what
  ``equivalent_to`` assigns the tensor):
  the total derivative of ``sum_g <fwd[of(g)], g>`` over the incoming gradients ``g``, taken
  with respect to the input or the ``equivalent_to`` intermediate the output is the gradient of
  (dSwiGLU's ``dz`` is the gradient of the intermediate ``z``; autograd differentiates with
  respect to that node of the graph, exactly as if it were a leaf). An output that cannot be
  proven (neither a gradient nor a recomputed value, or the gradient of a tensor ``equivalent_to``
  never computes) is returned as a failed comparison with a note, never skipped.
* ``mutants``: every single-primitive change of a spec (a sibling primitive from the primitive's
  own ``mutants``, or a perturbation of the item's result) must make one of the above fail.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from coda_spec.expr import ExprError, parse
from coda_spec.expr.evaluate import _ev, evaluate
from coda_spec.primitives import registry
from coda_spec.prove.inputs import make_grads, make_inputs
from coda_spec.prove.reference import run

RTOL = 1e-10


@dataclass(frozen=True)
class Comparison:
    output: str
    rel_err: float
    max_abs: float
    note: str = ""  # why the output could not be compared (then rel_err is inf)
    factor: float | None = None  # got == factor * want everywhere (a constant factor off), or None
    recomputes: str = ""  # a backward output that recomputes this forward tensor (not a gradient)

    @property
    def ok(self) -> bool:
        return self.rel_err <= RTOL


def compare(name: str, got: torch.Tensor, want: torch.Tensor) -> Comparison:
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        return unprovable(name, f"its shape {list(got.shape)} is not {list(want.shape)}")
    diff = (got - want).abs()
    if not torch.isfinite(got).all() or not torch.isfinite(want).all():
        return Comparison(name, float("inf"), float("inf"))
    denom = max(float(want.norm()), 1e-300)
    worst = float(diff.max()) if diff.numel() else 0
    return Comparison(name, float(diff.norm()) / denom, worst, factor=_factor(got, want))


def _factor(got: torch.Tensor, want: torch.Tensor) -> float | None:
    """``c`` when ``got`` is ``c * want`` to fp64 precision with ``c`` not 1 (a missing 2, a
    sign, a 1/n): the least-squares scale, kept only when it explains every element."""
    ww = float((want * want).sum())
    if ww == 0.0 or float(got.norm()) == 0.0:
        return None
    c = float((got * want).sum()) / ww
    if abs(c - 1.0) <= 1e-6 or float((got - c * want).norm()) > RTOL * float(got.norm()):
        return None
    return c


def draw(checked, sizes: dict, seed: int = 0) -> dict:
    """The fp64 inputs and incoming gradients the checks use (draw once, reuse for mutants)."""
    _, exact = make_inputs(checked.spec, sizes, seed, exact_shapes=True)
    grads = {}
    if checked.spec.backward is not None:
        _, grads = make_grads(checked.spec, checked.analysis, sizes, seed + 1)
    return {"inputs": exact, "grads": grads}


def check_equivalence(
    checked, sizes: dict, seed: int = 0, perturb=None, drawn: dict | None = None, hook=None
) -> list[Comparison]:
    spec = checked.spec
    exact = (drawn or draw(checked, sizes, seed))["inputs"]
    got = run(checked.analysis, exact, "fp64", sizes, perturb=perturb, hook=hook)
    try:
        want = evaluate(parse(spec.equivalent_to), {**exact, **sizes})
    except ExprError as e:
        raise e.at(("equivalent_to",)) from e
    outs = {o.name for o in spec.outputs}
    return [_compared(n, got[n], want[n]) for n in want if n in outs]


def _compared(name: str, got: torch.Tensor, want) -> Comparison:
    """``compare``, or an unproven output when ``equivalent_to`` assigns it a non-tensor."""
    if not isinstance(want, torch.Tensor):
        return unprovable(name, f"equivalent_to assigns it {type(want).__name__} {want!r}")
    return compare(name, got, want)


def unprovable(name: str, why: str, recomputes: str = "") -> Comparison:
    return Comparison(name, float("inf"), float("inf"), why, recomputes=recomputes)


def check_backward(
    checked, sizes: dict, seed: int = 0, perturb=None, drawn: dict | None = None, hook=None
) -> list[Comparison]:
    """Every backward output vs torch.autograd of ``equivalent_to`` with random cotangents."""

    spec, analysis = checked.spec, checked.analysis
    drawn = drawn or draw(checked, sizes, seed)
    exact, grads = drawn["inputs"], drawn["grads"]
    got = run(analysis, exact, "fp64", sizes, grads=grads, perturb=perturb, hook=hook)
    grad_of = dict(spec.backward.grads)
    recomputes = dict(spec.backward.recomputes)
    leaves = {
        k: v.detach().clone().requires_grad_(True)
        for k, v in exact.items()
        if v.is_floating_point()
    }
    env = {**exact, **leaves, **sizes}
    fwd = {}
    with torch.enable_grad():
        for target, node in parse(spec.equivalent_to).statements:
            try:
                env[target] = _ev(node, env)
            except ExprError as e:
                raise e.at(("equivalent_to",)) from e
            fwd[target] = env[target]
        value = {**leaves, **fwd}  # a name assigned by equivalent_to is that node, not an input
        total, missing = torch.zeros((), dtype=torch.float64), []
        for g, t in grads.items():
            v = value.get(grad_of[g])
            if isinstance(v, torch.Tensor) and v.shape != t.shape:
                missing.append(
                    f"incoming gradient '{g}' has shape {list(t.shape)}, but equivalent_to's "
                    f"'{grad_of[g]}' has {list(v.shape)}"
                )
            elif isinstance(v, torch.Tensor):
                total = total + (v * t).sum()
            else:
                missing.append(
                    f"incoming gradient '{g}' is of '{grad_of[g]}', which equivalent_to never "
                    "computes"
                )
        out, wrt, names = [], [], []
        for o in spec.backward.outputs:
            of = grad_of.get(o.name)
            if o.name in recomputes:
                out.append(_recomputed(o.name, recomputes[o.name], got, value))
            elif of is None:
                out.append(
                    unprovable(
                        o.name,
                        "neither a gradient (backward.grads) nor a recomputed forward "
                        "value (backward.recomputes)",
                    )
                )
            elif missing:
                out.append(unprovable(o.name, "; ".join(missing)))
            elif not isinstance(value.get(of), torch.Tensor):
                out.append(
                    unprovable(
                        o.name,
                        f"it is the gradient of '{of}', which equivalent_to never computes "
                        f"(assign '{of} = ...' there)",
                    )
                )
            else:
                names.append(o.name)
                wrt.append(value[of])
        live = [i for i, w in enumerate(wrt) if w.requires_grad]
        auto = [None] * len(wrt)
        if live and total.requires_grad:
            try:
                res = torch.autograd.grad(total, [wrt[i] for i in live], allow_unused=True)
            except RuntimeError as e:
                first = (str(e).strip().splitlines() or ["RuntimeError"])[0]
                raise ExprError(
                    f"autograd cannot differentiate equivalent_to: {first}",
                    hint="state the forward math with differentiable functions",
                ).at(("equivalent_to",)) from e
            for i, a in zip(live, res, strict=True):
                auto[i] = a
    for name, w, a in zip(names, wrt, auto, strict=True):
        a = torch.zeros_like(w) if a is None else a  # no path from the cotangents: 0
        out.append(compare(name, got[name], a.detach()))
    return out


def _recomputed(name: str, of: str, got: dict, value: dict) -> Comparison:
    """A backward output that recomputes forward tensor ``of`` (``backward.recomputes``)
    against ``of``'s value: the input, or what ``equivalent_to`` assigns it."""
    if of not in value:
        return unprovable(
            name,
            f"it recomputes '{of}', which equivalent_to never computes (assign '{of} = ...' there)",
            of,
        )
    return replace(compare(name, got[name], value[of].detach()), recomputes=of)


def mutants(checked):
    """Yield (description, Spec) for each sibling-primitive mutation of every item."""

    prims = registry()
    spec = checked.spec
    for section, steps in spec.sections():
        for si, step in enumerate(steps):
            ops = step.ops
            for oi, op in enumerate(ops):
                for new in prims[op.prim].mutants(op):
                    new_ops = ops[:oi] + (new,) + ops[oi + 1 :]
                    new_step = step.with_ops(new_ops)
                    yield (
                        f"{section}[{si}] {op.prim} -> {new.prim} {dict(new.args)}",
                        _with_step(spec, section, si, new_step),
                    )
            if step.kind == "finalize" and step.eps is not None:
                yield (
                    f"{section}[{si}] finalize eps x10",
                    _with_step(spec, section, si, replace(step, eps=step.eps * 10)),
                )
            if step.kind == "finalize" and step.second is not None:  # var: drop the centring
                uncentred = replace(step, op="mean", of=step.second, second=None)
                yield (
                    f"{section}[{si}] finalize {step.op} -> mean of {step.second}",
                    _with_step(spec, section, si, uncentred),
                )


def _with_step(spec, section, index, step):
    if section == "steps":
        steps = spec.steps[:index] + (step,) + spec.steps[index + 1 :]
        return replace(spec, steps=steps)
    bw = spec.backward
    steps = bw.steps[:index] + (step,) + bw.steps[index + 1 :]
    return replace(spec, backward=replace(bw, steps=steps))


def perturbation_sites(checked):
    """Every (section, step index, item index or None) whose result a perturbation can change."""
    spec = checked.spec
    for section, steps in spec.sections():
        for si, step in enumerate(steps):
            if step.kind == "finalize":
                yield (section, si, None)
                continue
            ops = step.ops
            for oi in range(len(ops)):
                yield (section, si, oi)
