"""The private torch names coda uses, each pinned to what coda relies on.

torch promises nothing about ``_``-prefixed names: an upgrade may rename one, change its
signature or its meaning. Each one ``coda_spec`` reaches is in :data:`PINS` with the site that
uses it and what to do when its check fails; each check asserts the name exists with the
signature (or, for a builtin, the behaviour) coda relies on.

* The scan: every private torch name ``coda_spec`` reaches (``torch.<...>._x`` attribute chains,
  ``from torch... import _x``, and private ``torch.Tensor`` attributes read off a variable,
  ``x._version``) is pinned, at the files :data:`PINS` names, and no pin is stale.
* The pins: one test per name. The names only a CUDA build of torch has (``torch._C._nvtx``,
  ``torch._C._cuda_getCurrentRawStream``) skip on a CPU build (CI's); the H200 runs them.

A torch upgrade that fails here: read the coda site the failure names, adapt it to what torch
offers now (a public replacement where there is one), then update the pin.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass

import pytest
import torch

from tests.conftest import ROOT

PACKAGE = ROOT / "coda_spec"


@dataclass(frozen=True)
class Pin:
    sites: tuple  # the coda files that use the name (relative to coda_spec/)
    use: str  # where and what for
    todo: str  # what to do when the pin fails


PINS = {
    "torch.autograd.graph._get_grad_fn_or_grad_acc": Pin(
        ("ops.py",),
        "ops._writes_grad: a leaf's AccumulateGrad node, asked of the engine (fuse_grad_accum)",
        "find what torch.autograd.graph.register_multi_grad_hook uses now to reach a leaf's "
        "gradient accumulator, and use that",
    ),
    "torch._C._will_engine_execute_node": Pin(
        ("ops.py",),
        "ops._writes_grad: whether the running backward writes a leaf's .grad (.backward() "
        "does, with or without inputs= naming it; autograd.grad raises RuntimeError)",
        "find what register_multi_grad_hook asks the engine now; until then fuse_grad_accum "
        "can fall back to returning the gradient (_writes_grad -> False)",
    ),
    "Tensor._backward_hooks": Pin(
        ("ops.py",),
        "ChainOp._grad_into: a leaf with a tensor hook (register_hook) gets its gradient "
        "from autograd, never added into .grad by the kernel",
        "find where register_hook keeps a leaf's hooks now, and read that",
    ),
    "Tensor._version": Pin(
        ("runtime/launch.py",),
        "Launcher's per-tensor table cache: a tensor written in place since (its version "
        "counter moved) is re-read",
        "use torch's version counter under its new name, or drop the cache",
    ),
    "torch.autograd._profiler_enabled": Pin(
        ("runtime/call.py",),
        "run_steps: named ranges (record_function) only while a profiler runs",
        "use the public check torch offers (torch.autograd.profiler), or always open the range",
    ),
    "torch._C._nvtx": Pin(
        ("runtime/call.py",),
        "run_steps: NVTX ranges per step (rangePushA / rangePop), a CUDA build only",
        "use torch.cuda.nvtx.range_push / range_pop",
    ),
    "torch._C._cuda_getCurrentRawStream": Pin(
        ("runtime/call.py",),
        "Call: the raw cudaStream_t of torch's current stream, handed to each launch",
        "use torch.cuda.current_stream(device).cuda_stream",
    ),
    "torch._scaled_mm": Pin(
        ("expr/evaluate.py",),
        "the fp8 GEMM of the reference on a GPU: scale_a, scale_b, out_dtype keywords",
        "call the fp8 matmul torch offers now with unit scales and an fp32 result",
    ),
    "torch._dynamo.maybe_mark_dynamic": Pin(
        ("bench/driver.py",),
        "bench's torch.compile baseline: the dynamic dim (M) marked dynamic, by axis",
        "use torch._dynamo.mark_dynamic or the public dynamic-shapes API",
    ),
    "torch._dynamo.config.automatic_dynamic_shapes": Pin(
        ("bench/driver.py",),
        "bench's torch.compile baseline: set False, so only M is dynamic",
        "find the config that turned automatic dynamic shapes off, and set it",
    ),
    "torch._dynamo.config.cache_size_limit": Pin(
        ("bench/driver.py",),
        "bench's torch.compile baseline: raised to 64 (one graph per size benched)",
        "find the recompile limit's new config name, and set it",
    ),
    "torch._inductor.lowering.lowerings": Pin(
        ("ops.py",),
        "ops._inductor_fallbacks: inductor's lowering table, {OpOverload: lowering}, asked "
        "whether a coda op has its fallback yet",
        "find where inductor keeps its lowerings now; without it, register unconditionally",
    ),
    "torch._inductor.lowering.make_fallback": Pin(
        ("ops.py",),
        "ops._inductor_fallbacks: a coda op's fallback lowering (op, layout_constraint=), "
        "registered before inductor's implicit-fallback path formats every argument's IR",
        "if torch formats that message lazily in every version coda supports, drop "
        "_inductor_fallbacks; else register the fallback the way inductor does now",
    ),
    "torch._inductor.lowering.tag_to_layout_constraint": Pin(
        ("ops.py",),
        "ops._inductor_fallbacks: the layout constraint the implicit path would choose, from "
        "the op's layout tag",
        "use what inductor's GraphLowering.call_function uses now for an implicit fallback",
    ),
    "torch._library.utils.get_layout_constraint_tag": Pin(
        ("ops.py",),
        "ops._inductor_fallbacks: a custom op's layout tag (with_default=True: inductor's "
        "default for custom ops when it has none)",
        "use what inductor's GraphLowering.call_function uses now for an implicit fallback",
    ),
}
TENSOR_ATTRS = {a for a in dir(torch.Tensor) if a.startswith("_") and not a.startswith("__")}
GONE = object()
CUDA_ONLY = {"torch._C._nvtx", "torch._C._cuda_getCurrentRawStream"}


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _dotted(node) -> str | None:
    """``a.b.c`` for an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _uses(source: str) -> set[str]:
    """The private torch names ``source`` reaches: the longest ``torch.<...>`` attribute chains
    with a private part, private names imported from torch, and ``Tensor.<attr>`` for a
    private tensor attribute read off a plain variable (not ``self`` or ``cls``)."""
    tree = ast.parse(source)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            name = _dotted(node) or ""
            if name.split(".")[0] == "torch" and any(map(_private, name.split("."))):
                found.add(name)
            receiver = node.value
            if (
                node.attr in TENSOR_ATTRS
                and isinstance(receiver, ast.Name)
                and receiver.id not in ("self", "cls")
            ):
                found.add(f"Tensor.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            found |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if any(map(_private, [*node.module.split("."), a.name]))
            }
        elif isinstance(node, ast.Import):
            found |= {
                a.name
                for a in node.names
                if a.name.split(".")[0] == "torch" and any(map(_private, a.name.split(".")))
            }
    # a chain that is a prefix of another (hasattr(torch._C, ...), import torch._dynamo) is that one
    return {n for n in found if not any(o.startswith(n + ".") for o in found)}


def test_every_private_torch_name_coda_uses_is_pinned():
    seen: dict[str, set] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _uses(path.read_text()):
            seen.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
    unpinned = {n: sorted(f) for n, f in seen.items() if n not in PINS}
    assert not unpinned, (
        f"private torch names used but not pinned: {unpinned}; add each to PINS in "
        "tests/test_private_torch.py with a test of what coda relies on (or use a public API)"
    )
    moved = {n: (sorted(seen.get(n, ())), p.sites) for n, p in PINS.items()}
    moved = {n: v for n, v in moved.items() if tuple(v[0]) != tuple(sorted(v[1]))}
    assert not moved, f"PINS names other sites than the code's (name: (code, pin)): {moved}"


def test_the_scan_sees_each_kind_of_use():
    src = (
        "import torch._dynamo\nfrom torch.autograd.graph import _get_grad_fn_or_grad_acc\n"
        "s = torch._C._cuda_getCurrentRawStream(0) if hasattr(torch._C, '_nvtx') else 0\n"
        "v = x._version + self._version + torch.autograd.grad(y)\n"
    )
    assert _uses(src) == {
        "torch._dynamo",
        "torch.autograd.graph._get_grad_fn_or_grad_acc",
        "torch._C._cuda_getCurrentRawStream",
        "Tensor._version",
    }


def _resolve(name: str):
    """The object a pinned name is (``GONE``: absent); ``Tensor.<attr>``: a fresh leaf's."""
    if name.startswith(("torch._inductor.", "torch._library.")):  # modules torch loads lazily
        importlib.import_module(name.rsplit(".", 1)[0])
    obj = torch.ones(2, requires_grad=True) if name.startswith("Tensor.") else torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part, GONE)
        if obj is GONE:
            break
    return obj


def _fail(name: str, what: str) -> str:
    pin = PINS[name]
    sites = ", ".join(f"coda_spec/{s}" for s in pin.sites)
    where = f"coda uses it at {sites} ({pin.use})"
    return f"torch {torch.__version__}: {name}: {what}; {where}; {pin.todo}"


def _check(name: str) -> None:
    obj = _resolve(name)
    assert obj is not GONE, _fail(name, "gone")
    if name == "torch.autograd.graph._get_grad_fn_or_grad_acc":
        params = list(inspect.signature(obj).parameters)
        assert params == ["t"], _fail(name, f"signature {params}")
        x = torch.ones(2, requires_grad=True)
        assert type(obj(x)).__name__ == "AccumulateGrad", _fail(name, "a leaf's node")
    elif name == "torch._C._will_engine_execute_node":
        _check_engine()
    elif name == "Tensor._backward_hooks":
        x = torch.ones(2, requires_grad=True)
        assert not x._backward_hooks, _fail(name, "a leaf with no hook has hooks")
        handle = x.register_hook(lambda g: g)
        assert x._backward_hooks, _fail(name, "register_hook's hook is not in it")
        handle.remove()
        assert not x._backward_hooks, _fail(name, "a removed hook stays")
    elif name == "Tensor._version":
        x = torch.zeros(2)
        before = x._version
        x.add_(1)
        assert isinstance(before, int) and x._version > before, _fail(name, "an in-place write")
    elif name == "torch.autograd._profiler_enabled":
        assert obj() is False, _fail(name, "True with no profiler")
        with torch.autograd.profiler.profile():
            assert obj() is True, _fail(name, "False inside a profiler")
    elif name == "torch._C._nvtx":
        for method in ("rangePushA", "rangePop"):
            assert callable(getattr(obj, method, None)), _fail(name, f"no {method}")
    elif name == "torch._C._cuda_getCurrentRawStream":
        assert callable(obj), _fail(name, "not callable")
    elif name == "torch._scaled_mm":
        args = {a.name for a in torch.ops.aten._scaled_mm.default._schema.arguments}
        want = {"scale_a", "scale_b", "out_dtype"}
        assert want <= args, _fail(name, f"no {sorted(want - args)} argument")
    elif name == "torch._dynamo.maybe_mark_dynamic":
        params = list(inspect.signature(obj).parameters)
        assert params[:2] == ["t", "index"], _fail(name, f"signature {params}")
    elif name == "torch._dynamo.config.automatic_dynamic_shapes":
        assert isinstance(obj, bool), _fail(name, f"not a bool: {obj!r}")
    elif name == "torch._dynamo.config.cache_size_limit":
        assert isinstance(obj, int) and not isinstance(obj, bool), _fail(name, f"{obj!r}")
    elif name == "torch._inductor.lowering.lowerings":
        assert torch.ops.aten.mm.default in obj, _fail(name, "aten.mm has no lowering in it")
    elif name == "torch._inductor.lowering.make_fallback":
        params = list(inspect.signature(obj).parameters)
        assert params[:2] == ["op", "layout_constraint"], _fail(name, f"signature {params}")
    elif name == "torch._inductor.lowering.tag_to_layout_constraint":
        got = obj(torch._C.Tag.needs_fixed_stride_order)
        assert callable(got), _fail(name, f"needs_fixed_stride_order gives {got!r}")
    elif name == "torch._library.utils.get_layout_constraint_tag":
        got = obj(torch.ops.aten.mm.default, with_default=True)
        assert isinstance(got, torch._C.Tag), _fail(name, f"aten.mm's tag is {got!r}")
    else:
        raise AssertionError(f"{name}: pinned with no check; add one to _check")


def _check_engine() -> None:
    """``ops._writes_grad``'s contract: from inside a backward that reaches a leaf's
    accumulator, True when ``.backward()`` writes its ``.grad`` (no ``inputs=``, or ``inputs=``
    naming it), False when it does not (``inputs=`` naming another, ``autograd.grad`` of
    another), and a RuntimeError under ``autograd.grad`` of that leaf."""
    from torch.autograd.graph import _get_grad_fn_or_grad_acc

    name = "torch._C._will_engine_execute_node"
    x, y = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            try:
                seen.append(torch._C._will_engine_execute_node(_get_grad_fn_or_grad_acc(x)))
            except RuntimeError:
                seen.append("RuntimeError")
            return g, g

    runs = {
        ".backward()": (lambda loss: loss.backward(), True),
        ".backward(inputs=[x])": (lambda loss: loss.backward(inputs=[x]), True),
        ".backward(inputs=[y])": (lambda loss: loss.backward(inputs=[y]), False),
        "autograd.grad(loss, [y])": (lambda loss: torch.autograd.grad(loss, [y]), False),
        "autograd.grad(loss, [x])": (lambda loss: torch.autograd.grad(loss, [x]), "RuntimeError"),
    }
    for how, (run, want) in runs.items():
        seen.clear()
        run(Probe.apply(x, y).sum())
        assert seen == [want], _fail(name, f"under {how}: {seen}, not [{want}]")


@pytest.mark.parametrize("name", sorted(PINS))
def test_pin(name):
    if name in CUDA_ONLY and torch.version.cuda is None:
        pytest.skip(f"{name}: a CUDA build of torch only (this one is {torch.__version__})")
    _check(name)
