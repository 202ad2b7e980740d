"""The reference interpreter: a spec's own math in torch, derived from the IR, never hand-written.

``run(analysis, inputs, precision)`` executes every step in order (kernels, host steps,
finalizes, then the backward section if ``grads`` are given) and returns every chain tensor.
Each epilogue item runs its primitive's ``reference`` (dispatch on ``op.prim``).

Precisions (the verify protocol, docs/verification.md):

* ``fp64``: everything in float64 on the (bf16-valued) inputs. A ``cast`` rounds (it is the
  spec's math); a store is never rounded, even one a later step reads back (docs/verification.md,
  "What the fp64 proof rounds"). This is the ``ref`` of the verify pass rule and the side of the
  algebra checks against ``equivalent_to``.
* ``fp32``: the same in float32.
* ``lowp``: what an unfused low-precision pipeline computes: bf16/fp16 matmuls (output rounded to
  the operand dtype, fp32 accumulation inside; an fp8 x fp8 matmul upcasts its exact operands
  and rounds the fp32 product to bf16, the usual ``torch._scaled_mm`` output), fp32 epilogue
  math, rounding at every stored tensor to its declared dtype. ``max|ref_lowp - ref|`` sets the
  verify error budget.
* ``kernel``: what the fused kernels compute: ``lowp`` with each GEMM's fp32 accumulator going
  into the epilogue unrounded (bf16 or fp8 operands, exact in fp32, products summed in fp32),
  as CUTLASS's epilogue reads it. The CPU implementation of ``coda_spec.ops`` runs it at the
  declared dtypes: an fp32 store or an amax of the accumulator then matches the GPU's to fp32
  summation order, not to a bf16 rounding.

Partial reductions are exact here (``[M, 1]`` per row); tiling them is the kernel's business.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coda_spec import dims as dimmod
from coda_spec.dtypes import TORCH_DTYPES, names, round_to
from coda_spec.finalize import default_n
from coda_spec.finalize import fold as finalize_fold
from coda_spec.primitives import registry

FP8_NAMES = names("fp8")

__all__ = ["TORCH_DTYPES", "PRECISIONS", "RefCtx", "run", "run_backward", "infer_sizes"]


@dataclass(frozen=True)
class Precision:
    name: str
    compute: torch.dtype
    lowp: bool
    # lowp only: a GEMM's result rounded to its operands' dtype (bf16 for fp8) before the
    # epilogue (an unfused pipeline), or kept in fp32 (the fused kernels)
    rounds_acc: bool = True


PRECISIONS = {
    "fp64": Precision("fp64", torch.float64, False),
    "fp32": Precision("fp32", torch.float32, False),
    "lowp": Precision("lowp", torch.float32, True),
    "kernel": Precision("kernel", torch.float32, True, rounds_acc=False),
}


class RefCtx:
    """What a primitive's ``reference`` may use: torch, the compute dtype, sizes, declarations."""

    torch = torch

    def __init__(self, precision: Precision, sizes: dict, analysis, width=None, rows=None):
        self.precision, self.sizes, self.analysis = precision, sizes, analysis
        self.dtype = precision.compute
        self.width, self.rows = width, rows

    def load(self, t):
        return t.to(self.dtype)

    def round_always(self, x, dtype: str):
        return round_to(x, dtype).to(self.dtype)

    def round_store(self, x, dtype: str):
        return self.round_always(x, dtype) if self.precision.lowp else x

    def fold(self, expr):
        return dimmod.evaluate(expr, self.sizes)

    def constant(self, by) -> float:
        """``dims.constant`` at the analysed spec's dims (verify re-analyses a case at its own)."""
        return dimmod.constant(by, {d.name: d.size for d in self.analysis.spec.dims})

    def decl(self, name):
        return self.analysis.tensor(name)

    def store_is_col(self, op) -> bool:
        return len(self.analysis.tensor(op.get("to")).shape) == 1


def _matmul(rt: RefCtx, a, b, dtype: str):
    if rt.precision.lowp and dtype in FP8_NAMES:
        # fp8 x fp8 (torch has no CPU fp8 matmul): the fp8 values are exact in fp32, the product
        # accumulates in fp32 and comes out in bf16, as torch._scaled_mm's usual output does
        # (the kernels' epilogue reads the fp32 accumulator: rounds_acc False).
        acc = a.float() @ b.float()
        return (round_to(acc, "bf16") if rt.precision.rounds_acc else acc).to(rt.dtype)
    if rt.precision.lowp:
        low = TORCH_DTYPES[dtype]
        if not rt.precision.rounds_acc:  # bf16/fp16 products are exact in fp32
            return a.to(low).float() @ b.to(low).float()
        return (a.to(low) @ b.to(low)).to(rt.dtype)
    return a.to(rt.dtype) @ b.to(rt.dtype)


def _operand(raw, vals):
    if isinstance(raw, list):
        return [_operand(x, vals) for x in raw]
    if isinstance(raw, (int, float)):
        return float(raw)
    return vals[raw]


def _nudge(x):
    """The mutation tests' perturbation: a small, never-neutral change of a result."""
    return x * 1.001 + 1e-3


def _run_ops(rt: RefCtx, ops, vals: dict, env: dict, perturb=None, hook=None):
    prims = registry()
    for i, op in enumerate(ops):
        p = prims[op.prim]
        ins = {k: _operand(op.get(k), vals) for k in p.operands if op.get(k) is not None}
        tensors = {k: env[op.get(k)] for k in p.tensors if op.get(k) is not None}
        results = p.reference(rt, op, ins, tensors)
        if perturb == i:
            results = tuple(_nudge(r) for r in results)
        if hook is not None:
            results = hook(i, op, ins, results)
        if p.results == "none":
            info = rt.analysis.tensor(op.get("to"))
            env[info.name] = rt.round_store(results[0], info.dtype)
            continue
        for name, value in zip(op.results, results, strict=True):
            if p.family == "reduction":
                env[name] = value
            else:
                vals[name] = value


def _run_step(rt_args, step, env, perturb=None, hook=None):
    """Run one step; ``perturb`` is an item index (or True for a finalize) to nudge; ``hook(item
    index, op, ins, results) -> results`` sees (and may replace) each item's results."""
    precision, sizes, analysis = rt_args
    if step.kind == "finalize":
        info = analysis.tensor(step.of)
        p = info.partial
        default = default_n(p.kind, p.width, p.group, p.rows, step.over)
        # the runtime's evaluator: an over-rows default n (rows x width) is 0 at M = 0, a
        # fold over nothing (its identity), which dimmod.evaluate refuses as a dim
        n = dimmod.evaluator(step.n if step.n is not None else default)(sizes)
        rt = RefCtx(precision, sizes, analysis)
        second = env[step.second] if step.second is not None else None
        env[step.result] = finalize_fold(
            rt, step.op, env[step.of], n, step.eps, p.kind, second=second, over=bool(step.over)
        )
        if perturb is True:
            env[step.result] = _nudge(env[step.result])
        return
    if step.kind == "kernel":
        g = step.gemm
        a, b = env[g.a.name], env[g.b.name]
        a, b = (a.T if g.a.transposed else a), (b.T if g.b.transposed else b)
        dtype = analysis.tensor(g.a.name).dtype
        rt = RefCtx(precision, sizes, analysis)
        acc = _matmul(rt, a, b, dtype)
        rt = RefCtx(precision, sizes, analysis, width=acc.shape[1], rows=acc.shape[0])
        _run_ops(rt, step.epilogue, {"acc": acc}, env, perturb, hook)
    else:
        over = env[step.over]
        width = over.shape[1] if over.dim() == 2 else None  # over a vector: no columns
        rt = RefCtx(precision, sizes, analysis, width=width, rows=over.shape[0])
        _run_ops(rt, step.body, {}, env, perturb, hook)


def run(
    analysis,
    inputs: dict,
    precision: str | Precision = "fp64",
    sizes: dict | None = None,
    grads: dict | None = None,
    perturb: tuple | None = None,
    hook=None,
) -> dict:
    """Execute the chain (and its backward if ``grads`` holds the incoming cotangents).

    ``inputs`` maps every input name to a tensor; float inputs are converted to the compute
    dtype. ``sizes`` binds the dynamic dims (inferred from the inputs when omitted).
    ``perturb`` = (section, step index, item index or None) nudges one result (mutation tests).
    ``hook(site, op, ins, results) -> results``, site = (section, step index, item index): sees
    every item's operands and results and may replace the results (the proof's coverage:
    ``coda_spec.prove.coverage``).
    """
    prec = PRECISIONS[precision] if isinstance(precision, str) else precision
    spec = analysis.spec
    sizes = dict(sizes) if sizes else infer_sizes(analysis, inputs)
    env = {k: (v.to(prec.compute) if v.is_floating_point() else v) for k, v in inputs.items()}
    sections = spec.sections() if grads is not None else spec.sections()[:1]
    for section, steps in sections:
        if section == "backward":
            env.update({k: v.to(prec.compute) for k, v in grads.items()})
        for i, step in enumerate(steps):
            hit = None
            if perturb is not None and perturb[:2] == (section, i):
                hit = True if perturb[2] is None else perturb[2]
            at = None if hook is None else _at(hook, section, i)
            _run_step((prec, sizes, analysis), step, env, hit, at)
    return env


def _at(hook, section: str, step: int):
    return lambda i, op, ins, results: hook((section, step, i), op, ins, results)


def run_backward(analysis, env: dict, precision: str | Precision, sizes: dict) -> dict:
    """The backward section alone, on ``env``: the forward tensors it reads (``backward.save``)
    and the incoming gradients. Returns ``env`` with every backward tensor added (a torch op's
    CPU backward: ``coda_spec.runtime.op``)."""
    prec = PRECISIONS[precision] if isinstance(precision, str) else precision
    env = {k: (v.to(prec.compute) if v.is_floating_point() else v) for k, v in env.items()}
    for step in analysis.spec.backward.steps:
        _run_step((prec, sizes, analysis), step, env)
    return env


def infer_sizes(analysis, inputs: dict) -> dict:
    """Bind every dim: static ones from the spec, dynamic ones from input shapes."""
    sizes = {d.name: d.size for d in analysis.spec.dims}
    for t in analysis.spec.tensors:
        if t.name not in inputs:
            continue
        for expr, actual in zip(t.shape, inputs[t.name].shape, strict=False):
            if isinstance(expr, str) and expr in sizes and sizes[expr] is None:
                sizes[expr] = int(actual)
    missing = [n for n, v in sizes.items() if v is None]
    if missing:
        raise ValueError(f"cannot infer dims {missing} from the inputs")
    return sizes
