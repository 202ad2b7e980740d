"""A backward computes only the gradients autograd wants (``needs_input_grad``).

The op passes a 0/1 per gradient to ``coda::<name>_backward``; the GPU path runs only the
backward steps the wanted ones depend on (``runtime.plan.needed_steps``), so a data input's
dgrad GEMM or a frozen weight's wgrad GEMM does not run. Checked here on the CPU: the steps kept
for the tutorial's chain, and what the op asks for and hands autograd.
"""

from __future__ import annotations

import pytest

from coda_spec.runtime.plan import needed_steps
from tests import test_runtime_cpu as rt
from tests.conftest import ROOT

torch = pytest.importorskip("torch")

SPEC = ROOT / "examples" / "tutorial" / "relu2_mlp.yaml"


@pytest.fixture
def relu2(tmp_path, monkeypatch):
    from coda_spec import ops, runtime

    monkeypatch.setattr(ops, "_OPS", {})
    monkeypatch.setitem(rt.SPECS, "relu2_mlp", (SPEC, {"D": 64, "F": 128}))
    build, _ = rt.make_build(tmp_path, "relu2_mlp")
    return runtime.load(build, tuned=False), build


@pytest.mark.parametrize(
    "wanted, kept",
    [
        ({"dx", "dw_up", "db_up", "dw_down"}, None),  # all: every step
        ({"dw_up", "db_up", "dw_down"}, ["dgrad_down", "finalize_db_up", "wgrad_down", "wgrad_up"]),
        ({"dx"}, ["dgrad_down", "dgrad_up"]),
        ({"dw_down"}, ["wgrad_down"]),
    ],
    ids=["all", "no_dx", "dx_only", "dw_down_only"],
)
def test_the_steps_a_set_of_gradients_needs(relu2, wanted, kept):
    chain, _ = relu2
    steps = chain.manifest.backward_steps
    got = [s.name for s in needed_steps(steps, wanted)]
    assert got == (kept if kept is not None else [s.name for s in steps])


def test_the_op_asks_for_what_autograd_wants(relu2, monkeypatch):
    from coda_spec import ops

    _, build = relu2
    op = ops.op(build)
    seen = []
    real = ops.ChainOp._backward_cpu

    def spy(self, *args, into=None, needed=None):
        seen.append(needed)
        return real(self, *args, into=into, needed=needed)

    monkeypatch.setattr(ops.ChainOp, "_backward_cpu", spy)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, generator=g).bfloat16()  # data: no gradient
    w_up = torch.randn(128, 64, generator=g).bfloat16().requires_grad_()
    b_up = torch.randn(128, generator=g).bfloat16()  # frozen
    w_down = torch.randn(64, 128, generator=g).bfloat16().requires_grad_()
    y = op(x=x, w_up=w_up, b_up=b_up, w_down=w_down)["y"]
    y.float().square().sum().backward()
    order = [g for g, _ in op.grad_outputs]
    assert dict(zip(order, seen[0], strict=True)) == {
        "dx": 0,
        "dw_up": 1,
        "db_up": 0,
        "dw_down": 1,
    }
    assert w_up.grad is not None and w_down.grad is not None and x.grad is None
