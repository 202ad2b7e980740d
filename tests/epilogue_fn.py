"""Run a generated epilogue fn's text on CPU tensors: what the lowered statements compute.

No GPU compiles or runs a kernel here, but the body of a ``@gemm_epilogue`` fn is plain Python
over values. :func:`run_fn` executes the body that ``coda_spec.lower.emit`` generated, with whole
fp32 tensors standing in for the per-element values QuACK passes (``acc`` as [M, N], a
``ColVecLoad`` operand as [M, 1], a ``RowVecLoad`` operand as [1, N]; in ``acc_pair`` mode a
full-width value is a :class:`Pair` of its even and odd columns) and stand-ins for the few names
the text calls: ``select`` is ``torch.where`` (the helper is one fp32 compare and one select per
element), ``cute.math.exp`` is ``torch.exp``. So a wrong compare, a lost lane or an operand read
in the wrong place shows up as a wrong number, without a GPU. Only the names listed in
``NAMES`` are provided: a kernel that calls anything else raises NameError here, loudly.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


class Pair(tuple):
    """Two lanes (even column, odd column) with lane-wise ``+ - *``; scalars and per-row
    values broadcast to both lanes."""

    def __new__(cls, a, b):
        return super().__new__(cls, (a, b))

    a = property(lambda self: self[0])
    b = property(lambda self: self[1])

    @staticmethod
    def _lanes(x):
        return x if isinstance(x, Pair) else (x, x)

    def _map(self, other, f):
        o = Pair._lanes(other)
        return Pair(f(self[0], o[0]), f(self[1], o[1]))

    def __add__(self, other):
        return self._map(other, lambda x, y: x + y)

    def __sub__(self, other):
        return self._map(other, lambda x, y: x - y)

    def __rsub__(self, other):
        return self._map(other, lambda x, y: y - x)

    def __mul__(self, other):
        return self._map(other, lambda x, y: x * y)

    __radd__, __rmul__ = __add__, __mul__


def _select(cond, a, b):
    return torch.where(cond, torch.as_tensor(a, dtype=torch.float32), b)


NAMES = {
    "select": _select,
    "lanewise": lambda f, v: Pair(f(v.a), f(v.b)) if isinstance(v, Pair) else f(v),
    "pack": Pair,
    "unpack": lambda v: (v.a, v.b),
    "cute": SimpleNamespace(math=SimpleNamespace(exp=torch.exp, rsqrt=torch.rsqrt)),
}


def split(x: torch.Tensor) -> Pair:
    """A full-width [*, N] tensor as acc_pair lanes (even columns, odd columns)."""
    return Pair(x[:, 0::2], x[:, 1::2])


def join(v) -> torch.Tensor:
    """The inverse of :func:`split` (a plain tensor is returned as it is)."""
    if not isinstance(v, Pair):
        return v
    return torch.stack([v.a, v.b], dim=-1).reshape(v.a.shape[0], -1)


def run_fn(kernel, acc: torch.Tensor, operands: dict, names: dict | None = None) -> dict:
    """Execute ``kernel``'s (a ``LoweredKernel``) fn body on ``acc`` [M, N] and ``operands``
    (fn parameter -> tensor: [M, 1] for per-row, [1, N] for per-column values); returns the fn's
    result dict with pairs joined back to full width. ``names``: the stand-ins (default
    :data:`NAMES`; add one for any other name the text calls)."""
    params = ", ".join(("acc", *kernel.params))
    source = f"def fn({params}):\n" + "\n".join(kernel.body) + "\n"
    scope = dict(NAMES if names is None else names)
    exec(compile(source, f"<{kernel.symbol}>", "exec"), scope)  # noqa: S102 - generated text
    paired = kernel.mode == "acc_pair"

    def value(x):
        return split(x) if paired and x.shape[1] == acc.shape[1] and x.shape[1] > 1 else x

    args = [value(acc)] + [value(operands[p]) for p in kernel.params]
    out = scope["fn"](*args)
    return {
        k: tuple(map(join, v)) if isinstance(v, tuple) and not isinstance(v, Pair) else join(v)
        for k, v in out.items()
    }
