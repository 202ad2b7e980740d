"""``coda_spec.runtime`` without a GPU (CI): validation, the typed manifest (format 9; older
formats and malformed manifests refused at load), inputs read only by
``derive``/``equivalent_to``, and empty calls (M = 0).

No compile: a build directory is a shrunk spec plus the manifest ``coda build`` would write
(``tests.test_verify_cpu.fake_manifest``). The ``cpu`` fixture patches
``coda_spec.runtime.checks.current_device`` to the CPU (so CPU tensors pass the device check),
the GEMM kernel loader (``Launcher.function``) to fail the test (anything that would launch a
GEMM is caught) and the compiled host steps and finalizes to their torch emulation
(``tests.emulate``; a CPU has no cubin to launch). An M = 0 call must run to the end like that,
and agree with the reference interpreter on the documented rule for reductions over nothing
(sum and mean 0, max and logsumexp -inf, per-row statistics empty).
"""

from __future__ import annotations

import json
import math
import re
import struct
import subprocess
import sys

import pytest
import torch

from coda_spec import artifact, runtime
from coda_spec.artifact import eval_shape
from coda_spec.check.frontend import check_source
from coda_spec.check.source import parse_text
from coda_spec.prove.inputs import make_grads, make_inputs
from coda_spec.prove.reference import TORCH_DTYPES
from coda_spec.prove.reference import run as ref_run
from coda_spec.runtime import Chain, CodaRuntimeError, checks, launch
from tests.conftest import ROOT
from tests.emulate import _interpret, emulate, emulate_compiled
from tests.test_verify_cpu import fake_manifest

EXTRA = ROOT / "tests" / "specs_extra"
SHRINK = {"D": 512, "F": 512, "V": 512, "KV": 256}  # static dims, so CPU tensors stay small
LLAMA3 = {"D": 256, "F": 512, "NH": 4, "NKV": 2, "HD": 64, "V": 1024}  # a tiny GQA Llama-3
SPECS = {  # name -> (spec file, the dims to shrink)
    **{p.stem: (p, SHRINK) for p in sorted((ROOT / "specs").glob("*.yaml"))},
    **{p.stem: (p, LLAMA3) for p in sorted((ROOT / "specs").glob("llama3_*.yaml"))},
    "derive_only_inputs": (EXTRA / "derive_only_inputs.yaml", {}),
    "empty_folds": (EXTRA / "empty_folds.yaml", {}),
    "lmhead_ce_bwd": (EXTRA / "lmhead_ce_bwd.yaml", {"D": 128, "V": 512}),
}


def _shrunk(path, dims: dict) -> str:
    """The spec's text with its ``dims:`` line rewritten to smaller static sizes."""
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("dims:"):
            for k, v in dims.items():
                line = re.sub(rf"\b{k}: \d+", f"{k}: {v}", line)
            lines[i] = line
    return "".join(lines)


def make_build(tmp_path, name: str, manifest_edit=None):
    """A build directory (spec.yaml + manifest.json, no library) and its checked spec."""
    path, dims = SPECS[name]
    text = _shrunk(path, dims)
    checked = check_source(parse_text(str(path.relative_to(ROOT)), text))
    d = tmp_path / f"{name}-000000000000"
    d.mkdir()
    (d / "spec.yaml").write_text(text)
    manifest = fake_manifest(checked)
    if manifest_edit is not None:
        manifest_edit(manifest)
    artifact.write_manifest(d, manifest)
    return d, checked


@pytest.fixture
def cpu(monkeypatch):
    """Kernels 'run' on the CPU: the device check accepts CPU tensors, and loading a kernel
    (which only a launch does) fails the test."""
    monkeypatch.setattr(checks, "current_device", lambda: torch.device("cpu"))

    def no_launch(self, symbol):
        raise AssertionError(f"kernel {symbol} would launch")

    monkeypatch.setattr(launch.Launcher, "function", no_launch)
    emulate_compiled(monkeypatch)


def _inputs(checked, m: int, seed: int = 0):
    sizes = {**checked.spec.dim_sizes(), "M": m}
    sizes = {k: v for k, v in sizes.items() if v is not None}
    low, _ = make_inputs(checked.spec, sizes, seed)
    return sizes, low


def _add_to_roots(manifest) -> dict:
    """add_to output -> the tensor it ends up being (chains of them: llama's dx0 accumulates into
    dx2, which accumulated into the incoming d_x2); an input, a gradient or an internal tensor."""
    into = {s.d.tensor: s.add_to for s in manifest.kernel_steps() if s.add_to}
    roots = {}
    for out, t in into.items():
        while t in into:
            t = into[t]
        roots[out] = t
    return roots


# -- M = 0 -----------------------------------------------------------------------------------

EMPTY_CHAINS = [*(p.stem for p in sorted((ROOT / "specs").glob("*.yaml"))), "empty_folds"]


@pytest.mark.parametrize("name", EMPTY_CHAINS)
def test_plan_launches_nothing_at_m0(name, tmp_path):
    """The plan (no device needed): at M = 0 no kernel step launches; at M = 64 all do."""
    d, _ = make_build(tmp_path, name)
    chain = runtime.load(d)
    empty = chain.plan({"M": 0}, backward=True)
    full = chain.plan({"M": 64}, backward=True)
    kernels = [s.name for s in chain.manifest.kernel_steps()]
    assert [n for n, what in empty if what == "no launch"] == kernels
    assert [n for n, what in full if what == "launch"] == kernels
    assert not any(what == "launch" for _, what in empty)
    assert len(empty) == len(chain.manifest.all_steps)


@pytest.mark.parametrize("name", EMPTY_CHAINS)
def test_empty_call(name, tmp_path, cpu):
    """M = 0 runs to the end without a launch (forward, and backward where declared): empty
    outputs of the right shape and dtype, full-shape zero weight/row-vector gradients, add_to
    outputs returned as the (unchanged) tensor they accumulate into, and every output equal to
    the fp64 reference interpreter's (same rule for reductions over nothing)."""
    d, checked = make_build(tmp_path, name)
    chain = runtime.load(d)
    sizes, low = _inputs(checked, 0, seed=3)
    grads = None
    if chain.manifest.backward_steps:
        grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=4)
    env = chain.run(dict(low), grads=dict(grads) if grads else None)
    ref = ref_run(checked.analysis, low, "fp64", sizes, grads=grads)
    outputs = chain.manifest.outputs + (chain.manifest.backward_outputs if grads else ())
    given = {**low, **(grads or {})}
    roots = _add_to_roots(chain.manifest)
    for o in outputs:
        got = env[o.name]
        assert tuple(got.shape) == eval_shape(o.shape, sizes), o.name
        assert got.dtype == TORCH_DTYPES[o.dtype], o.name
        torch.testing.assert_close(got.double(), ref[o.name].double(), rtol=1e-6, atol=0)
        into_given = roots.get(o.name) in given  # then it is that tensor, unchanged (below)
        if "M" not in o.shape and name != "empty_folds" and not into_given:
            assert got.numel() and bool((got == 0).all()), f"{o.name} is not all zero"
        if roots.get(o.name) in given:  # (llama3_last's dx0 accumulates into an internal dx2)
            assert got is given[roots[o.name]], f"{o.name} is not its add_to tensor"


def test_empty_reductions_rule(tmp_path, cpu):
    """The documented values of reductions over nothing, from a launch-free kernel's partials
    through the finalizes: sum 0, mean 0 (not 0/0), rsqrt_mean rsqrt(eps), max / absmax -inf;
    logsumexp per row is empty. The reference interpreter (fp64 and lowp) gives the same."""
    d, checked = make_build(tmp_path, "empty_folds")
    sizes, low = _inputs(checked, 0)
    out = runtime.load(d)(**low)
    n = 256
    want = {
        "y": torch.empty(0, n),
        "s": torch.zeros(n),
        "ms": torch.zeros(n),
        "mx": torch.full((n,), -math.inf),
        "lse": torch.empty(0),
        "amx": torch.full((n,), -math.inf),
        "hr": torch.full((n,), 1e-6**-0.5),
    }
    for precision in (None, "fp64", "lowp"):
        got = out if precision is None else ref_run(checked.analysis, low, precision, sizes)
        for k, v in want.items():
            torch.testing.assert_close(got[k].double(), v.double(), msg=f"{precision} {k}")


def test_reference_empty_reductions_at_m1_are_ordinary(tmp_path):
    """The empty rule touches only empty axes: at M = 1 the same spec's reference reductions
    are the plain values (max of one row is that row)."""
    _, checked = make_build(tmp_path, "empty_folds")
    sizes, low = _inputs(checked, 1)
    ref = ref_run(checked.analysis, low, "fp64", sizes)
    y = low["x"].double() @ low["w"].double().T
    torch.testing.assert_close(ref["mx"], y[0])
    torch.testing.assert_close(ref["s"], y[0])
    torch.testing.assert_close(ref["ms"], y[0] ** 2)


# -- validation, refusals ---------------------------------------------------------------------


def test_no_cuda_is_a_runtime_error(tmp_path, monkeypatch):
    d, checked = make_build(tmp_path, "rmsnorm_chain")
    _, low = _inputs(checked, 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(CodaRuntimeError, match="no CUDA device"):
        runtime.load(d)(**low)


def _bad(x: torch.Tensor, how: str):
    if how == "dtype":
        return x.float() if x.dtype != torch.float32 else x.bfloat16()
    if how == "rank":
        return x.reshape(-1)
    if how == "stride":
        wide = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype)
        return wide[..., ::2]
    if how == "alignment":
        flat = torch.zeros(x.numel() + 1, dtype=x.dtype)
        return flat[1:].view(x.shape)
    if how == "device":
        return x.to("meta")
    if how == "sparse":
        return x.to_sparse()
    if how == "type":
        return x.tolist()
    raise ValueError(how)


@pytest.mark.parametrize(
    "how, fragment",
    [
        ("dtype", "expected bf16"),
        ("rank", "has shape"),
        ("stride", "not contiguous"),
        ("alignment", "16-byte aligned"),
        ("device", "kernels run on cpu"),
        ("sparse", "kernels take dense ones"),
        ("type", "not a torch.Tensor"),
    ],
)
def test_bad_input_is_refused(how, fragment, tmp_path, cpu):
    d, checked = make_build(tmp_path, "rmsnorm_chain")
    _, low = _inputs(checked, 8)
    low["x"] = _bad(low["x"], how)
    with pytest.raises(CodaRuntimeError, match=fragment):
        runtime.load(d).bind(low)


def test_inconsistent_dynamic_dim_is_refused(tmp_path, cpu):
    d, checked = make_build(tmp_path, "rmsnorm_chain")
    _, low = _inputs(checked, 8)
    low["x"] = low["x"][:7].clone()
    with pytest.raises(CodaRuntimeError, match="dim 0 is 7 but M is 8 elsewhere"):
        runtime.load(d).bind(low)


def test_static_dim_expressions_are_checked(tmp_path, cpu):
    """A shape like [2*F, D] is folded, not bound like a dynamic dim: a w_next two rows short
    (with a dz to match, so nothing else disagrees) is refused."""
    d, checked = make_build(tmp_path, "b1_dgrad_rmsnorm_bwd")  # F = 512: 2*F = 1024
    _, low = _inputs(checked, 8)
    assert tuple(low["w_next"].shape) == (1024, 512)
    low["w_next"] = low["w_next"][:-8].clone()
    low["dz"] = low["dz"][:, :-8].clone()
    with pytest.raises(CodaRuntimeError, match="input 'dz' dim 1 is 1016; expected 1024"):
        runtime.load(d).bind(low)


def test_refusal_happens_before_any_step(tmp_path, cpu, monkeypatch):
    """A bad gradient is refused before the forward runs (b1-style add_to inputs would
    otherwise already be written in place); no step runs at all."""
    d, checked = make_build(tmp_path, "llama_block")
    sizes, low = _inputs(checked, 0)
    grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=1)
    ran = []
    monkeypatch.setattr(Chain, "_steps", lambda self, *a: ran.append(a))
    chain = runtime.load(d)
    for bad in ({k: v for k, v in grads.items() if k != "d_x2"}, {**grads, "extra": grads["d_x2"]}):
        with pytest.raises(CodaRuntimeError, match="backward needs gradients"):
            chain.run(dict(low), grads=bad)
    with pytest.raises(CodaRuntimeError, match="gradient 'd_x2' is torch.float32"):
        chain.run(dict(low), grads={**grads, "d_x2": grads["d_x2"].float()})
    assert ran == []


def test_grads_for_a_chain_without_backward(tmp_path, cpu):
    d, checked = make_build(tmp_path, "rmsnorm_chain")
    _, low = _inputs(checked, 0)
    with pytest.raises(CodaRuntimeError, match="no backward section"):
        runtime.load(d).run(low, grads={})


def test_size_one_dims_get_canonical_strides():
    """torch calls (1, D) with strides (1, 1) contiguous; the kernels get (D, 1)."""
    x = torch.zeros(8, 1, dtype=torch.bfloat16).T
    assert x.is_contiguous() and x.stride() == (1, 1)
    y = checks.canonical(x)
    assert y.stride() == (8, 1) and y.data_ptr() == x.data_ptr()
    z = torch.zeros(4, 8)
    assert checks.canonical(z) is z
    assert checks.dense_strides((0, 5)) == torch.empty(0, 5).stride()
    assert checks.dense_strides((3, 0, 2)) == torch.empty(3, 0, 2).stride()


# -- manifest format 6 and inputs no step reads -----------------------------------------------


def test_manifest_marks_required_inputs(tmp_path):
    d, _ = make_build(tmp_path, "derive_only_inputs")
    m = json.loads((d / "manifest.json").read_text())
    assert m["format"] == artifact.FORMAT_VERSION == 9
    required = {i["name"]: i["required"] for i in m["inputs"]}
    assert required == {
        "x": False,
        "gamma": False,
        "h": True,
        "r": True,
        "ms": False,
        "w": True,
    }
    assert runtime.load(d).required_inputs == ["h", "r", "w"]


def test_bundled_specs_require_what_their_steps_read(tmp_path):
    """b1's derived r and zdz are read by its kernel: required. llama_block's y is read by the
    forward GEMM and the backward wgrad: required."""
    d, _ = make_build(tmp_path, "b1_dgrad_rmsnorm_bwd")
    m = json.loads((d / "manifest.json").read_text())
    assert all(i["required"] for i in m["inputs"])


def test_a_manifest_without_a_compiled_finalize_is_refused(tmp_path):
    """A finalize (or host step) without its compiled kernel is refused at load: the runtime
    has no torch fallback."""

    def drop_launch(m):
        step = next(s for s in m["steps"] if s["kind"] == "finalize")
        del step["launch"]

    d, _ = make_build(tmp_path, "rmsnorm_chain", drop_launch)
    with pytest.raises(CodaRuntimeError, match="finalize step 'finalize_r' has no compiled"):
        runtime.load(d)


@pytest.mark.parametrize("fmt", [1, 2, 5, 6, 7, 10, None])
def test_unknown_manifest_format_is_refused(fmt, tmp_path):
    def edit(m):
        m["format"] = fmt

    d, _ = make_build(tmp_path, "rmsnorm_chain", edit)
    with pytest.raises(ValueError, match="rebuild with this coda"):
        runtime.load(d)


@pytest.mark.parametrize("where", ["top", "step", "variant"])
def test_a_malformed_manifest_names_what_is_missing(where, tmp_path):
    """The manifest is read once into typed records: a missing entry is one ValueError naming
    the file and the entry, at load, never a KeyError in the middle of a call."""

    def edit(m):
        kernel = next(s for s in m["steps"] if s["kind"] == "kernel")
        if where == "top":
            del m["tensors"]
        elif where == "step":
            del kernel["mode"]
        else:
            del kernel["variants"][0]["name"]

    d, _ = make_build(tmp_path, "rmsnorm_chain", edit)
    missing = {"top": "tensors", "step": "mode", "variant": "name"}[where]
    with pytest.raises(artifact.ManifestError, match=rf"manifest.json: .*'{missing}'.*rebuild"):
        runtime.load(d)


def test_a_chain_has_a_readable_repr(tmp_path):
    d, _ = make_build(tmp_path, "rmsnorm_chain")
    text = repr(runtime.load(d, tuned=False))
    assert text.startswith("<coda Chain rmsnorm_chain at ") and str(d) in text
    assert "2 kernel, 1 finalize" in text and "inputs y, w_o, x, gamma, w_up" in text
    assert "outputs x1, r, out" in text and "M=dynamic" in text


def test_derive_only_inputs_are_optional_and_ignored(tmp_path, cpu):
    """Inputs no step reads may be left out; passed anyway -- even as garbage -- they are
    ignored (not validated, not in the env); an unknown name is still an error."""
    d, checked = make_build(tmp_path, "derive_only_inputs")
    chain = runtime.load(d)
    sizes, low = _inputs(checked, 0)
    needed = {k: low[k] for k in ("h", "r", "w")}
    assert chain.bind(dict(needed)) == {"M": 0, "D": 256, "F": 512}
    out = chain(**needed)
    assert tuple(out["out"].shape) == (0, 512) and out["out"].dtype == torch.bfloat16
    garbage = {"x": "not a tensor", "gamma": torch.zeros(3, dtype=torch.int64), "ms": None}
    env = chain.run({**needed, **garbage})
    assert not set(garbage) & set(env)
    full = chain.run(dict(low))  # what verify passes: every input, derived ones included
    assert "x" not in full and tuple(full["out"].shape) == (0, 512)
    with pytest.raises(CodaRuntimeError, match="unknown input"):
        chain(**needed, bogus=low["x"])
    with pytest.raises(CodaRuntimeError, match=r"missing input\(s\) \['r'\]"):
        chain(h=low["h"], w=low["w"], x=low["x"])
    # at M > 0 the same inputs bind (the launch itself needs a GPU)
    _, low8 = _inputs(checked, 8)
    assert chain.bind({k: low8[k] for k in ("h", "r", "w")})["M"] == 8


def test_derive_only_inputs_reference_and_equivalence(tmp_path):
    """The spec is honest: its kernel math (from the derived h, r) equals equivalent_to."""
    from coda_spec.prove.equivalence import check_equivalence

    _, checked = make_build(tmp_path, "derive_only_inputs")
    results = check_equivalence(checked, {"M": 16, "D": 256, "F": 512}, seed=0)
    assert results and all(c.rel_err <= 1e-9 for c in results)


def test_backward_needs_required_inputs_only(tmp_path, cpu):
    d, checked = make_build(tmp_path, "llama_block")
    sizes, low = _inputs(checked, 0)
    grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=1)
    chain = runtime.load(d)
    env = chain.run(dict(low))
    out = chain.backward(env, **grads)
    assert set(out) == {o.name for o in chain.manifest.backward_outputs}
    env.pop("y")
    with pytest.raises(CodaRuntimeError, match=r"saved forward tensors .*missing \['y'\]"):
        chain.backward(env, **grads)


# -- what a call imports -------------------------------------------------------------------------

FRONT_END = (
    "yaml",
    "jsonschema",
    "cutlass",
    "quack",
    "triton",
    "coda_spec.check.frontend",
    "coda_spec.check.source",
    "coda_spec.check.validate",
    "coda_spec.check.normalize",
    "coda_spec.check.analyze",
    "coda_spec.prove.reference",
    "coda_spec.primitives",
    "coda_spec.lower",
    "coda_spec.verify",
    "coda_spec.bench",
)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama_block", "b4_ce_fwd_bwd", "rmsnorm_chain"])
def test_a_call_imports_no_front_end(name, tmp_path):
    """``import coda_spec.runtime``, ``load`` and forward+backward calls (M = 0 on the CPU)
    import neither the front end (yaml, jsonschema, the spec loader, validation, analysis),
    nor the reference interpreter and primitive registry, nor any compiler."""
    d, checked = make_build(tmp_path, name)
    sizes, low = _inputs(checked, 0)
    grads = None
    if checked.spec.backward is not None:
        grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=1)
    torch.save({"inputs": low, "grads": grads}, tmp_path / "call.pt")
    code = f"""
import sys, torch
from coda_spec import runtime
runtime.checks.current_device = lambda: torch.device("cpu")
from coda_spec.runtime import cubin
cubin.Cubin.launch = lambda self, *a: None  # a CPU has no driver; outputs stay as allocated
chain = runtime.load({str(d)!r}, tuned=False)
call = torch.load({str(tmp_path / "call.pt")!r})
env = chain.run(call["inputs"], grads=call["grads"])
chain(**call["inputs"])
chain(check=False, **call["inputs"])
if call["grads"]:
    chain.backward(env, **call["grads"])
bad = sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in {FRONT_END!r}))
assert not bad, bad
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


# -- the launch plan -------------------------------------------------------------------------


def test_refuses_a_gpu_that_is_not_sm90(tmp_path, monkeypatch):
    d, _ = make_build(tmp_path, "rmsnorm_chain")
    chain = runtime.load(d, tuned=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(CodaRuntimeError, match=r"sm_90a kernels .*A100-SXM4-80GB is sm_80"):
        chain._launcher.sm_count(torch.device("cuda", 0))


def test_unchecked_call_keeps_the_m0_guard(tmp_path, cpu):
    d, checked = make_build(tmp_path, "llama_block")
    chain = runtime.load(d, tuned=False)
    sizes, low = _inputs(checked, 0)
    grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=1)
    out = chain(check=False, **low)
    assert {k: tuple(v.shape) for k, v in out.items()} == {
        o.name: eval_shape(o.shape, sizes) for o in chain.manifest.outputs
    }
    env = chain.run(dict(low), grads=grads, check=False)
    assert tuple(env["dw_qkv"].shape) == tuple(low["w_qkv"].shape)
    assert not env["dw_qkv"].any()  # a weight gradient over zero rows


def test_a_signature_is_validated_once(tmp_path, cpu, monkeypatch):
    """The second call with the same dtypes, shapes and strides skips the per-tensor checks;
    a new signature is checked in full (and still refused when wrong)."""
    d, checked = make_build(tmp_path, "rmsnorm_chain")
    chain = runtime.load(d, tuned=False)
    _, low = _inputs(checked, 0)
    seen = []
    real = checks.Checker.one
    monkeypatch.setattr(
        checks.Checker, "one", lambda self, n, *a: seen.append(n) or real(self, n, *a)
    )
    chain(**low)
    first = len(seen)
    chain(**{k: v.clone() for k, v in low.items()})
    assert first == len(chain.required_inputs) and len(seen) == first
    bad = dict(low, gamma=low["gamma"].float())
    with pytest.raises(CodaRuntimeError, match="input 'gamma' is torch.float32"):
        chain(**bad)


def test_a_call_leaves_no_state_on_the_chain(tmp_path, cpu):
    """Per-call values (poison, sizes, partials, the device) live in the call, not on the
    chain: its attributes are the same before and after a poisoned call."""
    d, checked = make_build(tmp_path, "llama_block")
    chain = runtime.load(d, tuned=False)
    sizes, low = _inputs(checked, 0)
    grads, _ = make_grads(checked.spec, checked.analysis, sizes, seed=1)
    chain.run(dict(low), grads=dict(grads))
    before = sorted(vars(chain))
    chain.run(dict(low), grads=dict(grads), poison=True)
    assert sorted(vars(chain)) == before and not hasattr(chain, "_poison")


def test_saved_is_the_spec_save_list(tmp_path):
    d, checked = make_build(tmp_path, "llama_block")
    chain = runtime.load(d, tuned=False)
    assert sorted(chain.saved) == sorted(checked.spec.backward.save)


def test_cubin_launch_packs_its_arguments(tmp_path, monkeypatch):
    """The driver reads each kernel argument through its pointer: pointers as 8 bytes, i32 and
    fp32 as 4, Triton's scratch pointers NULL; an empty grid launches nothing."""
    import ctypes
    import struct

    from coda_spec.runtime import cubin as driver

    entry = artifact.Cubin("k.cubin", "k", num_warps=4, shared=0)
    cubin = driver.Cubin(tmp_path, entry, ("*bf16", "i32", "fp32", "*fp32"), hidden=2)
    seen = []

    class Driver:
        def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            vals = [
                struct.unpack(code, ctypes.string_at(params[i], struct.calcsize(code)))[0]
                for i, code in enumerate("QifQQQ")
            ]
            seen.append(((gx, gy, gz), (bx, by, bz), shared, stream.value, vals))
            return 0

    monkeypatch.setattr(cubin, "_function", lambda device: (Driver(), None))
    cubin.launch(0, 1234, (5,), (0x1000, 7, 2.5, 0x2010))
    cubin.launch(0, 1234, (0,), (0x1000, 7, 2.5, 0x2010))
    assert seen == [((5, 1, 1), (128, 1, 1), 0, 1234, [0x1000, 7, 2.5, 0x2010, 0, 0])]


def test_turns_table_is_not_keyed_by_address(tmp_path):
    """Two frequency tensors at one address (a freed tensor's memory reused by the next, as the
    caching allocator does) get their own tables; an in-place update recomputes one."""
    d, _ = make_build(tmp_path, "f6_rope")
    chain = runtime.load(d, tuned=False)
    buf = bytearray(struct.pack("4f", 0.5, 0.25, 0.125, 0.0625))
    first = torch.frombuffer(buf, dtype=torch.float32)
    want_first = launch.turns_table(first.clone())
    assert torch.equal(chain._launcher.turns(first), want_first)
    buf[:] = struct.pack("4f", 0.9, 0.8, 0.7, 0.6)  # same memory, new contents, new tensor
    second = torch.frombuffer(buf, dtype=torch.float32)
    assert second.data_ptr() == first.data_ptr() and second._version == first._version
    assert torch.equal(chain._launcher.turns(second), launch.turns_table(second.clone()))
    second.mul_(2.0)  # in place: the version counter moves
    assert torch.equal(chain._launcher.turns(second), launch.turns_table(second.clone()))


def _columns_field(tmp_path):
    """(chain, its kernel's column-table field) of a small lmhead_ce_bwd build."""
    d, _ = make_build(tmp_path, "lmhead_ce_bwd")
    chain = runtime.load(d, tuned=False)
    [step] = chain.manifest.kernel_steps()
    [f] = [f for f in step.fields if f.role == "columns"]
    assert (f.tensor, f.shape, f.dtype) == ("", (1, "V"), "fp32")
    return chain, f


def _bind(chain, f, sizes, cache=True):
    call = launch.Call(torch.device("cpu"), sizes, {}, cache=cache)
    made: dict = {}
    table = chain._launcher.field(chain._plan, f, call, made)
    assert made == {} and call.env == {}  # a table is no chain tensor
    return table


def test_the_column_table_is_made_once_per_n_and_device(tmp_path):
    """A kernel's column table is fp32 0 .. N - 1 as (1, N), at the call's N (a re-sized
    build's too), made at its first use and kept for the next calls."""
    chain, f = _columns_field(tmp_path)
    first = _bind(chain, f, {"M": 7, "D": 128, "V": 512})
    assert first.shape == (1, 512) and first.dtype == torch.float32
    assert torch.equal(first[0], torch.arange(512, dtype=torch.float32))
    assert _bind(chain, f, {"M": 3, "D": 128, "V": 512}) is first  # kept: no new allocation
    other = _bind(chain, f, {"M": 7, "D": 128, "V": 488})  # re-sized V
    assert torch.equal(other[0], torch.arange(488, dtype=torch.float32))
    assert _bind(chain, f, {"M": 7, "D": 128, "V": 512}) is first


def test_a_call_that_keeps_nothing_makes_a_temporary_table(tmp_path, monkeypatch):
    """A torch op's call (``cache=False``) and a call on a capturing stream keep no table they
    make: it is a temporary of the call (under capture, a node of the graph, filled at every
    replay). A kept table (made by an eager call) is read by both: it never changes."""
    chain, f = _columns_field(tmp_path)
    sizes = {"M": 7, "D": 128, "V": 512}
    a, b = _bind(chain, f, sizes, cache=False), _bind(chain, f, sizes, cache=False)
    assert a is not b and torch.equal(a, b) and chain._launcher._columns == {}
    monkeypatch.setattr(launch, "_capturing", lambda device: True)
    c, d = _bind(chain, f, sizes), _bind(chain, f, sizes)
    assert c is not d and torch.equal(c, a) and chain._launcher._columns == {}
    monkeypatch.setattr(launch, "_capturing", lambda device: False)
    kept = _bind(chain, f, sizes)
    assert _bind(chain, f, sizes) is kept and _bind(chain, f, sizes, cache=False) is kept
    monkeypatch.setattr(launch, "_capturing", lambda device: True)
    assert _bind(chain, f, sizes) is kept


def test_a_turns_table_under_capture_is_made_from_the_frequencies_each_time(tmp_path, monkeypatch):
    """RoPE's turns table follows the frequency tensor it is made from: under a capture it is
    never a kept one (the graph must recompute it from the frequencies copied in before each
    replay), and none made there is kept."""
    d, _ = make_build(tmp_path, "f6_rope")
    chain = runtime.load(d, tuned=False)
    [step] = chain.manifest.kernel_steps()
    [f] = [f for f in step.fields if f.transform == "turns_table"]
    sizes = {**chain.manifest.static, "M": 4}
    freqs = torch.rand(chain._plan.field_shape(f, sizes)[1] // 2)  # one per column pair
    call = launch.Call(torch.device("cpu"), sizes, {f.tensor: freqs})
    kept = chain._launcher.field(chain._plan, f, call, {})
    assert chain._launcher.field(chain._plan, f, call, {}) is kept
    monkeypatch.setattr(launch, "_capturing", lambda device: True)
    fresh = chain._launcher.field(chain._plan, f, call, {})
    assert fresh is not kept and torch.equal(fresh, kept)
    assert len(chain._launcher._tables) == 1


def test_a_gemm_wider_than_fp32_indices_is_refused_before_allocating():
    with pytest.raises(CodaRuntimeError, match="column indices are fp32, exact up to 16777216"):
        launch.column_table(2**24 + 1, torch.device("meta"))
    assert launch.column_table(2**24, torch.device("meta")).shape == (1, 2**24)


# -- store ... over: one buffer for a host step's output and the tile it overwrites -------------


def _launch_in_torch(monkeypatch):
    """Host steps go through ``Launcher.compiled`` (its output binding and poison), their cubin
    launch replaced by the torch emulation writing into the buffers the runtime bound; GEMM
    kernels and finalizes run in torch (``tests.emulate``)."""
    emulate(monkeypatch)

    def run_host(self, step, call):
        def write(device, stream, grid, args):  # the kernel: into the bound buffers, in place
            work = _interpret(self, step, call)
            for name in step.writes:
                call.env[name].copy_(work[name].reshape(call.env[name].shape))

        for cubin in self._launcher.cubins[step.name]:
            if cubin is not None:
                monkeypatch.setattr(cubin, "launch", write)
        self._launcher.compiled(self._plan, step, call)

    monkeypatch.setattr(Chain, "_host", run_host)


def test_a_store_over_writes_into_the_buffer_it_overwrites(tmp_path, monkeypatch):
    """llama3_lm_head's ce_fwd_bwd stores dlogits over the logits: the manifest's launch output
    says so, the runtime binds dlogits to the logits' buffer (no allocation of its own, and no
    NaN poison: the buffer holds the logits the step reads), and the outputs are those of a run
    with a buffer each (bit for bit) and of the reference interpreter."""
    monkeypatch.setattr(checks, "current_device", lambda: torch.device("cpu"))
    d, checked = make_build(tmp_path, "llama3_lm_head")
    chain = runtime.load(d)
    outs = [o for s in chain.manifest.steps if s.kind == "host" for o in s.launch.outputs]
    assert [(o.tensor, o.over) for o in outs if o.over] == [("dlogits", "logits")]
    sizes, low = _inputs(checked, 40, seed=5)
    fresh = lambda: {k: v.clone() for k, v in low.items()}  # noqa: E731 - dw_acc is added into
    emulate(monkeypatch)  # every step in torch, each output a buffer of its own
    apart = chain.run(fresh())
    _launch_in_torch(monkeypatch)
    env = chain.run(fresh(), poison=True)
    assert env["dlogits"].data_ptr() == env["logits"].data_ptr()
    assert apart["dlogits"].data_ptr() != apart["logits"].data_ptr()
    torch.testing.assert_close(env["dlogits"], apart["dlogits"], rtol=0, atol=0)
    ref = ref_run(checked.analysis, low, "lowp", sizes)
    for o in chain.manifest.outputs:
        torch.testing.assert_close(env[o.name], apart[o.name], rtol=0, atol=0, msg=o.name)
        assert bool(torch.isfinite(env[o.name]).all()), o.name
        # the reference rounds in its own order: within two bf16 spacings of values near 1
        torch.testing.assert_close(env[o.name].double(), ref[o.name].double(), rtol=2e-2, atol=8e-3)
