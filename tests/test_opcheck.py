"""``torch.library.opcheck`` on every op of every bundled spec, on its CPU build.

Each spec in ``specs/`` is built as the CPU tests build it (``tests.test_runtime_cpu.make_build``:
the spec shrunk, the manifest ``coda build`` would write, no library) and made an op; then
opcheck runs its four checks (schema: no input mutated or aliased unless the schema says so;
autograd registration; the fake against the real op's shapes, dtypes and strides; AOT
dispatch with M dynamic, gradients included) on each op the chain defines:

* ``coda::<name>_<hash>`` (``op.op_name``), the inputs its backward differentiates requiring grad;
* ``coda::<name>_backward`` (a chain with a ``backward:`` section), on the saved tensors of a
  forward call and ``coda_spec.prove.inputs.make_grads``' incoming gradients, every gradient wanted;
* ``coda::<name>_inplace`` (a forward-only chain that accumulates into an input,
  :meth:`coda_spec.ops.ChainOp.with_inplace`).

:data:`BACKWARD` and :data:`INPLACE` say which spec has which op; each spec's ``coda::<name>``
test checks them against the build, so a spec that gains or loses one fails until it is listed.
The CPU ops are the reference interpreter; the H200 runs the CUDA ones (tests/gpu).
"""

from __future__ import annotations

import pytest
import torch

import coda_spec
from coda_spec import ops
from coda_spec.prove.inputs import make_grads
from tests import test_runtime_cpu as rt
from tests.conftest import ROOT

SPECS = sorted(p.stem for p in (ROOT / "specs").glob("*.yaml"))
BACKWARD = {  # the specs with a backward section: coda::<name>_backward
    "gemma3_ffn",
    "llama3_first",
    "llama3_last",
    "llama3_last_mlp",
    "llama3_last_mlp_recompute",
    "llama3_last_recompute",
    "llama3_layer",
    "llama3_layer_recompute",
    "llama_block",
    "olmo2_attn_out",
    "olmo2_mlp",
    "olmo2_qkv",
    "qwen2_first",
    "qwen2_last_mlp",
    "qwen2_layer",
    "qwen3_first",
    "qwen3_last_mlp",
    "qwen3_layer",
}
INPLACE = {"b1_dgrad_rmsnorm_bwd", "llama3_lm_head"}  # coda::<name>_inplace
# The ops of the chains with a backward section are the quick tier's cost: 0.4-2.5 s each
# (opcheck's AOT dispatch traces forward and backward), 20 s in all on 2 shared cores; the
# other specs' ops are about 0.3 s each.
SLOW = BACKWARD
OPS = [
    *((name, "forward") for name in SPECS),
    *((name, "backward") for name in sorted(BACKWARD)),
    *((name, "inplace") for name in sorted(INPLACE)),
]
M = 8  # the dynamic dim's size: opcheck's AOT dispatch traces it symbolic


@pytest.mark.parametrize(
    "name, flavour",
    [pytest.param(*x, marks=[pytest.mark.slow] if x[0] in SLOW else []) for x in OPS],
    ids=[f"coda::{n}" + ("" if f == "forward" else f"_{f}") for n, f in OPS],
)
def test_opcheck(name, flavour, tmp_path, monkeypatch):
    monkeypatch.setattr(ops, "_OPS", {})  # a fresh build directory: its own ChainOp
    d, checked = rt.make_build(tmp_path, name)
    op = ops.op(coda_spec.load(d, tuned=False))
    sizes, low = rt._inputs(checked, M)
    if flavour == "forward":
        assert op.has_backward == (name in BACKWARD), f"{name}: list it in BACKWARD, or not"
        inplace = bool(op._into) and not op.has_backward
        assert inplace == (name in INPLACE), f"{name}: list it in INPLACE, or not"
        wrt = {of for _, of in op.grad_outputs}
        args = [low[n].clone().requires_grad_(n in wrt) for n in op.inputs]
        torch.library.opcheck(op.op, (*args, op.dims))
    elif flavour == "backward":
        with torch.no_grad():
            out = ops._many(op.op(*(low[n] for n in op.inputs), op.dims))
        env = {**low, **dict(zip(op.returns, out, strict=True))}
        grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=1)
        args = [*(env[n] for n in op.saved), *(grads[g] for g, _ in op.grads)]
        torch.library.opcheck(op.backward_op, (*args, op.dims, [1] * len(op.grad_outputs)))
    else:
        inplace = op.with_inplace()
        torch.library.opcheck(inplace.inplace_op, (*(low[n] for n in op.inputs), op.dims))
