"""What a call checks before its first launch: devices, names, dtypes, shapes, strides, alignment.

A call (``check=True``) validates every input, and with ``grads`` every incoming gradient,
before any step runs, so a refused call changes nothing (``add_to`` tensors included): present
(inputs only ``derive`` or ``equivalent_to`` read may be left out; passed anyway, they are
ignored, not validated), a dense CUDA tensor on the current device, the declared dtype and shape
(static dims exact, the dynamic dim consistent), row-major contiguous, 16-byte aligned (TMA);
an unknown keyword is an error too. A signature (dtype, device, shape and strides of every
tensor) is checked in full once (:class:`Checker`, at most ``SIGNATURES_KEPT`` per chain);
later calls with it check only alignment. ``check=False`` skips validation: the dynamic dim is
read off the input that carries it, so an M = 0 call still launches nothing. docs/runtime.md
lists the checks for users.

Tensors that require grad are passed detached: DLPack refuses them, and kernels write raw memory
(autograd is the torch op's business, not the launcher's). A contiguous tensor whose size-1 or
empty dims carry odd strides is re-strided to its row-major strides (:func:`canonical`): a TMA
descriptor must not see ``torch.empty(D, 1).T``'s (1, 1).
"""

from __future__ import annotations

import torch

from coda_spec.dtypes import TORCH_DTYPES
from coda_spec.runtime.plan import CodaRuntimeError, Plan

SIGNATURES_KEPT = 64  # input signatures remembered per chain (validated once each)


def current_device() -> torch.device:
    """The CUDA device kernels run on: torch's current one. (CPU tests patch this function to
    exercise validation and the no-launch paths without a GPU.)"""
    if not torch.cuda.is_available():
        raise CodaRuntimeError(
            "no CUDA device: built kernels run on an sm_90a GPU (H100/H200); "
            "torch.cuda.is_available() is False"
        )
    return torch.device("cuda", torch.cuda.current_device())


def device_name(device) -> str:
    """The GPU's name, as tune files record it. (A seam: CPU tests patch it; a CPU device, which
    only those tests run on, is called "cpu".)"""
    if device.type != "cuda":
        return "cpu"
    return torch.cuda.get_device_name(device)


def dense_strides(shape) -> tuple:
    """Row-major strides as torch.empty gives them (a size-0 or size-1 dim counts as 1)."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def canonical(x: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor with its row-major strides (same memory, same values)."""
    want = dense_strides(x.shape)
    return x if tuple(x.stride()) == want else x.as_strided(x.shape, want)


class Checker:
    """A chain's validation, with its signature cache (the one piece of state it keeps)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._signatures: dict = {}  # input signature -> (dim sizes, names to re-stride)

    def inputs(self, inputs: dict, grads: dict | None, device=None, dtypes: bool = True) -> tuple:
        """Validate a call's inputs (and gradients): (device, env, sizes), env holding the
        required inputs (and gradients) as validated, canonically strided tensors. ``device``:
        where they must be (default: the current CUDA device); ``dtypes=False`` accepts any
        dtype (the torch op's CPU implementation runs in fp64 under gradcheck)."""
        p = self.plan
        self.names(inputs)
        device = current_device() if device is None else device
        tensors = {n: inputs[n] for n in p.required}
        declared = {n: (t, "input") for n, t in p.required.items()}
        if grads is not None:
            self.grad_names(grads)
            tensors.update(grads)
            declared.update({n: (t, "gradient") for n, t in p.grads_in.items()})
        env, sizes = self.tensors(declared, tensors, device, dtypes)
        return device, env, sizes

    def names(self, inputs: dict) -> None:
        """No unknown keyword, no missing required input."""
        p = self.plan
        unknown = inputs.keys() - p.declared.keys()
        if unknown:
            raise CodaRuntimeError(
                f"{p.name}: unknown input(s) {sorted(unknown)}; expected {sorted(p.declared)}"
            )
        missing = [n for n in p.required if n not in inputs]
        if missing:
            raise CodaRuntimeError(f"{p.name}: missing input(s) {missing}")

    def saved(self, saved: dict, grads: dict, device=None, dtypes: bool = True) -> tuple:
        """Validate :meth:`Chain.backward`'s saved tensors and gradients: (device, env, sizes);
        ``device`` and ``dtypes`` as for :meth:`inputs`."""
        p = self.plan
        self.grad_names(grads)
        declared = {n: (p.manifest.tensors[n], "saved tensor") for n in p.saved}
        declared.update({n: (t, "gradient") for n, t in p.grads_in.items()})
        device = current_device() if device is None else device
        env, sizes = self.tensors(declared, {**saved, **grads}, device, dtypes)
        return device, env, sizes

    def targets(self, into: dict, device, sizes: dict, full: bool = True) -> dict:
        """Validate :meth:`Chain.backward`'s ``accumulate`` (gradient -> the tensor its
        accumulating kernel adds into in place): every gradient has such a kernel, every tensor
        is one it can write (the gradient's dtype and shape, dense, contiguous, on ``device``,
        16-byte aligned, outside autograd). ``full=False`` (``check=False``): the names only."""
        p = self.plan
        wrong = [n for n in into if n not in p.accumulable]
        if wrong:
            raise CodaRuntimeError(
                f"{p.name}: no accumulating kernel writes {wrong}; the gradients that can "
                f"accumulate in place are {sorted(p.accumulable)} (weight gradients a backward "
                "GEMM stores; docs/training.md)"
            )
        if not full:
            return dict(into)
        for name, x in into.items():
            self.one(name, p.manifest.tensors[name], "accumulation target", x, dict(sizes), device)
            where = f"{p.name}: accumulation target '{name}'"
            if x.data_ptr() & 15:
                raise CodaRuntimeError(f"{where} is not 16-byte aligned (TMA needs it)")
            if x.requires_grad:
                raise CodaRuntimeError(
                    f"{where} requires grad; pass a tensor outside autograd (a .grad, or "
                    ".detach() of one)"
                )
        return dict(into)

    def grad_names(self, grads: dict) -> None:
        """The incoming gradients are exactly the backward section's ``grads_in``."""
        p = self.plan
        if not p.manifest.backward_steps:
            raise CodaRuntimeError(f"{p.name}: the chain has no backward section")
        missing = [n for n in p.grads_in if n not in grads]
        unknown = set(grads) - set(p.grads_in)
        if missing or unknown:
            raise CodaRuntimeError(
                f"{p.name}: backward needs gradients {sorted(p.grads_in)}; missing {missing}, "
                f"unknown {sorted(unknown)}"
            )

    def tensors(self, declared: dict, tensors: dict, device, dtypes: bool = True) -> tuple:
        """Validate ``tensors`` against ``declared`` (name -> (Tensor, what)): a signature seen
        before skips straight to the per-call check (alignment); a new one is checked in full
        and remembered."""
        try:
            key = tuple(
                (n, x.dtype, x.get_device(), x.shape, x.stride()) for n, x in tensors.items()
            )
        except (AttributeError, RuntimeError):
            key = None  # not a tensor, or not strided: the full check names it
        seen = self._signatures.get(key) if key is not None and dtypes else None
        if seen is None:
            sizes = dict(self.plan.static)
            for name, (t, what) in declared.items():
                self.one(name, t, what, tensors[name], sizes, device, dtypes)
            recanon = frozenset(
                n for n, x in tensors.items() if tuple(x.stride()) != dense_strides(x.shape)
            )
            if key is not None and dtypes:
                if len(self._signatures) >= SIGNATURES_KEPT:
                    self._signatures.pop(next(iter(self._signatures)))
                self._signatures[key] = (dict(sizes), recanon)
        else:
            sizes, recanon = dict(seen[0]), seen[1]
        env = {}
        for name, x in tensors.items():
            if x.data_ptr() & 15:
                raise CodaRuntimeError(
                    f"{self.plan.name}: {declared[name][1]} '{name}' is not 16-byte aligned "
                    "(TMA needs it)"
                )
            if x.requires_grad:
                x = x.detach()
            env[name] = canonical(x) if name in recanon else x
        return env, sizes

    def one(self, name: str, t, what: str, x, sizes: dict, device, dtypes: bool = True) -> None:
        """Device, dtype, shape (binding dynamic dims into ``sizes``), contiguity."""
        p = self.plan
        shape = p.folded.get(name)
        if shape is None:
            shape = [p.fold(d) for d in t.shape]
        where = f"{p.name}: {what} '{name}'"
        if not isinstance(x, torch.Tensor):
            raise CodaRuntimeError(f"{where} is {type(x).__name__}, not a torch.Tensor")
        if x.layout != torch.strided:
            raise CodaRuntimeError(f"{where} is a {x.layout} tensor; kernels take dense ones")
        if x.device != device:
            raise CodaRuntimeError(f"{where} is on {x.device}; kernels run on {device}")
        if dtypes and x.dtype != TORCH_DTYPES[t.dtype]:
            raise CodaRuntimeError(f"{where} is {x.dtype}; expected {t.dtype}")
        if x.dim() != len(shape):
            raise CodaRuntimeError(f"{where} has shape {tuple(x.shape)}; expected {list(t.shape)}")
        for axis, (want, got) in enumerate(zip(shape, x.shape, strict=True)):
            if isinstance(want, int) and want != got:
                raise CodaRuntimeError(f"{where} dim {axis} is {got}; expected {want}")
            if isinstance(want, str):
                if sizes.setdefault(want, int(got)) != got:
                    raise CodaRuntimeError(
                        f"{where} dim {axis} is {got} but {want} is {sizes[want]} elsewhere"
                    )
        if not x.is_contiguous():
            raise CodaRuntimeError(
                f"{where} is not contiguous (strides {x.stride()}); call .contiguous()"
            )

    def unchecked(self, tensors: dict) -> tuple:
        """``check=False``: no validation; the dynamic dim is read off the input that carries
        it (so an M = 0 call still launches nothing); the device is that of the tensors."""
        p = self.plan
        sizes = dict(p.static)
        if p.dynamic_at is not None and p.dynamic_at[0] in tensors:
            name, axis = p.dynamic_at
            sizes[p.dynamic] = int(tensors[name].shape[axis])
        else:
            sizes.update(self.sizes_from(tensors))
        first = next(iter(tensors.values()), None)
        device = first.device if first is not None else current_device()
        env = {n: (x.detach() if x.requires_grad else x) for n, x in tensors.items()}
        return device, env, sizes

    def sizes_from(self, env: dict) -> dict:
        """The dynamic dim read off any tensor in ``env`` whose declared shape carries it."""
        tensors = self.plan.manifest.tensors
        for name, x in env.items():
            t = tensors.get(name)
            for axis, d in enumerate(t.shape if t is not None else ()):
                if d == self.plan.dynamic:
                    return {d: int(x.shape[axis])}
        return {}
