"""Algebra checks: the spec's own math against the unfused math it claims to replace.

* ``check_equivalence``: every output that ``equivalent_to`` assigns is compared, in fp64 on the
  same bf16-valued inputs, with the reference interpreter's value. Agreement to ~1e-10 relative
  proves the reparameterization (deferred norm, zdz, dSwiGLU, RoPE orthogonality, LSE fold).
* ``check_backward``: for a spec with a ``backward:`` section, each gradient output is compared
  with ``torch.autograd`` of the forward's ``equivalent_to`` under the same random cotangents.
* ``mutants``: every single-primitive change of a spec (a sibling primitive from the primitive's
  own ``mutants``, or a perturbation of the item's result) must make one of the above fail.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from coda_spec.expr import parse
from coda_spec.expr_eval import evaluate
from coda_spec.inputs import make_grads, make_inputs
from coda_spec.reference import run

RTOL = 1e-10


@dataclass(frozen=True)
class Comparison:
    output: str
    rel_err: float
    max_abs: float

    @property
    def ok(self) -> bool:
        return self.rel_err <= RTOL


def compare(name: str, got: torch.Tensor, want: torch.Tensor) -> Comparison:
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        return Comparison(name, float("inf"), float("inf"))
    diff = (got - want).abs()
    if not torch.isfinite(got).all() or not torch.isfinite(want).all():
        return Comparison(name, float("inf"), float("inf"))
    denom = max(float(want.norm()), 1e-300)
    return Comparison(name, float(diff.norm()) / denom, float(diff.max()) if diff.numel() else 0)


def draw(checked, sizes: dict, seed: int = 0) -> dict:
    """The fp64 inputs and incoming gradients the checks use (draw once, reuse for mutants)."""
    _, exact = make_inputs(checked.spec, sizes, seed)
    grads = {}
    if checked.spec.backward is not None:
        _, grads = make_grads(checked.spec, checked.analysis, sizes, seed + 1)
    return {"inputs": exact, "grads": grads}


def check_equivalence(
    checked, sizes: dict, seed: int = 0, perturb=None, drawn: dict | None = None
) -> list[Comparison]:
    spec = checked.spec
    exact = (drawn or draw(checked, sizes, seed))["inputs"]
    got = run(checked.analysis, exact, "fp64", sizes, perturb=perturb)
    want = evaluate(parse(spec.equivalent_to), {**exact, **sizes})
    outs = {o.name for o in spec.outputs}
    return [compare(n, got[n], want[n]) for n in want if n in outs]


def check_backward(
    checked, sizes: dict, seed: int = 0, perturb=None, drawn: dict | None = None
) -> list[Comparison]:
    """Backward outputs vs torch.autograd of ``equivalent_to`` (forward) with random cotangents."""
    spec, analysis = checked.spec, checked.analysis
    drawn = drawn or draw(checked, sizes, seed)
    exact, grads = drawn["inputs"], drawn["grads"]
    got = run(analysis, exact, "fp64", sizes, grads=grads, perturb=perturb)
    grad_of = dict(spec.backward.grads)
    leaves = {
        k: v.detach().clone().requires_grad_(True)
        for k, v in exact.items()
        if v.is_floating_point()
    }
    env = {**exact, **leaves, **sizes}
    prog = parse(spec.equivalent_to)
    with torch.enable_grad():
        fwd = {}
        for target, node in prog.statements:
            from coda_spec.expr_eval import _ev

            env[target] = _ev(node, env)
            fwd[target] = env[target]
        total = 0
        for g, t in grads.items():
            of = grad_of[g]
            if of not in fwd and of not in leaves:
                raise KeyError(
                    f"incoming gradient '{g}' is of '{of}', which equivalent_to does not compute"
                )
            total = total + (fwd.get(of, leaves.get(of)) * t).sum()
        wanted = [o.name for o in spec.backward.outputs if grad_of.get(o.name) in leaves]
        auto = torch.autograd.grad(total, [leaves[grad_of[n]] for n in wanted], allow_unused=True)
    out = []
    for name, a in zip(wanted, auto, strict=True):
        a = torch.zeros_like(leaves[grad_of[name]]) if a is None else a
        out.append(compare(name, got[name], a.detach()))
    return out


def mutants(checked):
    """Yield (description, Spec) for each sibling-primitive mutation of every item."""
    from coda_spec.primitives import registry

    prims = registry()
    spec = checked.spec
    sections = [("steps", spec.steps)]
    if spec.backward is not None:
        sections.append(("backward", spec.backward.steps))
    for section, steps in sections:
        for si, step in enumerate(steps):
            ops = (
                step.epilogue
                if step.kind == "kernel"
                else (step.body if step.kind == "host" else ())
            )
            for oi, op in enumerate(ops):
                for new in prims[op.prim].mutants(op):
                    new_ops = ops[:oi] + (new,) + ops[oi + 1 :]
                    field = "epilogue" if step.kind == "kernel" else "body"
                    new_step = replace(step, **{field: new_ops})
                    yield (
                        f"{section}[{si}] {op.prim} -> {new.prim} {dict(new.args)}",
                        _with_step(spec, section, si, new_step),
                    )
            if step.kind == "finalize" and step.eps is not None:
                yield (
                    f"{section}[{si}] finalize eps x10",
                    _with_step(spec, section, si, replace(step, eps=step.eps * 10)),
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
    sections = [("steps", spec.steps)]
    if spec.backward is not None:
        sections.append(("backward", spec.backward.steps))
    for section, steps in sections:
        for si, step in enumerate(steps):
            if step.kind == "finalize":
                yield (section, si, None)
                continue
            ops = step.epilogue if step.kind == "kernel" else step.body
            for oi in range(len(ops)):
                yield (section, si, oi)
