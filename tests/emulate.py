"""Run a built chain's steps in torch on the CPU, through the reference interpreter (fp32).

The runtime itself never imports the reference interpreter: kernels and host steps are compiled.
CPU tests of what sits around the launches (bench's driver, tune's picks, the runtime's
bookkeeping) replace the launching methods with these emulations, which compute each kernel's
epilogue (on ``acc = a @ b``) and each host step's body in torch, keep outputs in their declared
dtypes, ``add_to`` in place, write partial buffers as the kernels lay them out, and fold them as
the compiled finalize kernels do (:func:`fold_partials`, the finalize semantics in torch: also
the oracle of tests/test_finalize_kernel.py).
"""

from __future__ import annotations

import torch

from coda_spec.artifact import PARTIAL_ROLES
from coda_spec.dims import evaluator
from coda_spec.dtypes import TORCH_DTYPES
from coda_spec.finalize import EMPTY_FOLD, mean_of
from coda_spec.prove.reference import PRECISIONS, _run_step
from coda_spec.runtime import chain as runtime_chain
from coda_spec.runtime.checks import canonical


def _fold(buf: torch.Tensor, fold: str, axis: int) -> torch.Tensor:
    """Fold per-tile partials along ``axis``; an empty axis gives ``EMPTY_FOLD[fold]``."""
    if buf.shape[axis] == 0:
        shape = [n for i, n in enumerate(buf.shape) if i != axis]
        return torch.full(shape, EMPTY_FOLD[fold], dtype=buf.dtype, device=buf.device)
    if fold == "sum":
        return buf.sum(dim=axis)
    if fold == "max":
        return buf.amax(dim=axis)
    return torch.logsumexp(buf, dim=axis)


def fold_partials(
    role: str, fold, buf: torch.Tensor, op: str, n: int, eps, *, second=None, over=False
) -> torch.Tensor:
    """A finalize in torch: ``buf`` (the partial, as ``role`` lays it out) folded with ``fold``
    (``over``: every entry, to one [] scalar), then ``op`` (``mean``: / n, 0 over nothing;
    ``rsqrt_mean``: 1 / sqrt(mean + eps); ``var``: max(mean(second) - mean^2, 0), ``second``
    the sumsq partial laid out as ``buf``)."""
    if over and fold is None:  # a host step's complete partial: the op says how it folds
        fold = {"max": "max", "logsumexp": "logsumexp"}.get(op, "sum")
    x = _folded(role, fold, buf, over)
    if op == "mean":
        return mean_of(x, n)
    if op == "rsqrt_mean":
        return torch.rsqrt(mean_of(x, n) + eps)
    if op == "var":
        mu, m2 = mean_of(x, n), mean_of(_folded(role, fold, second, over), n)
        return torch.clamp_min(m2 - mu * mu, 0.0)
    return x


def _folded(role: str, fold, buf: torch.Tensor, over: bool) -> torch.Tensor:
    if over:  # every entry (tiles and rows): sum, or max/logsumexp (the identity over nothing)
        return _fold(buf.reshape(-1), fold, 0)
    if role == "exact":  # a host step's reduction: already complete
        return buf.reshape(-1) if 1 in buf.shape else buf
    if role == "group_out":  # (M, N/group) per-(row, group) statistics: already complete
        return buf.reshape(-1) if buf.shape[1] == 1 else buf
    # colred (M, n_tiles) folds along N-tiles; rowred (m_tiles, N) along M-tiles
    return _fold(buf, fold, 1 if role == "colred" else 0)


def _dense(x: torch.Tensor) -> torch.Tensor:
    """Row-major with canonical strides, as a kernel writes its outputs."""
    return canonical(x.contiguous())


def _spec_step(chain, step):
    spec = chain.checked().spec
    steps = spec.all_steps()
    return next(s for s in steps if s.kind == step.kind and s.name == step.name)


def _interpret(chain, step, call) -> dict:
    work = {k: v for k, v in call.env.items() if isinstance(v, torch.Tensor)}
    rt = (PRECISIONS["fp32"], call.sizes, chain.checked().analysis)
    _run_step(rt, _spec_step(chain, step), work)
    return work


def kernel(chain, step, call) -> None:
    """A kernel step in torch: outputs in their dtypes, add_to in place, partials exact."""
    env = call.env
    work = _interpret(chain, step, call)
    if step.d is not None:
        name, dtype = step.d.tensor, step.d.dtype
        value = work[name].to(TORCH_DTYPES[dtype])
        if step.add_to:
            into = env[step.add_to]
            into.copy_(value)
            env[name] = into
        elif name in call.into:  # the accumulating kernel: D += the stored value
            env[name] = call.into[name].add_(value)
        else:
            env[name] = _dense(value)
    for f in step.fields:
        t = f.tensor
        if f.role in ("aux", "select"):
            env[t] = _dense(work[t].to(TORCH_DTYPES[f.dtype]))
        elif f.role in PARTIAL_ROLES:
            env[t] = _dense(work[t].float())


def host(chain, step, call) -> None:
    """A host step in torch; its partials are exact (as the compiled kernel's are)."""
    analysis = chain.checked().analysis
    work = _interpret(chain, step, call)
    for name in step.writes:
        if analysis.tensor(name).origin == "partial":
            call.env[name] = work[name]
            continue
        dtype = chain.manifest.tensors[name].dtype
        call.env[name] = _dense(work[name].to(TORCH_DTYPES[dtype]))


def finalize(chain, step, call) -> None:
    """A finalize step in torch (one folded into its host kernel too: the emulated host step
    writes only the partial)."""
    role, fold = "exact", None  # a host step's partial
    for s in chain.manifest.kernel_steps():
        for f in s.fields:
            if f.tensor == step.of:
                role, fold = f.role, f.fold
    n = evaluator(step.n)(call.sizes) if step.n is not None else None
    buf, second = call.env[step.of], call.env.get(step.second) if step.second else None
    call.env[step.result] = fold_partials(
        role, fold, buf, step.op, n, step.eps, second=second, over=step.over is not None
    )


def emulate_compiled(monkeypatch) -> None:
    """Host steps and finalizes (the Triton cubins) run in torch; GEMM kernels are left alone."""
    monkeypatch.setattr(runtime_chain.Chain, "_host", host)
    monkeypatch.setattr(runtime_chain.Chain, "_finalize", finalize)


def emulate(monkeypatch, before=None) -> None:
    """Every kernel and host step of every chain runs in torch (``before(chain, step, call)``
    is called first, e.g. to record which variant a kernel would run). Compiled finalizes fold
    in torch too (a CPU has no cubin to launch)."""

    def run_kernel(self, step, call):
        if before is not None:
            before(self, step, call)
        kernel(self, step, call)

    def run_host(self, step, call):
        if before is not None:
            before(self, step, call)
        host(self, step, call)

    monkeypatch.setattr(runtime_chain.Chain, "_kernel", run_kernel)
    monkeypatch.setattr(runtime_chain.Chain, "_host", run_host)
    monkeypatch.setattr(runtime_chain.Chain, "_finalize", finalize)
