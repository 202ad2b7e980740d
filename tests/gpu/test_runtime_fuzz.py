"""Runtime fuzzing on a real GPU (marker ``gpu``; skipped without CUDA or without the builds).

Builds needed (made here, carried to the GPU machine): ``build/<chain>-latest`` for each of
rmsnorm_chain, f5_norm_lmhead_lse, b1_dgrad_rmsnorm_bwd and llama_block
(``coda build specs/<chain>.yaml``); a chain without its build fails, naming that command. Run with

    python -m pytest tests/gpu/test_runtime_fuzz.py -q -rA

(the one-line summary per chain is printed even without ``-s``).

Per chain, a fixed seed drives ~20 calls with random M (0, 1, small odd, ragged, and one
16384 + 37), fresh random inputs (``coda_spec.prove.inputs`` on the GPU), random layouts of some
inputs
(aligned offset views, non-contiguous and transposed views, misaligned views, requires_grad)
and sometimes one defect (wrong dtype, a CPU tensor, a wrong M or static dim, a missing, unknown
or non-tensor input); llama_block calls run forward only or forward + backward, with the incoming
gradients fuzzed the same way. The test predicts from the documented contract
(``coda_spec.runtime``) whether a call is valid, then:

* a valid call must be accepted, and every output (backward ones too) must have its declared
  shape and dtype, be finite, and lie within verify's bound of the fp64 reference on the same
  values: ``max|out - ref| <= 2 * max|ref_lowp - ref| + floor`` (floor = 1e-5 * max|ref| for fp32
  outputs); ``add_to`` outputs must share memory with the tensor passed in;
* an invalid call must raise ``CodaRuntimeError`` (any other exception fails the test) and write
  nothing (every passed tensor keeps its values); then a known-good call (M = 64, checked
  against its reference) must still work;
* at the end ``torch.cuda.synchronize()`` must succeed (no illegal memory access).

The M = 0 tests check the empty-call rule on the GPU: no kernel loaded or launched, empty
outputs of the right shape, full-shape zero gradients, ``add_to`` outputs returned as the
(unchanged) tensor they accumulate into.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from tests.conftest import need_build

pytestmark = pytest.mark.gpu

CHAINS = ["rmsnorm_chain", "f5_norm_lmhead_lse", "b1_dgrad_rmsnorm_bwd", "llama_block"]
SEED = 20261201
M_SCHEDULE = [0, 0, 0, 1, 1, 2, 3, 7, 17, 63, 127, 129, 255, 257, 1000, 1001, 2047, 4099]
LARGE_M = 16384 + 37  # once per chain
GOOD_M = 64
OTHER_DEVICE = "cpu"  # where the "cpu" defect moves a tensor
LAYOUTS = ("offset", "misaligned", "noncontig", "transposed", "requires_grad")
VALID_LAYOUTS = ("offset", "requires_grad")  # for the calls that must be accepted
DEFECTS = ("dtype", "cpu", "wrong_m", "wrong_static", "missing", "extra", "nontensor")
REASONS = (  # refusal message fragment -> reason (coda_spec.runtime's messages)
    ("refused its arguments", "ffi"),  # a validation gap: must never happen
    ("missing input", "missing"),
    ("unknown input", "unknown"),
    ("backward needs gradients", "grads"),
    ("not a torch.Tensor", "type"),
    ("kernels take dense", "layout"),
    ("kernels run on", "device"),
    ("elsewhere", "dynamic-dim"),
    ("has shape", "rank"),
    ("not contiguous", "contiguity"),
    ("16-byte aligned", "alignment"),
)


def _reason(msg: str) -> str:
    for fragment, reason in REASONS:
        if fragment in msg:
            return reason
    if re.search(r"is torch\.\w+; expected", msg):
        return "dtype"
    if re.search(r"dim \d+ is \d+; expected", msg):
        return "static-dim"
    return "other"


def _build_dir(name):
    return need_build(name)


class Harness:
    """One built chain, its contract, inputs, references and the pass rule."""

    def __init__(self, name: str):
        import torch

        from coda_spec import load, runtime

        self.torch = torch
        self.chain = load(_build_dir(name))
        self.checked = self.chain.checked()
        m = self.chain.manifest
        self.inputs = {t.name: t for t in m.inputs}
        self.required = self.chain.required_inputs
        self.grads_in = {t.name: t for t in m.grads_in}
        self.has_backward = bool(m.backward_steps)
        self.static = m.static
        self.dynamic = [k for k, v in m.dims.items() if v is None]
        self.dev = runtime.checks.current_device()  # torch's current CUDA device
        into = {s.d.tensor: s.add_to for s in m.kernel_steps() if s.add_to}
        self.add_to = {}
        for out, t in into.items():
            while t in into:
                t = into[t]
            self.add_to[out] = t

    def sizes(self, m: int) -> dict:
        return {**self.static, **{k: m for k in self.dynamic}}

    def outputs(self, backward: bool) -> list[dict]:
        m = self.chain.manifest
        return list(m.outputs + (m.backward_outputs if backward else ()))

    def draw(self, m: int, seed: int, backward: bool):
        from coda_spec.prove.inputs import make_grads, make_inputs

        sizes = self.sizes(m)
        low, _ = make_inputs(self.checked.spec, sizes, seed, device=self.dev)
        grads = None
        if backward:
            grads, _ = make_grads(
                self.checked.spec, self.checked.analysis, sizes, seed + 1, device=self.dev
            )
        return sizes, low, grads

    def reference(self, sizes, low, grads) -> dict:
        """name -> (ref in fp64, ref_lowp) for every output the call returns."""
        from coda_spec.prove.reference import run

        names = [o.name for o in self.outputs(grads is not None)]
        ref = run(self.checked.analysis, low, "fp64", sizes, grads=grads)
        ref = {n: ref[n] for n in names}
        lowp = run(self.checked.analysis, low, "lowp", sizes, grads=grads)
        return {n: (ref[n], lowp[n].double()) for n in names}

    def problems(self, env: dict, expected: dict, sizes: dict) -> list[str]:
        """Every way the outputs in ``env`` break the pass rule (empty: they pass)."""
        from coda_spec.artifact import eval_shape
        from coda_spec.prove.reference import TORCH_DTYPES

        torch = self.torch
        decl = {o.name: o for o in self.outputs(True)}
        bad = []
        for name in expected:
            o, got = decl[name], env[name]
            if tuple(got.shape) != eval_shape(o.shape, sizes):
                bad.append(f"{name}: shape {tuple(got.shape)}")
                continue
            if got.dtype != TORCH_DTYPES[o.dtype]:
                bad.append(f"{name}: dtype {got.dtype}")
                continue
            ref, lowp = expected[name]
            got = got.double()
            if not bool(torch.isfinite(got).all()):
                bad.append(f"{name}: {int((~torch.isfinite(got)).sum())} non-finite element(s)")
                continue
            if not got.numel():
                continue
            err = float((got - ref).abs().max())
            floor = 1e-5 * float(ref.abs().max()) if o.dtype == "fp32" else 0.0
            bound = 2 * float((lowp - ref).abs().max()) + floor
            if not err <= bound:
                bad.append(f"{name}: max|out - ref| {err:.3e} > bound {bound:.3e}")
        return bad

    # -- the contract, as documented (independent of the runtime's code) ---------------------
    def tensor_ok(self, x, decl: dict, sizes: dict) -> bool:
        from coda_spec.dims import evaluate
        from coda_spec.prove.reference import TORCH_DTYPES

        torch = self.torch
        return (
            isinstance(x, torch.Tensor)
            and x.layout == torch.strided
            and x.device == self.dev
            and x.dtype == TORCH_DTYPES[decl.dtype]
            and tuple(x.shape) == tuple(evaluate(d, sizes) for d in decl.shape)
            and x.is_contiguous()
            and x.data_ptr() % 16 == 0
        )

    def valid(self, call: dict, gcall: dict | None, sizes: dict) -> bool:
        if set(call) - set(self.inputs) or any(n not in call for n in self.required):
            return False
        if not all(self.tensor_ok(call[n], self.inputs[n], sizes) for n in self.required):
            return False
        if gcall is not None:
            if set(gcall) != set(self.grads_in):
                return False
            if not all(self.tensor_ok(gcall[n], self.grads_in[n], sizes) for n in gcall):
                return False
        return True


def _relayout(torch, x, how: str, rng: random.Random):
    """The same values in another memory layout (fresh memory, never aliasing ``x``)."""
    if how == "offset":  # a view at a 16-byte-aligned offset into a larger buffer: valid
        k = (16 // x.element_size()) * rng.randint(1, 8)
        y = torch.empty(x.numel() + k, dtype=x.dtype, device=x.device)[k:].view(x.shape)
    elif how == "misaligned":  # one element in: not 16-byte aligned
        y = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:].view(x.shape)
    elif how == "noncontig" or (how == "transposed" and x.dim() != 2):
        wide = torch.empty(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
        y = wide[..., ::2]
    elif how == "transposed":  # column-major storage of a row-major shape
        return x.T.contiguous().T
    elif how == "requires_grad":
        return x.detach().clone().requires_grad_(x.is_floating_point())
    else:
        raise ValueError(how)
    y.copy_(x)
    return y


def _defect(torch, h: Harness, target: dict, decls: dict, kind: str, rng: random.Random):
    """Make one input (or gradient) of ``target`` wrong in the ``kind`` way; returns what."""
    names = [n for n in decls if n in target]
    if kind == "extra":
        target["bogus_input"] = target[names[0]]
        return "extra: bogus_input"
    name = rng.choice(names)
    decl = decls[name]
    x = target[name]
    if kind == "missing":
        del target[name]
    elif kind == "nontensor":
        target[name] = rng.choice([None, 1.0, "tensor", [1, 2]])
    elif kind == "cpu":
        target[name] = x.to(OTHER_DEVICE)
    elif kind == "dtype":
        other = {torch.bfloat16: torch.float32, torch.float32: torch.bfloat16}
        target[name] = x.to(other.get(x.dtype, torch.int64))
    elif kind in ("wrong_m", "wrong_static"):
        shape = list(x.shape)
        axes = [
            i
            for i, d in enumerate(decl.shape)
            if (d in h.dynamic) == (kind == "wrong_m") and isinstance(d, str)
        ]
        if not axes:
            del target[name]
            return f"missing: {name} (no axis for {kind})"
        i = rng.choice(axes)
        shape[i] = shape[i] + 1 if kind == "wrong_m" else shape[i] - 8
        target[name] = torch.zeros(shape, dtype=x.dtype, device=x.device)
    return f"{kind}: {name}"


def _clone(d):
    return None if d is None else {k: v.clone() for k, v in d.items()}


@pytest.mark.parametrize("name", CHAINS)
def test_runtime_fuzz(name, capsys):
    import torch

    from coda_spec.runtime import CodaRuntimeError

    h = Harness(name)
    rng = random.Random(f"{SEED}-{name}")
    torch.manual_seed(SEED)
    good_sizes, good, good_grads = h.draw(GOOD_M, SEED, h.has_backward)
    good_ref = h.reference(good_sizes, good, good_grads)

    def known_good(when: str):
        env = h.chain.run(_clone(good), grads=_clone(good_grads))
        bad = h.problems(env, good_ref, good_sizes)
        assert not bad, f"{name}: the known-good call fails {when}: {bad}"

    known_good("first")
    schedule = list(M_SCHEDULE)
    rng.shuffle(schedule)
    schedule.insert(rng.randrange(len(schedule)), LARGE_M)
    # the first call at each of these M is kept valid (only valid layouts, no defect), so
    # acceptance at M = 0, 1, an odd M and the large M is always exercised
    must_accept = {schedule.index(m) for m in (0, 1, 1001, LARGE_M)}
    required = {n: h.inputs[n] for n in h.required}
    defects = list(DEFECTS)  # every other call gets one, round robin: all kinds occur
    rng.shuffle(defects)
    stats, reasons, accepted_m = Counter(), Counter(), []
    for i, m in enumerate(schedule):
        backward = h.has_backward and rng.random() < 0.6
        sizes, clean, clean_grads = h.draw(m, SEED + 7 * i, backward)
        call, gcall = _clone(clean), _clone(clean_grads)
        done = []
        for _ in range(rng.choice([0, 1, 1, 2])):  # layouts: same values, other memory
            on_grads = bool(gcall) and rng.random() < 0.3
            target, decls = (gcall, h.grads_in) if on_grads else (call, required)
            n = rng.choice(list(decls))
            how = rng.choice(VALID_LAYOUTS if i in must_accept else LAYOUTS)
            target[n] = _relayout(torch, target[n], how, rng)
            done.append(f"{how}: {n}")
        if i not in must_accept and i % 2:
            kind = defects[stats["defects"] % len(defects)]
            stats["defects"] += 1
            if gcall and rng.random() < 0.3:
                done.append(_defect(torch, h, gcall, h.grads_in, kind, rng))
            else:
                done.append(_defect(torch, h, call, required, kind, rng))
        valid = h.valid(call, gcall, sizes)
        assert valid or i not in must_accept
        what = f"{name} call {i}: M={m} {'fwd+bwd' if backward else 'fwd'} [{', '.join(done)}]"
        stats["calls"] += 1
        try:
            env = h.chain.run(call, grads=gcall)
        except CodaRuntimeError as e:
            reason = _reason(str(e))
            reasons[reason] += 1
            assert reason != "ffi", f"{what}: a kernel's own argument check refused: {e}"
            assert not valid, f"{what}: a valid call was refused: {e}"
            for src, ref_src in ((call, clean), (gcall or {}, clean_grads or {})):
                for n, x in src.items():  # a refused call writes nothing
                    ok = isinstance(x, torch.Tensor) and n in ref_src and x.device == h.dev
                    if ok and x.dtype == ref_src[n].dtype and x.shape == ref_src[n].shape:
                        assert torch.equal(x.detach(), ref_src[n]), f"{what}: {n} was written"
            known_good(f"after refusing {what}")
            continue
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{what}: {type(e).__name__} instead of CodaRuntimeError: {e}")
        assert valid, f"{what}: an invalid call was accepted"
        stats["accepted"] += 1
        stats["accepted_bwd"] += backward
        accepted_m.append(m)
        expected = h.reference(sizes, clean, clean_grads)
        bad = h.problems(env, expected, sizes)
        assert not bad, f"{what}: {bad}"
        for out, root in h.add_to.items():  # written in place: the caller's memory
            src = gcall if root in h.grads_in else call
            if out in env and root in src:
                assert env[out].data_ptr() == src[root].data_ptr(), f"{what}: {out} not in place"
        del env, expected
    torch.cuda.synchronize()  # no illegal memory access anywhere above
    known_good("at the end")
    refused = stats["calls"] - stats["accepted"]
    line = (
        f"{name}: {stats['calls']} calls, {stats['accepted']} accepted "
        f"({stats['accepted_bwd']} with backward; M {sorted(set(accepted_m))}), "
        f"{refused} refused (" + ", ".join(f"{r} {c}" for r, c in sorted(reasons.items())) + ")"
    )
    with capsys.disabled():
        print(f"\n[runtime fuzz] {line}")
    assert stats["accepted"] and refused


@pytest.mark.parametrize("name", CHAINS)
def test_empty_call_launches_nothing(name, monkeypatch):
    """M = 0: no kernel is loaded or launched; outputs are empty with the right shape, weight
    and row-vector gradients full-shape zeros, add_to outputs the (unchanged) tensor they
    accumulate into; a normal call afterwards still works."""
    import torch

    from coda_spec.artifact import eval_shape
    from coda_spec.runtime.launch import Launcher

    h = Harness(name)
    sizes, low, grads = h.draw(0, SEED, h.has_backward)
    loaded = []
    real_fn = Launcher.function
    monkeypatch.setattr(Launcher, "function", lambda self, s: loaded.append(s) or real_fn(self, s))
    passed = {**low, **(grads or {})}
    env = h.chain.run(dict(low), grads=dict(grads) if grads else None)
    torch.cuda.synchronize()
    assert loaded == []
    for o in h.outputs(grads is not None):
        got = env[o.name]
        assert tuple(got.shape) == eval_shape(o.shape, sizes), o.name
        if any(d in h.dynamic for d in o.shape):
            assert got.numel() == 0, o.name
        else:
            assert got.numel() and bool((got == 0).all()), f"{o.name} is not all zero"
        if o.name in h.add_to:
            assert got is passed[h.add_to[o.name]], f"{o.name} is not its add_to tensor"
    assert not h.problems(env, h.reference(sizes, low, grads), sizes)
    out = h.chain(**{k: v for k, v in low.items()})  # the keyword form too
    assert set(out) == {o.name for o in h.chain.manifest.outputs}
    assert loaded == []
    monkeypatch.undo()
    sizes, low, grads = h.draw(GOOD_M, SEED, h.has_backward)
    env = h.chain.run(_clone(low), grads=_clone(grads))
    assert not h.problems(env, h.reference(sizes, low, grads), sizes)
    torch.cuda.synchronize()
