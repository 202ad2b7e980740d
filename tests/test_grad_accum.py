"""Accumulating weight gradients in place into ``.grad`` (QuACK's ``fuse_grad_accum``), without a
GPU: which kernels get an accumulating flavour (the build's rule, the manifest's ``accumulate``),
the runtime's ``Chain.backward(accumulate=...)`` (which kernel launches with which D, and every
refusal before a launch), and the torch op's option on its CPU implementation (the reference's
gradient added into ``.grad``): two micro-batches give the same ``.grad`` as autograd's own
accumulation, bitwise; every fall-back (no ``.grad`` yet, a non-leaf, another dtype or layout, a
hook, ``torch.autograd.grad``) is the functional gradient; torch.compile ignores the option.
The GPU side (the reduce-add kernel itself) is ``tests/gpu/test_ops_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

import coda_spec
from coda_spec import ops
from coda_spec.build import lowered_json
from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.config import BuildConfig
from coda_spec.lower.module import ACCUMULATE_SUFFIX, accumulating, lower_spec
from coda_spec.lower.quack_adapter import compile_jobs
from coda_spec.prove.inputs import make_grads
from coda_spec.runtime import CodaRuntimeError, checks, launch
from tests import test_runtime_cpu as rt
from tests.emulate import emulate_compiled

LLAMA_DIMS = {"D": 128, "F": 128}
WEIGHT_GRADS = ["dw_qkv", "dw_down", "dw_gu", "dw_o"]  # llama_block's wgrads, in step order
SHARED = ["w_o", "gamma1", "w_gu", "w_down", "gamma2", "w_qkv"]  # one set over micro-batches


@pytest.fixture
def llama(tmp_path, monkeypatch):
    """(ChainOp, checked spec) of a small llama_block build; earlier tests' ops forgotten."""
    monkeypatch.setattr(ops, "_OPS", {})
    monkeypatch.setitem(
        rt.SPECS, "llama_small", (rt.ROOT / "specs" / "llama_block.yaml", LLAMA_DIMS)
    )
    d, checked = rt.make_build(tmp_path, "llama_small")
    return ops.op(coda_spec.load(d, tuned=False)), checked


# -- the build's rule -----------------------------------------------------------------------

TINY = """\
coda: 1
name: tiny_linear
dims: {M: dynamic, D: 64}
tensors:
  x: {shape: [M, D], dtype: bf16}
  w: {shape: [D, D], dtype: bf16}
steps:
  - kernel: fwd
    gemm: {a: x, b: w.T}
    epilogue:
      - {store: acc, to: y}
outputs: {y: bf16}
backward:
  save: [x, w]
  grads: {d_y: y, dx: x, dw: w}
  steps:
    - kernel: wgrad
      gemm: {a: d_y.T, b: x}
      epilogue:
        - {store: acc, to: dw}
    - kernel: dgrad
      gemm: {a: d_y, b: B}
      epilogue:
        - {store: acc, to: dx}
  outputs: {dx: bf16, dw: DW}
"""


def _accumulating(b: str = "w", dw: str = "bf16") -> dict:
    checked = check_source(parse_text("tiny.yaml", TINY.replace("B}", f"{b}}}").replace("DW", dw)))
    return accumulating(checked, lower_spec(checked, BuildConfig()).kernels)


def test_the_weight_gradients_a_gemm_stores_get_an_accumulating_kernel(llama):
    """llama_block: the four wgrads; not dy (M x D: an activation's gradient, never summed
    over micro-batches), not the add_to kernels, not dgamma (a finalize computes it)."""
    _, checked = llama
    kernels = lower_spec(checked, BuildConfig()).kernels
    assert accumulating(checked, kernels) == {
        "wgrad_qkv": "dw_qkv",
        "wgrad_down": "dw_down",
        "wgrad_gu": "dw_gu",
        "wgrad_out_proj": "dw_o",
    }
    assert _accumulating() == {"wgrad": "dw"}
    assert _accumulating(dw="fp32") == {"wgrad": "dw"}  # D += in fp32 too


def test_a_weight_gradient_read_by_a_later_step_gets_none():
    """A later step would read the sum (.grad + this call's), not this call's gradient."""
    assert _accumulating(b="dw") == {}


def test_lowered_json_and_the_compile_jobs_carry_the_accumulating_flavour(llama):
    """The accumulating kernel compiles the fallback's function at the fallback config with
    add_to_output; the plain kernel of the same step does not."""
    _, checked = llama
    cfg = BuildConfig()
    meta = lowered_json(checked, lower_spec(checked, cfg), cfg)
    acc = meta["accumulate"]
    assert sorted(acc) == sorted(["wgrad_qkv", "wgrad_down", "wgrad_gu", "wgrad_out_proj"])
    jobs = compile_jobs(meta)
    for step, entry in acc.items():
        assert entry["symbol"] == f"coda_{step}{ACCUMULATE_SUFFIX}"
        kernel, config = jobs[entry["symbol"]]
        assert kernel["accumulate"] is True and kernel["function"] == f"coda_{step}"
        assert config == cfg.key() and not jobs[f"coda_{step}"][0].get("accumulate")


def test_the_manifest_records_the_accumulating_kernels(llama):
    op, _ = llama
    m = op.chain.manifest
    with_acc = {s.name: s.accumulate for s in m.kernel_steps() if s.accumulate is not None}
    assert sorted(with_acc) == sorted(["wgrad_qkv", "wgrad_down", "wgrad_gu", "wgrad_out_proj"])
    for name, v in with_acc.items():
        step = next(s for s in m.kernel_steps() if s.name == name)
        assert v.symbol == f"coda_{name}{ACCUMULATE_SUFFIX}" and v.name == step.fallback.name
    assert op.chain.accumulable == WEIGHT_GRADS == op.accumulable


# -- the runtime: Chain.backward(accumulate=...) ------------------------------------------------


@pytest.fixture
def launches(monkeypatch):
    """GEMM launches on the CPU are recorded, (symbol, D), and compute nothing (the CPU tests'
    manifest fabricates the operand majors: they are not checked); host steps and finalizes
    run their torch emulation."""
    monkeypatch.setattr(checks, "current_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(launch.Launcher, "sm_count", lambda self, dev: 132)
    monkeypatch.setattr(launch.Launcher, "_operands", lambda self, step, env, v: (None, None))
    calls = []

    def function(self, symbol):
        return lambda a, b, d, c, *rest: calls.append((symbol, d))

    monkeypatch.setattr(launch.Launcher, "function", function)
    emulate_compiled(monkeypatch)
    return calls


def _backward_args(op, checked, m: int = 8):
    sizes, low = rt._inputs(checked, m)
    saved = {**low, **op(**low)}
    grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=5)
    return saved, grads


def test_backward_runs_the_accumulating_kernel_into_the_given_tensor(llama, launches):
    op, checked = llama
    saved, grads = _backward_args(op, checked)
    into = {g: torch.zeros(saved[of].shape, dtype=torch.bfloat16) for g, of in op.grad_outputs}
    into = {g: t for g, t in into.items() if g in ("dw_o", "dw_gu")}
    out = op.chain.backward(saved, accumulate=into, **grads)
    ran = {s: d for s, d in launches}
    for step, g in (("wgrad_out_proj", "dw_o"), ("wgrad_gu", "dw_gu")):
        assert f"coda_{step}" not in ran
        assert ran[f"coda_{step}{ACCUMULATE_SUFFIX}"] is into[g] and out[g] is into[g]
    for step in ("wgrad_qkv", "wgrad_down", "dgrad_out_proj"):  # not asked: the plain kernel
        assert f"coda_{step}" in ran and f"coda_{step}{ACCUMULATE_SUFFIX}" not in ran


def _target(how: str, shape) -> torch.Tensor:
    if how == "dtype":
        return torch.zeros(shape)
    if how == "shape":
        return torch.zeros(shape[0], shape[1] // 2, dtype=torch.bfloat16)
    if how == "layout":
        return torch.zeros(shape[::-1], dtype=torch.bfloat16).T
    if how == "aligned":
        return torch.zeros(shape[0] * shape[1] + 1, dtype=torch.bfloat16)[1:].view(shape)
    return torch.zeros(shape, dtype=torch.bfloat16, requires_grad=True)


TARGETS = [
    ("dtype", "accumulation target 'dw_o' is torch.float32; expected bf16"),
    ("shape", "accumulation target 'dw_o' dim 1 is 64; expected 128"),
    ("layout", "accumulation target 'dw_o' is not contiguous"),
    ("aligned", "accumulation target 'dw_o' is not 16-byte aligned"),
    ("grad", "accumulation target 'dw_o' requires grad"),
]


@pytest.mark.parametrize("how, message", TARGETS, ids=[t[0] for t in TARGETS])
def test_a_bad_accumulation_target_is_refused_before_any_launch(llama, launches, how, message):
    op, checked = llama
    saved, grads = _backward_args(op, checked)
    target = _target(how, saved["w_o"].shape)
    kept = target.detach().clone()
    with pytest.raises(CodaRuntimeError, match=message):
        op.chain.backward(saved, accumulate={"dw_o": target}, **grads)
    assert launches == [] and torch.equal(target.detach(), kept)


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("grad", ["dgamma1", "dy", "bogus"])
def test_a_gradient_without_an_accumulating_kernel_is_refused(llama, launches, grad, check):
    """dgamma1 comes from a finalize, dy has the dynamic dim; refused even unchecked."""
    op, checked = llama
    saved, grads = _backward_args(op, checked)
    with pytest.raises(CodaRuntimeError, match=rf"no accumulating kernel writes \['{grad}'\]"):
        op.chain.backward(saved, check=check, accumulate={grad: torch.zeros(4)}, **grads)
    assert launches == []


# -- the op's option, on the CPU implementation ---------------------------------------------


def spy_accumulated(monkeypatch) -> list:
    """A list that gets, at each backward of an op on the CPU, the gradients it accumulated
    into .grad itself (sorted; [] when none)."""
    log = []
    real = ops.ChainOp._backward_cpu

    def spy(self, *args, into=None, needed=None):
        log.append(sorted(into or {}))
        return real(self, *args, into=into, needed=needed)

    monkeypatch.setattr(ops.ChainOp, "_backward_cpu", spy)
    return log


@pytest.fixture
def accumulated(monkeypatch):
    return spy_accumulated(monkeypatch)


def _loss(out: dict):
    return out["x2"].float().pow(2).sum() + (out["qkv"].float() * 0.5).sum()


def _shared(checked, dtype=None, cast=False) -> dict:
    """The weights, leaves that live across micro-batches (``cast``: fp32 masters, passed as
    ``p.to(torch.bfloat16)``, a non-leaf)."""
    _, low = rt._inputs(checked, 8, seed=0)
    if cast:
        return {n: low[n].float().requires_grad_(True) for n in SHARED}
    return {n: low[n].to(dtype or low[n].dtype).requires_grad_(True) for n in SHARED}


def _micro_batches(op, checked, params: dict, n=2, cast=False, dtype=None, prep=None) -> None:
    """``n`` forward+backward micro-batches into ``params``' .grad (fresh activations, which
    require grad, each time); ``prep(i)`` runs before micro-batch i."""
    for i in range(n):
        if prep is not None:
            prep(i)
        _, batch = rt._inputs(checked, 8, seed=10 + i)
        x = {}
        for k, v in batch.items():
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
            x[k] = v.requires_grad_(True) if k in ("x0", "y") else v
        weights = {k: p.to(torch.bfloat16) if cast else p for k, p in params.items()}
        _loss(op(**{**x, **weights})).backward()


def _grads(params: dict) -> dict:
    return {n: p.grad for n, p in params.items()}


def _same_grads(a: dict, b: dict) -> None:
    for n in SHARED:
        assert a[n] is not None and torch.equal(a[n], b[n]), n


def test_two_micro_batches_accumulate_into_grad_bitwise(llama, accumulated):
    """The first micro-batch has no .grad: functional (autograd sets .grad); the second adds
    every weight gradient into .grad with the accumulating path and hands autograd None. The
    result is autograd's own accumulation bitwise: both add the same bf16 gradient to the same
    bf16 .grad with one rounding (torch's bf16 add, fp32 inside)."""
    op, checked = llama
    fused, plain = _shared(checked), _shared(checked)
    kept = {}
    _micro_batches(op.with_grad_accum(), checked, fused, prep=lambda i: kept.update(_grads(fused)))
    assert accumulated == [[], sorted(WEIGHT_GRADS)]
    assert all(fused[n].grad is kept[n] for n in ("w_o", "w_gu", "w_down", "w_qkv"))
    accumulated.clear()
    _micro_batches(op, checked, plain)
    assert accumulated == [[], []]
    _same_grads(_grads(fused), _grads(plain))
    one = _shared(checked)
    _micro_batches(op, checked, one, n=1)  # the test can fail: two batches are not one
    assert not torch.equal(one["w_o"].grad, plain["w_o"].grad)


def _fallback_case(how: str, checked) -> tuple[dict, dict]:
    """(params, micro-batch options) of one fall-back case."""
    if how == "non-leaf":
        return _shared(checked, cast=True), {"cast": True}
    if how == "fp64":
        return _shared(checked, torch.float64), {"dtype": torch.float64}
    params = _shared(checked)
    w_o = params["w_o"]
    if how == "layout":  # a transposed .grad: w_o's shape (square) and dtype, not contiguous
        w_o.grad = torch.zeros(w_o.shape[::-1], dtype=w_o.dtype).T
        assert w_o.grad.shape == w_o.shape and not w_o.grad.is_contiguous()
    elif how == "hook":  # a hook must see each micro-batch's gradient alone
        w_o.register_hook(lambda g: g * 2)
    return params, {}


FALLBACKS = {  # case -> the gradients the second micro-batch accumulates itself
    "non-leaf": [],
    "fp64": [],
    "layout": sorted(set(WEIGHT_GRADS) - {"dw_o"}),
    "hook": sorted(set(WEIGHT_GRADS) - {"dw_o"}),
}


@pytest.mark.filterwarnings("ignore:grad and param do not obey the gradient layout contract")
@pytest.mark.parametrize("how", sorted(FALLBACKS))
def test_fall_backs_are_the_functional_gradient(llama, accumulated, how):
    """A non-leaf input (``p.to(torch.bfloat16)`` of fp32 masters), a .grad of another dtype
    (fp64 leaves), a non-contiguous .grad, a leaf with a hook: those gradients go back to
    autograd, and the .grad is what autograd's own accumulation gives."""
    op, checked = llama
    fused, opts = _fallback_case(how, checked)
    plain, _ = _fallback_case(how, checked)
    _micro_batches(op.with_grad_accum(), checked, fused, **opts)
    assert accumulated == [[], FALLBACKS[how]]
    _micro_batches(op, checked, plain, **opts)
    _same_grads(_grads(fused), _grads(plain))


def test_a_backward_that_does_not_write_grad_accumulates_nothing(llama, accumulated):
    """``torch.autograd.grad`` and ``.backward(inputs=...)`` without a weight leave .grad
    alone: the op does not add into it either."""
    op, checked = llama
    fused = _shared(checked)
    handle = op.with_grad_accum()
    _micro_batches(handle, checked, fused, n=1)
    kept = {n: g.clone() for n, g in _grads(fused).items()}
    _, batch = rt._inputs(checked, 8, seed=20)
    x0 = batch["x0"].requires_grad_(True)
    loss = _loss(handle(**{**batch, "x0": x0, **fused}))
    (dx0,) = torch.autograd.grad(loss, [x0], retain_graph=True)
    torch.autograd.grad(loss, [fused["w_o"]], retain_graph=True)
    loss.backward(inputs=[x0])
    assert accumulated[1:] == [[], [], []] and dx0.abs().sum() > 0
    for n, g in _grads(fused).items():
        assert torch.equal(g, kept[n]), n


def test_a_post_accumulate_grad_hook_sees_the_accumulated_grad(llama, accumulated):
    op, checked = llama
    fused, plain = _shared(checked), _shared(checked)
    seen = []
    fused["w_o"].register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    _micro_batches(op.with_grad_accum(), checked, fused)
    _micro_batches(op, checked, plain)
    assert accumulated[1] == sorted(WEIGHT_GRADS) and len(seen) == 2
    assert torch.equal(seen[1], plain["w_o"].grad)


def test_the_option_is_a_handle_of_the_same_op(llama):
    op, _ = llama
    fused = coda_spec.op(op.chain, fuse_grad_accum=True)
    assert fused is not op and fused.op is op.op and fused.fuse_grad_accum
    assert not op.fuse_grad_accum and coda_spec.op(op.chain) is op
    assert fused.with_grad_accum(False) is not fused and op.with_grad_accum(False) is op
    assert "fuse_grad_accum" in repr(fused)


def test_the_option_is_refused_for_a_chain_with_nothing_to_accumulate(tmp_path, monkeypatch):
    monkeypatch.setattr(ops, "_OPS", {})
    d, _ = rt.make_build(tmp_path, "rmsnorm_chain")
    with pytest.raises(CodaRuntimeError, match="no gradient of this chain has an accumulating"):
        coda_spec.op(d, tuned=False, fuse_grad_accum=True)


@pytest.mark.slow
def test_torch_compile_ignores_the_option(llama, accumulated):
    """Under torch.compile the option is off: one graph, no break, and two micro-batches give
    eager's functional .grad, with nothing accumulated by the op."""
    op, checked = llama
    handle = op.with_grad_accum()

    def step(**kw):
        return _loss(handle(**kw))

    fused, plain = _shared(checked), _shared(checked)
    _, batch = rt._inputs(checked, 8, seed=10)
    explained = torch._dynamo.explain(step)(**{**batch, **fused})
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    for p in fused.values():
        p.grad = None
    accumulated.clear()
    compiled = torch.compile(step, fullgraph=True)
    for i in range(2):
        _, batch = rt._inputs(checked, 8, seed=10 + i)
        compiled(**{**batch, **fused}).backward()
    assert accumulated == [[], []]
    _micro_batches(op, checked, plain)
    _same_grads(_grads(fused), _grads(plain))
