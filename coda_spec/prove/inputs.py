"""Random chain inputs for the reference, equivalence checks and verify.

Policy (documented in docs/spec-language.md): never zeros; float tensors are standard normal,
except GEMM operands read as weights (the ``b`` side), which are scaled by 1/sqrt(K) so
activations stay O(1), and fp8 tensors (GEMM operands), which are unit normal whatever their side
(a per-tensor scale in the spec brings the product back; 1/sqrt(K) would put most of a weight in
the fp8 subnormals); ``range: [lo, hi]`` draws uniformly (integers in [lo, hi)); integer tensors
with ``ignore_index`` get that value in about 1 row in 8. Values are rounded to each tensor's
declared dtype, so the fp64 reference sees exactly the bits a kernel would (fp8: round to nearest
even, saturating at the format's largest finite value, ``coda_spec.dtypes.round_to``; every fp8
value is exact in fp64). Inputs with
``derive`` are computed from the others with the equivalence language: exactly (fp64) for the
algebra checks, rounded to their dtype for low-precision runs.
"""

from __future__ import annotations

import math

import torch

from coda_spec import dims as dimmod
from coda_spec.dtypes import TORCH_DTYPES, dtype, round_to
from coda_spec.expr import ExprError, parse
from coda_spec.expr.evaluate import evaluate


def _weight_scales(spec, sizes) -> dict:
    out = {}
    for step in spec.all_steps():
        if step.kind != "kernel":
            continue
        t = spec.tensor(step.gemm.b.name)
        if t is None:
            continue
        k_axis = 1 if step.gemm.b.transposed else 0
        k = dimmod.evaluate(t.shape[k_axis], sizes)
        # the forward use of a weight wins; K = 0 (a wgrad over M = 0 rows) scales nothing
        out.setdefault(t.name, 1.0 / math.sqrt(k) if k else 1.0)
    return out


def _draw(t, shape, sizes, gen, scale):
    if dtype(t.dtype).kind == "mask":  # 0/1 by default; ``range: [lo, hi]``: integers in [lo, hi)
        lo, hi = (0, 2) if t.range is None else t.range
        lo, hi = (dimmod.evaluate(b, sizes) if isinstance(b, str) else b for b in (lo, hi))
        x = torch.randint(int(lo), int(hi), shape, generator=gen, dtype=torch.int64)
        return x.to(TORCH_DTYPES[t.dtype])
    if t.range is not None:
        lo, hi = (dimmod.evaluate(b, sizes) if isinstance(b, str) else b for b in t.range)
        if t.dtype in ("int32", "int64"):
            x = torch.randint(int(lo), int(hi), shape, generator=gen, dtype=torch.int64)
            if t.ignore_index is not None and x.numel():
                mask = torch.rand(shape, generator=gen) < 0.125
                x = torch.where(mask, torch.full_like(x, t.ignore_index), x)
            return x.to(TORCH_DTYPES[t.dtype])
        x = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    elif dtype(t.dtype).kind == "fp8":  # unit normal: scaled by 1/sqrt(K) it would be subnormal
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
    else:
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
    return _lower(x, t.dtype)


def _lower(x, name: str):
    """``x`` in the dtype ``name``; fp8 rounds to nearest even and saturates (``round_to``), as
    torch's own fp8 conversion turns values past the largest finite one into NaN."""
    if dtype(name).kind == "fp8":
        x = round_to(x, name)
    return x.to(TORCH_DTYPES[name])


def make_inputs(
    spec, sizes: dict, seed: int = 0, device=None, exact_shapes: bool = False
) -> tuple[dict, dict]:
    """Returns (inputs in their declared dtypes, the same in fp64 with exact derived inputs).

    ``device``: draw there with that device's generator (default: the CPU, whose draws a
    recorded seed replays anywhere; a CUDA generator draws other values for the same seed).
    ``exact_shapes``: a derived input whose shape is not its declared shape at ``sizes`` is an
    ``ExprError`` at its ``derive`` (the proof's rule; verify checks the shapes itself and
    skips such a case, noted)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    gen = torch.Generator(device=device).manual_seed(seed)
    scales = _weight_scales(spec, sizes)
    low, exact = {}, {}
    with device:
        for t in spec.tensors:
            if t.derive is not None:
                continue
            shape = tuple(dimmod.evaluate(d, sizes) for d in t.shape)
            x = _draw(t, shape, sizes, gen, scales.get(t.name, 1.0))
            low[t.name] = x
            is_mask = dtype(t.dtype).kind == "mask"  # the math reads masks as 0/1 numbers
            exact[t.name] = x.double() if x.is_floating_point() or is_mask else x
        env = {**exact, **{k: v for k, v in sizes.items()}}
        for t in spec.tensors:
            if t.derive is None:
                continue
            try:
                value = evaluate(parse(t.derive, single_expression=True), env)[None]
            except ExprError as e:  # located in this tensor's derive
                raise e.at(t.loc.path + ("derive",)) from e
            if not isinstance(value, torch.Tensor):
                raise ExprError(
                    f"derive gives {type(value).__name__} {value!r}, not a tensor",
                    hint="derive an expression of the other inputs",
                ).at(t.loc.path + ("derive",))
            want = tuple(dimmod.evaluate(d, sizes) for d in t.shape)
            if exact_shapes and tuple(value.shape) != want:
                raise ExprError(
                    f"derive gives shape {list(value.shape)}, but the declared shape "
                    f"[{', '.join(map(str, t.shape))}] is {list(want)} here",
                    hint="derive a tensor of the declared shape (a reduction over dim -1 "
                    "drops the last dim)",
                ).at(t.loc.path + ("derive",))
            exact[t.name] = value.double()
            low[t.name] = _lower(value, t.dtype)
            env[t.name] = exact[t.name]
    return low, exact


def derived_shapes(spec, sizes: dict) -> dict:
    """The shape each ``derive`` expression yields at ``sizes``, evaluated on shape-only (meta)
    tensors: no data, no time. ``None`` where an expression cannot be evaluated that way."""
    env: dict = dict(sizes)
    for t in spec.tensors:
        if t.derive is None:
            shape = tuple(dimmod.evaluate(d, sizes) for d in t.shape)
            dtype = TORCH_DTYPES[t.dtype] if t.dtype in ("int32", "int64") else torch.float64
            env[t.name] = torch.empty(shape, dtype=dtype, device="meta")
    out = {}
    for t in spec.tensors:
        if t.derive is None:
            continue
        try:
            value = evaluate(parse(t.derive, single_expression=True), env)[None]
            out[t.name] = tuple(value.shape)
        except Exception:  # noqa: BLE001 - an op without a meta kernel: unknown, not wrong
            out[t.name] = None
            value = torch.empty(
                tuple(dimmod.evaluate(d, sizes) for d in t.shape),
                dtype=torch.float64,
                device="meta",
            )
        env[t.name] = value.double() if value.is_floating_point() else value
    return out


def derive_mismatches(spec, sizes: dict, shapes: dict | None = None) -> list[str]:
    """Derived inputs whose shape at ``sizes`` is not their declared shape there: a ``derive``
    whose shape does not follow the dims (a literal count, or inputs sized by other dims).
    ``shapes``: the actual shapes (default: :func:`derived_shapes`, evaluated on meta)."""
    shapes = derived_shapes(spec, sizes) if shapes is None else shapes
    bad = []
    for t in spec.tensors:
        if t.derive is None or shapes.get(t.name) is None:
            continue
        want = tuple(dimmod.evaluate(d, sizes) for d in t.shape)
        got = tuple(shapes[t.name])
        if got != want:
            shown = ", ".join(f"{d}={dimmod.evaluate(d, sizes)}" for d in t.shape)
            bad.append(
                f"input '{t.name}' is derived with shape {list(got)}, but its declared shape "
                f"{list(t.shape)} is {list(want)} here ({shown}): its derive does not follow "
                "these dims"
            )
    return bad


def make_grads(spec, analysis, sizes: dict, seed: int = 1, device=None) -> tuple[dict, dict]:
    """Random incoming cotangents for the backward section (declared dtype, and fp64);
    ``device`` as for :func:`make_inputs`."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    gen = torch.Generator(device=device).manual_seed(seed)
    low, exact = {}, {}
    for t in analysis.tensors:
        if t.origin != "grad_in":
            continue
        shape = tuple(dimmod.evaluate(d, sizes) if isinstance(d, str) else d for d in t.shape)
        x = torch.randn(shape, generator=gen, dtype=torch.float64, device=device)
        low[t.name] = x.to(TORCH_DTYPES[t.dtype])
        exact[t.name] = low[t.name].double()
    return low, exact
