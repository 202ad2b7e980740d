"""The bench baselines on CPU: right values, right registry. The contract and the
``equivalent_to`` fallback are ``coda_spec.bench.baselines``; the catalogue's eager and Liger
baselines live in the repository, ``benchmarks/baselines/`` (imported as ``benchmarks.baselines``).

* eager, every bundled spec at small dims (``mathcheck.small``), fixed seed: in fp64 each output
  equals the reference interpreter's fp64 value to 1e-6 relative; at the declared dtypes (bf16)
  each output has the declared dtype and shape and is within bf16 rounding; the Llama chains'
  autograd through the eager forward equals the spec's backward outputs.
* the ``equivalent_to`` fallback for a spec outside the catalogue, and its ValueError without one.
* the registries: eager covers exactly the bundled specs (a new spec without a baseline fails
  here), Liger exactly the expected chains, each Liger note naming every output it leaves out.
* Liger numerics: Liger's Triton kernels run on CPU under ``TRITON_INTERPRET=1`` in a subprocess
  (the variable must be set before triton compiles anything), in fp32 (the interpreter does bf16
  arithmetic on raw bits), with two interpreter gaps patched (:func:`_interpreter_patches`). The
  inputs are Llama-structured where Liger assumes so (one inv_freq table per head, v unrotated;
  one q_norm and one k_norm weight), and Liger's layouts are mapped back through
  ``halves_index`` / ``rotate_half_index`` before comparing with the fp64 reference. Not reached
  at these sizes: Liger's block RMSNorm kernel (>= 32768 rows of <= 256 columns, which f7's
  per-head norms use at bench sizes); it was checked once the same way at 32768 rows (20 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache

import pytest
import torch

from benchmarks.baselines import common as baselines
from benchmarks.baselines import liger as liger_mod
from benchmarks.baselines.eager import EAGER
from benchmarks.baselines.liger import LIGER, halves_index, rotate_half_index
from coda_spec.bench import baselines as B
from coda_spec.bench.baselines import FALLBACK, eager, liger
from coda_spec.check.frontend import check_file
from coda_spec.prove.inputs import make_grads, make_inputs
from coda_spec.prove.mathcheck import sizes_of, small
from coda_spec.prove.reference import TORCH_DTYPES, run
from tests.conftest import ROOT, SPECS

IDS = [p.stem for p in SPECS]
SEED = 0
M_LIGER = 16  # rows for the interpreted Liger runs (one interpreted program per row)
LIGER_CHAINS = frozenset(
    {
        "b1_dgrad_rmsnorm_bwd",
        "b2_dgrad_dswiglu",
        "b3_rope_bwd",
        "b4_ce_fwd_bwd",
        "f1_residual_rmsnorm",
        "f2_deferred_norm",
        "f3_norm_swiglu",
        "f4_norm_rope",
        "f5_norm_lmhead_lse",
        "f6_lse",
        "f6_rope",
        "f6_swiglu",
        "f7_qk_norm_rope",
        "f7_qkv_head_sumsq",
        "llama_block",
        "rmsnorm_chain",
    }
)
ROPE_NOTE = "RoPE cos/sin(pos*freqs) tables built once in prepare, outside timing"


@cache
def _small(stem: str):
    return small(check_file(ROOT / "specs" / f"{stem}.yaml"))


def _case(stem: str, m: int | None = None):
    checked = _small(stem)
    return checked, sizes_of(checked) if m is None else sizes_of(checked, m)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    assert got.shape == want.shape
    return float((got - want).norm() / max(float(want.norm()), 1e-300))


def _cast(t: dict, dtype) -> dict:
    return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in t.items()}


def _call(b, tensors: dict) -> dict:
    out = b.fn(b.prepare(tensors) if b.prepare else tensors)
    assert set(out) == set(b.produces)
    return out


# -- eager ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stem", IDS)
def test_eager_equals_reference_fp64(stem):
    checked, sizes = _case(stem)
    _, exact = make_inputs(checked.spec, sizes, SEED)
    want = run(checked.analysis, exact, "fp64", sizes)
    b = eager(checked, sizes)
    assert b.name == "eager"
    assert b.produces == tuple(o.name for o in checked.spec.outputs)
    assert b.note == (ROPE_NOTE if b.prepare else "")
    got = _call(b, exact)
    for name in b.produces:
        assert _rel(got[name], want[name]) <= 1e-6, name


@pytest.mark.slow
@pytest.mark.parametrize("stem", IDS)
def test_eager_at_declared_dtypes(stem):
    checked, sizes = _case(stem)
    low, exact = make_inputs(checked.spec, sizes, SEED)
    want = run(checked.analysis, exact, "fp64", sizes)
    got = _call(eager(checked, sizes), low)
    for o in checked.spec.outputs:
        assert got[o.name].dtype == TORCH_DTYPES[o.dtype], o.name
        assert _rel(got[o.name], want[o.name]) <= 2e-2, o.name  # bf16 rounding, not math


def _backward_check(checked, sizes, b, tol: float) -> None:
    """autograd of ``b``'s forward (leaves made on prepare's output, as the driver does)
    equals the reference backward outputs."""
    _, exact = make_inputs(checked.spec, sizes, SEED)
    _, grads = make_grads(checked.spec, checked.analysis, sizes, SEED + 1)
    want = run(checked.analysis, exact, "fp64", sizes, grads=grads)
    grad_of = dict(checked.spec.backward.grads)
    t = b.prepare(exact) if b.prepare else dict(exact)
    wrt = [o.name for o in checked.spec.backward.outputs]
    leaves = [t[grad_of[n]].detach().requires_grad_(True) for n in wrt]
    t.update({grad_of[n]: leaf for n, leaf in zip(wrt, leaves, strict=True)})
    out = b.fn(t)
    incoming = [g for g in grads if grad_of[g] in out]
    assert incoming == list(grads)  # every incoming gradient lands on an output of fn
    got = torch.autograd.grad(
        [out[grad_of[g]] for g in incoming], leaves, [grads[g] for g in incoming]
    )
    for name, g in zip(wrt, got, strict=True):
        assert _rel(g, want[name]) <= tol, name


LLAMA_STEMS = [
    "llama_block",
    "llama3_first",
    "llama3_layer",
    "llama3_last",
    "llama3_layer_recompute",
    "llama3_last_recompute",
    "llama3_last_mlp",
    "llama3_last_mlp_recompute",
    "qwen2_first",
    "qwen2_layer",
    "qwen2_last_mlp",
]


@pytest.mark.parametrize("stem", LLAMA_STEMS)
def test_eager_llama_autograd_equals_backward(stem):
    checked, sizes = _case(stem)
    _backward_check(checked, sizes, eager(checked, sizes), 1e-6)


# -- the equivalent_to fallback ------------------------------------------------------------------
def _renamed(tmp_path, stem: str, drop_equivalent: bool = False):
    text = (ROOT / "specs" / f"{stem}.yaml").read_text()
    text = text.replace(f"name: {stem}", "name: not_in_catalogue", 1)
    if drop_equivalent:  # the spec's last section: cut from its key to the end
        head, _, tail = text.partition("\nequivalent_to:")
        assert all(line.startswith(" ") for line in tail.splitlines()[1:] if line)
        text = head + "\n"
    path = tmp_path / "not_in_catalogue.yaml"
    path.write_text(text)
    checked = small(check_file(path))
    return checked, sizes_of(checked)


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["f2_deferred_norm", "b2_dgrad_dswiglu", "llama_block"])
def test_fallback_evaluates_equivalent_to(tmp_path, stem):
    checked, sizes = _renamed(tmp_path, stem)
    b = eager(checked, sizes)
    assert b.note == FALLBACK
    assert b.produces == tuple(o.name for o in checked.spec.outputs)
    _, exact = make_inputs(checked.spec, sizes, SEED)
    want = run(checked.analysis, exact, "fp64", sizes)
    got = _call(b, exact)
    for name in b.produces:
        assert _rel(got[name], want[name]) <= 1e-6, name
    if checked.spec.backward is not None:
        _backward_check(checked, sizes, b, 1e-6)


def test_fallback_without_equivalent_to_raises(tmp_path):
    checked, sizes = _renamed(tmp_path, "f2_deferred_norm", drop_equivalent=True)
    assert checked.spec.equivalent_to is None
    with pytest.raises(ValueError, match="not_in_catalogue.*no equivalent_to"):
        eager(checked, sizes)


# -- registries ----------------------------------------------------------------------------------
def test_eager_registry_is_exactly_the_catalogue():
    names = {_small(stem).spec.name for stem in IDS}
    assert names == set(EAGER), "every bundled spec needs an eager baseline (and only those)"
    assert set(LIGER) == LIGER_CHAINS and LIGER_CHAINS <= names


@pytest.mark.parametrize("stem", IDS)
def test_liger_registry(stem):
    pytest.importorskip("liger_kernel")
    checked, sizes = _case(stem)
    b = liger(checked, sizes)
    assert (b is not None) == (stem in LIGER_CHAINS)
    if b is None:
        return
    outputs = [o.name for o in checked.spec.outputs]
    assert b.name == "liger" and set(b.produces) <= set(outputs)
    for name in outputs:
        if name not in b.produces:
            assert f"no {name}" in b.note, name  # the note lists every output left out
    if b.note == "":
        assert b.produces == tuple(outputs) and b.prepare is None


def test_liger_none_without_liger_kernel(monkeypatch):
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # import liger_kernel -> ImportError
    for stem in IDS:
        assert liger(*_case(stem)) is None
    assert eager(*_case("f4_norm_rope")).name == "eager"


def test_liger_none_when_heads_do_not_fit():
    pytest.importorskip("liger_kernel")
    checked, sizes = _case("f4_norm_rope")
    assert liger(checked, {**sizes, "D": 192}) is None  # 192 is not a multiple of 128
    assert liger(checked, sizes) is not None


def test_layout_indices():
    assert halves_index(6).tolist() == [0, 2, 4, 1, 3, 5]
    assert rotate_half_index(10, 8, 4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7, 8, 9]


# -- Liger numerics under the Triton interpreter (subprocess) ------------------------------------
def _interpreter_patches() -> None:
    """Two gaps of triton 3.x's interpreter that Liger's kernels hit: float scalar arguments are
    passed on as Python floats (``eps.to(tl.float32)`` fails), so wrap them as fp32 scalars as
    compiled Triton specializes them; and ``libdevice.rsqrt`` is not interpreted, so route
    Liger's module-level ``rsqrt`` to ``tl.math.rsqrt`` (looked up at call time, once the
    interpreter has patched ``tl.math``)."""
    import liger_kernel.ops.fused_add_rms_norm as fused_add
    import liger_kernel.ops.rms_norm as rms_norm
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    convert = interpreter._implicit_cvt

    def implicit_cvt(arg):
        if isinstance(arg, float):
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return convert(arg)

    def rsqrt(x):
        return tl.math.rsqrt(x)

    interpreter._implicit_cvt = implicit_cvt
    rms_norm.rsqrt = rsqrt
    fused_add.rsqrt = rsqrt


def _llama_structured(checked, sizes, exact: dict, hd: int) -> dict:
    """Inputs laid out as a Llama/Qwen3 model has them, which Liger's ops assume."""
    gen = torch.Generator().manual_seed(SEED + 7)
    t = dict(exact)
    if "pos" in t:  # short sequences: theta = pos * freqs in fp32 stays exact to ~1e-6
        t["pos"] = torch.randint(0, 64, t["pos"].shape, generator=gen, dtype=torch.int32)
    if "freqs" in t:
        inv = torch.rand(hd // 2, generator=gen, dtype=torch.float64)
        width = t["freqs"].shape[0]
        rotated = width if "wn" in t else 2 * sizes["D"] // 2  # f7: every column is q or k
        freqs = torch.zeros(width, dtype=torch.float64)
        freqs[:rotated] = inv.repeat(rotated // (hd // 2))
        t["freqs"] = freqs.float().double()
    if "wn" in t:
        q, k = (torch.randn(hd, generator=gen, dtype=torch.float64) for _ in range(2))
        d, kv = sizes["D"], sizes["KV"]
        t["wn"] = torch.cat((q.repeat(d // hd), k.repeat(kv // hd))).bfloat16().double()
    return t


def _liger_case(stem: str) -> dict:
    """rel err of each Liger output (mapped back to the spec's layout) vs the fp64 reference."""
    checked, sizes = _case(stem, M_LIGER)
    hd = sizes.get("head_dim", liger_mod.ROPE_HEAD_DIM)
    _, exact = make_inputs(checked.spec, sizes, SEED)
    exact = _llama_structured(checked, sizes, exact, hd)
    want = run(checked.analysis, exact, "fp64", sizes)
    b = liger(checked, sizes)
    t32 = _cast(exact, torch.float32)
    got = _call(b, t32)
    d = sizes["D"]
    rope = {
        "f4_norm_rope": ("qkv", 2 * d),
        "f6_rope": ("qkv", 2 * d),
        "b3_rope_bwd": ("dz", 2 * d),
        "llama_block": ("qkv", 2 * d),
        "f7_qk_norm_rope": ("qk", d + sizes.get("KV", 0)),
    }
    index = {}
    for name in ("z", "z1") if stem != "b2_dgrad_dswiglu" else ("dz",):
        if name in want:
            index[name] = halves_index(want[name].shape[1])
    if stem in rope:
        name, rotated = rope[stem]
        index[name] = rotate_half_index(want[name].shape[1], rotated, hd)
    errs = {}
    for name in b.produces:
        ref = want[name][:, index[name]] if name in index else want[name]
        errs[name] = _rel(got[name], ref)
    if stem in ("f5_norm_lmhead_lse", "f6_lse"):  # fn returns nothing; check the loss it makes
        x = liger_mod._liger_rms(t32["h"]) if "h" in t32 else t32["x"]
        loss = liger_mod._liger_lm_loss(x, t32["w_lm"], t32["target"])
        valid = exact["target"] != baselines.IGNORE
        errs["loss"] = _rel(loss, torch.where(valid, want["lse"] - want["target_logit"], 0.0))
    if stem == "llama_block":
        errs.update(_liger_llama_backward(checked, sizes, b, exact, index, hd))
    return errs


def _liger_llama_backward(checked, sizes, b, exact, index, hd) -> dict:
    _, grads = make_grads(checked.spec, checked.analysis, sizes, SEED + 1)
    want = run(checked.analysis, exact, "fp64", sizes, grads=grads)
    grad_of = dict(checked.spec.backward.grads)
    t = b.prepare(_cast(exact, torch.float32))
    wrt = [o.name for o in checked.spec.backward.outputs]
    leaves = [t[grad_of[n]].detach().requires_grad_(True) for n in wrt]
    t.update({grad_of[n]: leaf for n, leaf in zip(wrt, leaves, strict=True)})
    out = b.fn(t)
    d_qkv = grads["d_qkv"][:, index["qkv"]].float()
    got = torch.autograd.grad([out["qkv"], out["x2"]], leaves, [d_qkv, grads["d_x2"].float()])
    rows = {
        "dw_gu": halves_index(2 * sizes["F"]),
        "dw_qkv": rotate_half_index(3 * sizes["D"], 2 * sizes["D"], hd),
    }
    errs = {}
    for name, g in zip(wrt, got, strict=True):
        ref = want[name][rows[name]] if name in rows else want[name]
        errs[f"backward {name}"] = _rel(g, ref)
    return errs


def _liger_main() -> None:
    """Entry point of the subprocess (TRITON_INTERPRET=1): one JSON line of errors per chain."""
    _interpreter_patches()
    result = {}
    for stem in sorted(LIGER_CHAINS):
        try:
            result[stem] = _liger_case(stem)
        except Exception as e:  # noqa: BLE001 - reported per chain by the parent test
            result[stem] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))


@pytest.fixture(scope="module")
def liger_interpreted():
    pytest.importorskip("liger_kernel")
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = "from tests.test_bench_baselines import _liger_main; _liger_main()"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(LIGER_CHAINS))
def test_liger_numerics_interpreted(liger_interpreted, stem):
    errs = liger_interpreted[stem]
    assert isinstance(errs, dict), errs
    assert errs, "nothing compared"
    bad = {k: v for k, v in errs.items() if not v <= 1e-5}
    assert not bad, bad


def test_without_the_catalogue_liger_is_a_clear_error_and_eager_falls_back(monkeypatch, tmp_path):
    """An installed coda has no benchmarks/: liger says where the catalogue lives, eager times
    the spec's equivalent_to and its note says why."""
    from coda_spec.errors import ToolError

    monkeypatch.delitem(sys.modules, B.CATALOGUE)
    monkeypatch.setenv(B.CATALOGUE_ENV, str(tmp_path / "nowhere"))
    checked, sizes = _case("f1_residual_rmsnorm")
    with pytest.raises(ToolError, match="benchmarks/baselines/, not in the installed package"):
        liger(checked, sizes)
    base = eager(checked, sizes)
    assert base.note.startswith(FALLBACK) and "no catalogue baselines" in base.note
    assert B.CATALOGUE not in sys.modules


def test_the_catalogue_loads_by_path_from_the_checkout(monkeypatch):
    """What coda bench does from any folder: the checkout's benchmarks/baselines/, by path."""
    monkeypatch.delitem(sys.modules, B.CATALOGUE)
    monkeypatch.delenv(B.CATALOGUE_ENV, raising=False)
    module = B.catalogue()
    assert module.__file__ == str(ROOT / "benchmarks" / "baselines" / "__init__.py")
    assert set(module.EAGER) == set(EAGER)
