"""Run a built chain's steps in torch on the CPU, through the reference interpreter (fp32).

The runtime itself never imports the reference interpreter: kernels and host steps are compiled.
CPU tests of what sits around the launches (bench's driver, tune's picks, the runtime's
bookkeeping) replace the launching methods with these emulations, which compute each kernel's
epilogue (on ``acc = a @ b``) and each host step's body in torch, keep outputs in their declared
dtypes, ``add_to`` in place, and register partials the way the runtime's finalize reads them.
"""

from __future__ import annotations

import torch

from coda_spec import runtime
from coda_spec.dtypes import TORCH_DTYPES
from coda_spec.reference import PRECISIONS, _run_step


def _dense(x: torch.Tensor) -> torch.Tensor:
    """Row-major with canonical strides, as a kernel writes its outputs."""
    return runtime._canonical(x.contiguous())


def _spec_step(chain, step):
    spec = chain.checked().spec
    steps = spec.all_steps()
    return next(s for s in steps if s.kind == step["kind"] and s.name == step["name"])


def _interpret(chain, step, call) -> dict:
    work = {k: v for k, v in call.env.items() if isinstance(v, torch.Tensor)}
    rt = (PRECISIONS["fp32"], call.sizes, chain.checked().analysis)
    _run_step(rt, _spec_step(chain, step), work)
    return work


def kernel(chain, step, call) -> None:
    """A kernel step in torch: outputs in their dtypes, add_to in place, partials exact."""
    env = call.env
    work = _interpret(chain, step, call)
    if step["d"] is not None:
        name, dtype, _ = step["d"]
        value = work[name].to(TORCH_DTYPES[dtype])
        if step["add_to"]:
            into = env[step["add_to"]]
            into.copy_(value)
            env[name] = into
        else:
            env[name] = _dense(value)
    for f in step["fields"]:
        t = f["tensor"]
        if f["role"] in ("aux", "select"):
            env[t] = _dense(work[t].to(TORCH_DTYPES[f["dtype"]]))
        elif f["role"] in runtime.PARTIAL_ROLES:
            env[t] = _dense(work[t].float())
            call.partials[t] = (f["role"], f["fold"])


def host(chain, step, call) -> None:
    """A host step in torch; its partials are exact (as the compiled kernel's are)."""
    analysis = chain.checked().analysis
    work = _interpret(chain, step, call)
    for name in step["writes"]:
        if analysis.tensor(name).origin == "partial":
            call.partials[name] = ("exact", None)
            call.env[name] = work[name]
            continue
        dtype = chain.manifest["tensors"][name]["dtype"]
        call.env[name] = _dense(work[name].to(TORCH_DTYPES[dtype]))


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

    monkeypatch.setattr(runtime.Chain, "_kernel", run_kernel)
    monkeypatch.setattr(runtime.Chain, "_host", run_host)
