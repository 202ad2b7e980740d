"""``coda_spec.ops`` without a GPU: built chains as torch ops on their CPU implementation.

A build here is the CPU tests' (``tests.test_runtime_cpu.make_build``: a shrunk spec and the
manifest ``coda build`` would write). The op's CPU kernels are the reference interpreter at the
declared dtypes (fp64 under gradcheck), so autograd, ``torch.compile`` and every refusal run in
CI; the H200 checks the CUDA kernels against ``Chain.backward``
(``bash benchmarks/device_run.sh ops``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import coda_spec
from coda_spec import ops
from coda_spec.prove import reference
from coda_spec.runtime import CodaRuntimeError
from tests import test_runtime_cpu as rt
from tests.conftest import ROOT

LLAMA_DIMS = {"D": 128, "F": 128}  # small enough for gradcheck, big enough for RoPE's heads


@pytest.fixture
def build(tmp_path, monkeypatch):
    """``build(name)``: (ChainOp, checked spec) of a fresh build; ops of earlier tests are
    forgotten (each test gets its own build directory, so its own op)."""
    monkeypatch.setattr(ops, "_OPS", {})
    monkeypatch.setitem(
        rt.SPECS, "llama_small", (rt.ROOT / "specs" / "llama_block.yaml", LLAMA_DIMS)
    )

    def make(name: str):
        d, checked = rt.make_build(tmp_path, name)
        return ops.op(coda_spec.load(d, tuned=False)), checked

    return make


def _inputs(checked, m: int, seed: int = 0) -> tuple[dict, dict]:
    return rt._inputs(checked, m, seed)


def _trainable(op, inputs: dict, dtype=None) -> dict:
    """The inputs, the ones the spec differentiates requiring grad (in ``dtype`` if given)."""
    wrt = {of for _, of in op.grad_outputs}
    out = {}
    for k, v in inputs.items():
        if k in wrt:
            v = (v.to(dtype) if dtype else v.clone()).requires_grad_(True)
        elif dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        out[k] = v
    return out


def _loss(out: dict):
    return out["x2"].float().pow(2).sum() + (out["qkv"].float() * 0.5).sum()


def test_the_op_is_registered_with_the_chains_contract(build):
    op, _ = build("rmsnorm_chain")
    assert op.op_name == "rmsnorm_chain_000000000000"  # the spec name, the build's address
    assert getattr(torch.ops.coda, op.op_name).default is not None
    assert op.inputs == ["y", "w_o", "x", "gamma", "w_up"] and op.returns == ["x1", "r", "out"]
    assert op.backward_op is None
    assert repr(op).startswith("<coda op coda::rmsnorm_chain_000000000000 of ")


@pytest.mark.parametrize("via", ["eager", "dispatcher"])
def test_cpu_outputs_are_the_reference_at_the_declared_dtypes(build, via):
    op, checked = build("rmsnorm_chain")
    sizes, low = _inputs(checked, 16)
    if via == "eager":
        got = op(**low)
    else:
        got = getattr(torch.ops.coda, op.op_name)(*[low[n] for n in op.inputs], op.dims)
        got = dict(zip(op.returns, got, strict=True))
    ref = reference.run(checked.analysis, low, "kernel", sizes)
    for name, dtype in (("x1", torch.bfloat16), ("r", torch.float32), ("out", torch.bfloat16)):
        assert got[name].dtype == dtype
        assert torch.equal(got[name], ref[name].to(dtype)), name


def test_cpu_epilogues_read_the_fp32_accumulator_as_the_kernels_do(build):
    """At the declared dtypes the CPU op's epilogue reads each GEMM's fp32 accumulator, as the
    GPU kernels' does: fp32 statistics of ``acc`` (a column amax and sum) are those of the fp32
    product of the bf16 operands. Before, the CPU rounded ``acc`` to bf16 first (the unfused
    ``lowp`` reference), so every amax was a bf16 value and the sums were off by up to 2^-9."""
    op, checked = build("empty_folds")
    _, low = _inputs(checked, 64)
    got = op(**low)
    acc = low["x"].float() @ low["w"].float().T
    torch.testing.assert_close(got["amx"], acc.abs().amax(0), rtol=1e-6, atol=0)
    torch.testing.assert_close(got["s"], acc.sum(0), rtol=1e-5, atol=1e-5)
    assert not torch.equal(got["amx"], got["amx"].bfloat16().float())  # not bf16-rounded
    assert torch.equal(got["y"], acc.bfloat16())  # the bf16 store rounds once, from fp32


def test_outputs_are_fresh_tensors_and_add_to_writes_no_input(build):
    """Functional: nothing returned shares memory with an input, and llama's backward, whose
    kernels accumulate into the incoming d_x2 (add_to), leaves the caller's gradient alone."""
    op, checked = build("llama_small")
    _, low = _inputs(checked, 8)
    x = _trainable(op, low)
    out = op(**x)
    ptrs = {v.untyped_storage().data_ptr() for v in low.values()}
    assert not any(v.untyped_storage().data_ptr() in ptrs for v in out.values())
    g = torch.randn_like(out["x2"], dtype=torch.float32).to(torch.bfloat16)
    kept = g.clone()
    torch.autograd.backward([out["x2"]], [g])
    assert torch.equal(g, kept)


def test_autograd_runs_the_backward_section(build):
    """Gradients through the op are the backward section's, from the saved tensors: equal to the
    reference interpreter's forward + backward with the same incoming gradients."""
    op, checked = build("llama_small")
    sizes, low = _inputs(checked, 8)
    x = _trainable(op, low)
    out = op(**x)
    g_x2, g_qkv = torch.randn_like(out["x2"].float()), torch.randn_like(out["qkv"].float())
    torch.autograd.backward([out["x2"], out["qkv"]], [g_x2.bfloat16(), g_qkv.bfloat16()])
    grads = {"d_x2": g_x2.bfloat16(), "d_qkv": g_qkv.bfloat16()}
    ref = reference.run(checked.analysis, low, "kernel", sizes, grads=grads)
    for grad, of in op.grad_outputs:
        want = ref[grad].to(x[of].dtype)
        torch.testing.assert_close(x[of].grad, want, rtol=0, atol=0, msg=grad)
    assert x["pos"].grad is None and not x["freqs"].requires_grad


def test_statistics_are_not_differentiable(build):
    op, checked = build("llama_small")
    _, low = _inputs(checked, 4)
    out = op(**_trainable(op, low))
    assert out["x2"].requires_grad and out["qkv"].requires_grad
    assert not any(out[n].requires_grad for n in ("x1", "r1", "z1", "r2"))


def test_gradcheck_in_fp64(build):
    """The spec's backward section is the derivative of its forward: gradcheck of the op in
    fp64 (the CPU kernels run the reference in fp64 when every floating input is fp64)."""
    op, checked = build("llama_small")
    f, leaves = _llama_fn(op, checked, 3)
    assert torch.autograd.gradcheck(f, leaves, fast_mode=True)


def _llama_fn(op, checked, m: int) -> tuple:
    """(f, leaves): llama's (x2, qkv) as a function of the inputs it differentiates, at M = m
    in fp64, and those inputs (what gradcheck takes)."""
    _, low = _inputs(checked, m)
    x = _trainable(op, low, torch.float64)
    wrt = [of for _, of in op.grad_outputs]

    def f(*leaves):
        out = op(**{**x, **dict(zip(wrt, leaves, strict=True))})
        return out["x2"], out["qkv"]

    return f, tuple(x[n] for n in wrt)


def test_a_zero_stride_incoming_gradient(build):
    """``.sum().backward()`` hands the op an expanded (zero-stride) gradient: made dense."""
    op, checked = build("llama_small")
    _, low = _inputs(checked, 4)
    x = _trainable(op, low)
    op(**x)["x2"].sum().backward()
    assert x["w_o"].grad is not None and torch.isfinite(x["w_o"].grad.float()).all()


def test_no_zeros_for_gradients_the_backward_never_reads(build):
    """Autograd hands no zero-filled gradient for a returned tensor the loss never used (z1,
    x1, r1, r2: issue 33 counted 1.5 ms of such fills per 1B step); a declared one the loss
    left out (qkv here) is made zeros once, at its own shape."""
    from torch.utils._python_dispatch import TorchDispatchMode

    made = []

    class Fills(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in ("zeros", "zeros_like", "new_zeros", "fill_", "zero_", "full"):
                made.append((name, tuple(out.shape)))
            return out

    op, checked = build("llama_small")
    _, low = _inputs(checked, 8)
    x = _trainable(op, low)
    out = op(**x)
    with Fills():
        out["x2"].float().sum().backward()
    assert made == [("zeros", tuple(out["qkv"].shape))], made
    assert x["w_o"].grad is not None


@pytest.mark.slow
def test_compile_fullgraph_has_no_graph_break_and_keeps_m_dynamic(build):
    """``torch.compile(fullgraph=True, dynamic=True)`` of a training step through the op: one
    graph, no break; the compiled step gives eager's loss and gradients, at two values of M."""
    op, checked = build("llama_small")

    def step(**kw):
        return _loss(op(**kw))

    _, low = _inputs(checked, 8)
    explained = torch._dynamo.explain(step)(**_trainable(op, low))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for m in (8, 13):
        _, low = _inputs(checked, m, seed=m)
        a, b = _trainable(op, low), _trainable(op, low)
        compiled(**a).backward()
        step(**b).backward()
        for _, of in op.grad_outputs:
            assert torch.equal(a[of].grad, b[of].grad), (m, of)


# -- refusals: the runtime's CodaRuntimeError, before anything runs ------------------------------


def _bad(how: str, low: dict) -> dict:
    bad = dict(low)
    if how == "dtype":
        bad["x"] = bad["x"].float()
    elif how == "shape":
        bad["x"] = bad["x"][:, :-8].contiguous()
    elif how == "device":
        bad["x"] = torch.empty(bad["x"].shape, dtype=bad["x"].dtype, device="meta")
    elif how == "missing":
        del bad["x"]
    elif how == "unknown":
        bad["bogus"] = bad["x"]
    return bad


REFUSALS = [
    ("dtype", "input 'x' is torch.float32; expected bf16"),
    ("shape", "input 'x' dim 1 is 504; expected 512"),
    ("device", "input 'x' is on meta; kernels run on cpu"),
    ("missing", r"missing input\(s\) \['x'\]"),
    ("unknown", r"unknown input\(s\) \['bogus'\]"),
]


@pytest.mark.parametrize("how, message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_input_is_the_runtimes_refusal(build, how, message):
    op, checked = build("rmsnorm_chain")
    _, low = _inputs(checked, 8)
    with pytest.raises(CodaRuntimeError, match=message):
        op(**_bad(how, low))


def test_requires_grad_without_a_backward_section_is_refused(build):
    op, checked = build("rmsnorm_chain")
    _, low = _inputs(checked, 8)
    low["w_up"].requires_grad_(True)
    with pytest.raises(CodaRuntimeError, match=r"\['w_up'\] require grad.*no backward"):
        op(**low)


def test_a_gradient_of_the_wrong_shape_is_refused(build):
    op, checked = build("llama_small")
    _, low = _inputs(checked, 4)
    x = _trainable(op, low)
    out = op(**x)
    saved = {**x, **out}
    grads = [out["qkv"].detach(), out["x2"].detach()[:, :-8].contiguous()]
    with pytest.raises(CodaRuntimeError, match="gradient 'd_x2' dim 1 is 120; expected 128"):
        needed = [1] * len(op.grad_outputs)
        op.backward_op(*(saved[n].detach() for n in op.saved), *grads, op.dims, needed)


def test_one_op_per_build_and_two_builds_of_a_spec_side_by_side(build, tmp_path):
    """The op name carries the build's address: the same build is the same op; another build
    of the spec (another address) is another op in the same process, each running its own
    build; a second directory with the same address is refused."""
    op, checked = build("rmsnorm_chain")
    assert ops.op(op.chain) is op
    other = tmp_path / "other"
    other.mkdir()
    d, _ = rt.make_build(other, "rmsnorm_chain")
    with pytest.raises(CodaRuntimeError, match="already the op of"):
        ops.op(d)
    renamed = d.rename(other / "rmsnorm_chain-0123456789ab")
    second = ops.op(coda_spec.load(renamed, tuned=False))
    assert second.op_name == "rmsnorm_chain_0123456789ab" and second.op is not op.op
    _, low = _inputs(checked, 8)
    a, b = op(**low), second(**low)
    assert all(torch.equal(a[n], b[n]) for n in op.outputs)


def test_an_op_name_off_a_directory_not_named_by_its_address(build, tmp_path):
    """A build directory renamed by hand: the op name takes the manifest's own hash."""
    import hashlib

    d, _ = rt.make_build(tmp_path, "rmsnorm_chain")
    d = d.rename(tmp_path / "my_rmsnorm")
    digest = hashlib.sha256((d / "manifest.json").read_bytes()).hexdigest()[:12]
    assert ops.op_name(coda_spec.load(d, tuned=False)) == f"rmsnorm_chain_{digest}"


def test_a_chain_of_one_output(build):
    """One output: the op's schema returns a Tensor, not a tuple of one."""
    op, checked = build("f2_deferred_norm")
    _, low = _inputs(checked, 8)
    got = getattr(torch.ops.coda, op.op_name)(*[low[n] for n in op.inputs], op.dims)
    assert isinstance(got, torch.Tensor)
    assert torch.equal(op(**low)[op.outputs[0]], got)


def test_one_build_serves_other_dims(build, tmp_path):
    """``op(build, dims=...)`` re-sizes the build at load: the same op name serves both sizes,
    each at its own shapes, and autograd runs at the re-sized dims (gradcheck in fp64)."""
    big, _ = build("llama_small")
    small = ops.op(big.chain, dims={"D": 64, "F": 96})
    assert small is not big and small.dims == [64, 96] and big.dims == [128, 128]
    assert ops.op(big.chain, dims={"D": 64, "F": 96}) is small  # one ChainOp per dims
    assert ops.op(big.chain, dims={"D": 128}) is big  # the build's own dims
    checked = small.chain.checked()
    assert checked.spec.dim_sizes()["D"] == 64
    f, leaves = _llama_fn(small, checked, 3)
    assert f(*leaves)[1].shape == (3, 3 * 64)
    assert torch.autograd.gradcheck(f, leaves, fast_mode=True)
    _, low_big = _inputs(big.chain.checked(), 2)
    assert big(**low_big)["qkv"].shape == (2, 3 * 128)  # the other size still runs


def test_a_size_the_spec_refuses_names_the_build(build):
    op, _ = build("llama_small")
    with pytest.raises(CodaRuntimeError, match=r"not static dims of this build"):
        ops.op(op.chain, dims={"Q": 4})
    fix = r"cannot re-size .*dims are \{D: 63, F: 128\} with coda build"
    with pytest.raises(CodaRuntimeError, match=fix):
        ops.op(op.chain, dims={"D": 63})  # RoPE's pairs need an even width


@pytest.mark.parametrize("via", ["eager", "dispatcher"])
def test_the_inplace_flavour_accumulates_into_its_add_to_input(build, via):
    """``inplace=True``: b1's dx = dres + ..., an add_to into its input dres, is written into
    dres itself (the functional op writes a copy), equal to the functional op's dx, and
    returned as dres; ``coda::<name>_inplace`` declares the argument mutated."""
    fn, checked = build("b1_dgrad_rmsnorm_bwd")
    _, low = _inputs(checked, 8)
    want = fn(**low)
    ip = ops.op(fn.chain, inplace=True)
    assert ip.inplace
    assert repr(ip).startswith("<coda op coda::b1_dgrad_rmsnorm_bwd_000000000000_inplace")
    assert ops.op(fn.chain) is fn and not fn.inplace  # the functional handle is unchanged
    dres = low["dres"].clone()
    if via == "eager":
        got = ip(**{**low, "dres": dres})
        assert got["dx"] is dres
    else:
        args = [dres if n == "dres" else low[n] for n in ip.inputs]
        rest = getattr(torch.ops.coda, f"{ip.op_name}_inplace")(*args, ip.dims)
        got = dict(zip([n for n in ip.outputs if n != "dx"], rest, strict=True))
    assert torch.equal(dres, want["dx"])
    assert torch.equal(got["v"], want["v"]) and torch.equal(got["dgamma"], want["dgamma"])
    schema = str(getattr(torch.ops.coda, f"{ip.op_name}_inplace").default._schema)
    assert f"Tensor(a{ip.inputs.index('dres')}!)" in schema


@pytest.mark.slow
def test_the_inplace_flavour_under_compile_mutates_its_input_with_no_graph_break(build):
    fn, checked = build("b1_dgrad_rmsnorm_bwd")
    _, low = _inputs(checked, 8)
    ip = ops.op(fn.chain, inplace=True)
    want = fn(**low)["dx"]

    def twice(**x):  # two calls into one buffer, as the LM head's chunks
        acc = torch.zeros_like(x["dres"])
        ip(**{**x, "dres": acc})
        return ip(**{**x, "dres": acc})["dx"], acc

    torch._dynamo.reset()
    explained = torch._dynamo.explain(twice)(**low)
    assert explained.graph_break_count == 0
    got, acc = torch.compile(twice, fullgraph=True)(**low)
    eager, _ = twice(**low)
    assert torch.equal(got, eager) and torch.equal(acc, eager)
    # dres = 0 twice plus the same term: 2 x (want - dres)
    term = want.float() - low["dres"].float()
    torch.testing.assert_close(got.float(), 2 * term, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", ["llama_small", "rmsnorm_chain"])
def test_the_inplace_flavour_is_refused_where_it_has_no_meaning(build, name):
    """A chain with a backward section (its add_to inputs are autograd's), or one that
    accumulates into no input, has no inplace flavour: a located refusal, not a mutating op."""
    fn, _ = build(name)
    why = "has a backward section" if name == "llama_small" else "accumulates into no input"
    with pytest.raises(CodaRuntimeError, match=f"inplace: the chain {why}"):
        fn.with_inplace()


# -- what an import loads ------------------------------------------------------------------------

HEAVY = ("coda_spec.check.frontend", "coda_spec.check.validate", "jsonschema", "yaml")


@pytest.mark.slow
def test_import_loads_no_front_end():
    """``import coda_spec.ops`` and ``import coda_spec.nn`` load no spec front end, jsonschema or
    yaml: re-sizing (``ops.resized``), the CPU reference and ``check.target.resolve`` load them when
    used (as the runtime's calls do: ``test_runtime_cpu.py::test_a_call_imports_no_front_end``).
    Before, ``import coda_spec.ops`` loaded 37 coda modules, yaml and jsonschema among them."""
    code = f"""
import sys
heavy = {HEAVY!r}
for mod in ("coda_spec.ops", "coda_spec.nn"):
    __import__(mod)
    bad = sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in heavy))
    assert not bad, (mod, bad)
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
