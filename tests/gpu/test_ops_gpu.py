"""Built chains as torch ops on a real GPU (marker ``gpu``): the op is the chain, bitwise;
gradients through it are ``Chain.backward``'s, bitwise; ``torch.compile(fullgraph=True)`` has no
graph break; ``mode="reduce-overhead"`` (CUDA graphs) replays it. Builds come from
``coda build specs/<name>.yaml``; a missing build fails loudly with that command.
"""

from __future__ import annotations

import pytest

from tests.conftest import need_build

pytestmark = pytest.mark.gpu
FORWARD = ["rmsnorm_chain", "b2_dgrad_dswiglu", "llama_block", "f2_deferred_norm"]
FORWARD += ["lmhead_ce_bwd"]  # onehot: a column table the op's call makes (keeps none)
EXTRA = {"lmhead_ce_bwd": "tests/specs_extra/lmhead_ce_bwd.yaml"}  # test specs: where they are


def _op(name: str, m: int = 1000, seed: int = 0):
    import torch

    import coda_spec
    from coda_spec.bench.driver import Options, draw

    op = coda_spec.op(need_build(name, EXTRA.get(name)), tuned=False)
    checked = op.chain.checked()
    sizes = {d.name: (d.size or m) for d in checked.spec.dims}
    _, inputs, grads = draw(op.chain, checked, sizes, Options(seed=seed))
    torch.cuda.synchronize()
    return op, inputs, grads


def _trainable(op, inputs: dict) -> dict:
    wrt = {of for _, of in op.grad_outputs}
    return {k: (v.clone().requires_grad_(True) if k in wrt else v) for k, v in inputs.items()}


@pytest.mark.parametrize("name", FORWARD)
def test_the_op_is_the_chain_bitwise(name):
    import torch

    op, inputs, _ = _op(name)
    want = op.chain(**{k: v.clone() for k, v in inputs.items()})
    eager = op(**{k: v.clone() for k, v in inputs.items()})
    dispatched = op.op(*[inputs[n].clone() for n in op.inputs], op.dims)
    dispatched = (dispatched,) if isinstance(dispatched, torch.Tensor) else dispatched
    for i, n in enumerate(op.outputs):
        assert torch.equal(eager[n], want[n]) and torch.equal(dispatched[i], want[n]), n


def _backward_through_op(op, inputs: dict, grads: dict) -> dict:
    import torch

    x = _trainable(op, inputs)
    out = op(**x)
    outs = [out[of] for _, of in op.grads]
    torch.autograd.backward(outs, [grads[g].clone() for g, _ in op.grads])
    return {of: x[of].grad for _, of in op.grad_outputs}


def test_gradients_through_the_op_are_chain_backward_bitwise():
    import torch

    op, inputs, grads = _op("llama_block")
    got = _backward_through_op(op, inputs, grads)
    env = op.chain.run({k: v.clone() for k, v in inputs.items()})
    want = op.chain.backward(env, **{k: v.clone() for k, v in grads.items()})
    for g, of in op.grad_outputs:  # autograd casts a gradient to its input's dtype (dgamma)
        assert torch.equal(got[of], want[g].to(got[of].dtype)), g


def _step(op, scale: dict):
    """A loss whose incoming gradients are exactly ``scale`` (so compiled and eager hand the
    op the same gradients)."""

    def step(**kw):
        out = op(**kw)
        return sum((out[of].float() * scale[of]).sum() for _, of in op.grads)

    return step


def test_compile_fullgraph_has_no_graph_break_on_the_gpu():
    import torch

    op, inputs, grads = _op("llama_block")
    scale = {of: grads[g].float() for g, of in op.grads}
    step = _step(op, scale)
    explained = torch._dynamo.explain(step)(**_trainable(op, inputs))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    a, b = _trainable(op, inputs), _trainable(op, inputs)
    compiled(**a).backward()
    step(**b).backward()
    for _, of in op.grad_outputs:
        assert torch.equal(a[of].grad, b[of].grad), of


def test_reduce_overhead_replays_the_training_step():
    """``mode="reduce-overhead"``: the step runs as CUDA graphs; three steps give eager's
    gradients bitwise."""
    import torch

    op, inputs, grads = _op("llama_block")
    scale = {of: grads[g].float() for g, of in op.grads}
    step = _step(op, scale)
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    b = _trainable(op, inputs)
    step(**b).backward()
    for _ in range(3):
        a = _trainable(op, inputs)
        compiled(**a).backward()
        for _, of in op.grad_outputs:
            assert torch.equal(a[of].grad, b[of].grad), of


# -- fuse_grad_accum: the accumulating kernels (D += result, a TMA reduce-add store) ----------

WEIGHTS = ["w_o", "gamma1", "w_gu", "w_down", "gamma2", "w_qkv"]
WGRADS = ["wgrad_qkv", "wgrad_down", "wgrad_gu", "wgrad_out_proj"]  # llama_block's
ACC = "__accumulate"  # an accumulating kernel's symbol: its plain kernel's and this


def _within_one_ulp(got, want, what: str) -> None:
    """bf16 .grad summed by the kernel's reduce-add store against torch's add: both add the
    same bf16-rounded gradient to the same bf16 tensor and round once, but the reduce-add's
    rounding is the hardware's and torch rounds an fp32 sum, so allow one bf16 ulp (2^-7 of
    the magnitude); the message says how many elements are bitwise equal."""
    import torch

    same = int((got == want).sum())
    torch.testing.assert_close(
        got.float(),
        want.float(),
        rtol=2**-7,
        atol=1e-30,
        msg=lambda m: f"{what}: {m} ({same} of {want.numel()} elements bitwise equal)",
    )


@pytest.fixture
def launched(monkeypatch):
    """The symbol of every GEMM the runtime launches, in order."""
    from coda_spec.runtime import launch

    symbols = []
    real = launch.Launcher.kernel

    def spy(self, plan, step, v, call):
        symbols.append(v.symbol)
        return real(self, plan, step, v, call)

    monkeypatch.setattr(launch.Launcher, "kernel", spy)
    return symbols


def test_chain_backward_accumulates_into_the_given_tensor():
    """``Chain.backward(accumulate=...)``: each weight gradient is added into the tensor passed,
    in place, by its accumulating kernel: the result is that tensor's old value plus the plain
    backward's gradient."""
    import torch

    op, inputs, grads = _op("llama_block")
    env = op.chain.run({k: v.clone() for k, v in inputs.items()})
    want = op.chain.backward(env, **{k: v.clone() for k, v in grads.items()})
    start = {g: torch.randn_like(want[g], dtype=torch.float32).bfloat16() for g in op.accumulable}
    into = {g: t.clone() for g, t in start.items()}
    got = op.chain.backward(env, accumulate=into, **{k: v.clone() for k, v in grads.items()})
    torch.cuda.synchronize()
    for g in op.accumulable:
        assert got[g] is into[g]
        _within_one_ulp(into[g], start[g] + want[g], g)


def test_fuse_grad_accum_sums_two_micro_batches_into_grad(launched):
    """Two micro-batches through ``coda_spec.op(..., fuse_grad_accum=True)`` give the .grad that
    autograd's own accumulation gives (within one bf16 ulp: ``_within_one_ulp``); the second
    backward ran the accumulating kernels (and not the plain wgrads) into the same .grad
    tensors; gradients with no accumulating kernel (dgamma) are bitwise autograd's."""
    import torch

    import coda_spec

    op, inputs, _ = _op("llama_block")
    fused_op = coda_spec.op(op.chain, fuse_grad_accum=True)
    batches = [_op("llama_block", seed=s)[1:] for s in (1, 2)]
    fused = {n: inputs[n].clone().requires_grad_(True) for n in WEIGHTS}
    plain = {n: inputs[n].clone().requires_grad_(True) for n in WEIGHTS}
    first = {}
    for handle, params in ((fused_op, fused), (op, plain)):
        for i, (acts, grads) in enumerate(batches):
            scale = {of: grads[g].float() for g, of in op.grads}
            x = {k: v.clone() for k, v in acts.items() if k not in WEIGHTS}
            launched.clear()
            _step(handle, scale)(**x, **params).backward()
            if handle is fused_op and i == 0:
                first = {n: p.grad for n, p in params.items()}
            if handle is fused_op:  # no .grad yet: the plain wgrads; then the accumulating
                wgrads = {f"coda_{s}" for s in WGRADS}
                ran = {s[: -len(ACC)] for s in launched if s.endswith(ACC)}
                assert ran == (wgrads if i else set()), launched
                assert not (wgrads & set(launched)) if i else wgrads <= set(launched), launched
    torch.cuda.synchronize()
    for n in WEIGHTS:
        assert fused[n].grad is first[n], n  # accumulated in place, never replaced
        if n.startswith("gamma"):
            assert torch.equal(fused[n].grad, plain[n].grad), n
        else:
            _within_one_ulp(fused[n].grad, plain[n].grad, n)


def test_reduce_overhead_replays_the_lmhead_backward_op():
    """``mode="reduce-overhead"`` on the op whose kernel reads a column table (``onehot``): the
    op's call keeps no table (CUDA-graph trees), the graph makes it on every replay; three
    replays give eager's outputs bitwise."""
    import torch

    op, inputs, _ = _op("lmhead_ce_bwd")
    op.chain._launcher._columns.clear()  # ops are shared: a direct chain call may have kept one
    names = list(op.outputs)

    def step(**kw):
        out = op(**kw)
        return tuple(out[n] for n in names)

    want = step(**{k: v.clone() for k, v in inputs.items()})
    op.chain._launcher._columns.clear()  # an eager call keeps its tables; a compiled one none
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        got = compiled(**{k: v.clone() for k, v in inputs.items()})
        for n, a, b in zip(names, got, want, strict=True):
            assert torch.equal(a, b), n
    assert op.chain._launcher._columns == {}


def test_eager_op_calls_keep_their_turns_tables_and_compiled_calls_none():
    """An eager call of an op (through the dispatcher, with autograd) keeps its RoPE turns table
    for the next call, as a direct chain call does; a compiled graph's call keeps none (CUDA-
    graph trees), and both give the same outputs."""
    import torch

    op, inputs, _ = _op("llama_block")
    tables = op.chain._launcher._tables
    tables.clear()
    x = _trainable(op, inputs)
    eager = op(**x)
    assert tables, "the eager call kept no turns table"
    kept = dict(tables)
    again = op(**x)
    assert tables == kept  # the second call read the kept table
    tables.clear()
    compiled = torch.compile(lambda **kw: op(**kw)["qkv"], fullgraph=True)
    got = compiled(**x)
    assert not tables
    assert torch.equal(got, eager["qkv"]) and torch.equal(again["qkv"], eager["qkv"])


def test_a_store_over_shares_the_buffer_on_the_gpu():
    """llama3_lm_head's ce_fwd_bwd writes dlogits over the logits (``store ... over:``): one
    buffer for both in the chain's environment, at V = 16384 (re-sized: the kernels are the
    same at any V)."""
    import torch

    import coda_spec
    from coda_spec.bench.driver import Options, draw

    op = coda_spec.op(need_build("llama3_lm_head"), tuned=False, dims={"V": 16384})
    checked = op.chain.checked()
    sizes = {d.name: (d.size or 512) for d in checked.spec.dims}
    _, inputs, _ = draw(op.chain, checked, sizes, Options(seed=1))
    env = op.chain.run({k: v.clone() for k, v in inputs.items()})
    torch.cuda.synchronize()
    assert env["dlogits"].data_ptr() == env["logits"].data_ptr()
    assert torch.isfinite(env["loss"]) and torch.isfinite(env["dx2"].float()).all()
