"""Assemble a spec's generated module (``kernel.py``) and its call description (``lowered``).

``kernel.py`` is a real, importable Python file: CuTe DSL traces real source. It carries a
"generated from" banner (spec path, spec hash, tool versions) and, above each statement, a
comment naming the spec line it came from, so a compiler error or a profile points back into the
YAML. Helpers shared by the generated functions live in its preamble, which also imports coda's
own QuACK ops (``coda_spec.lower.quack_ops``; only generated modules import that package).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from coda_spec.errors import SpecError
from coda_spec.lower.emit import lower_kernel
from coda_spec.primitives import registry

PREAMBLE = '''\
import cutlass
import cutlass.cute as cute
import quack.activation as _qa
import quack.epilogue.rotary as _rot
from quack.epilogue.frontend import gemm_epilogue, pack, unpack
from quack.epilogue.math import Pair
from quack.epilogue.ops import (
    ColVecLoad,
    ColVecReduce,
    ColVecSelect,
    OnlineLSEReduce,
    RowVecLoad,
    RowVecReduce,
    Scalar,
    TileLoad,
    TileStore,
)

from coda_spec.lower.quack_ops import GroupStat

_cm = cute.math


def _map(f, v):
    """Apply a scalar function to each lane of a Pair (or to a plain value)."""
    return Pair(f(v.a), f(v.b)) if isinstance(v, Pair) else f(v)


def _div(a, b):
    """Lane-wise division (Pair has no '/'); a plain operand divides both lanes."""
    if isinstance(a, Pair) or isinstance(b, Pair):
        a0, a1 = a if isinstance(a, Pair) else (a, a)
        b0, b1 = b if isinstance(b, Pair) else (b, b)
        return Pair(a0 / b0, a1 / b1)
    return a / b


def _round_bf16(x):
    return cutlass.Float32(cutlass.BFloat16(x))


def _round_fp16(x):
    return cutlass.Float32(cutlass.Float16(x))
'''


def tool_versions() -> dict:
    out = {}
    for dist in ("coda-spec", "quack-kernels", "nvidia-cutlass-dsl", "apache-tvm-ffi"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


@dataclass(frozen=True)
class LoweredModule:
    source: str
    kernels: tuple  # tuple[LoweredKernel, ...]


def kernel_steps(analysis):
    """(step, StepInfo) for every GEMM kernel, forward then backward."""
    return [(s, i) for s, i in analysis.step_infos() if s.kind == "kernel"]


def lower_spec(checked, config) -> LoweredModule:
    """Lower every kernel of a checked spec. Raises SpecError listing every unsupported item."""
    from dataclasses import replace

    spec, analysis = checked.spec, checked.analysis
    prims = registry()
    kernels, problems = [], []
    sizes = tuple((d.name, d.size) for d in spec.dims if d.size is not None)
    for step, info in kernel_steps(analysis):
        cfg = replace(config, sizes=sizes, width=info.width if isinstance(info.width, int) else 0)
        try:
            kernels.append(
                lower_kernel(analysis, step, info, checked.source.lines, spec.file, cfg, prims)
            )
        except SpecError as e:
            problems.extend(e.diagnostics)
    if problems:
        raise SpecError(problems)
    return LoweredModule(render(spec, kernels), tuple(kernels))


@dataclass(frozen=True)
class Variant:
    """One kernel at one candidate config: ``symbol`` is the exported name (the first variant
    keeps the function's own name), ``function`` the generated function it compiles."""

    step: str
    config: object  # BuildConfig
    symbol: str
    function: str
    kernel: object  # LoweredKernel at this config (its fields carry the config's shapes)


def lower_variants(checked, configs) -> tuple[LoweredModule, dict, list]:
    """Lower at every candidate config. Returns (the module at configs[0], {step: [Variant, ...]}
    in candidate order, [(step, config, why) dropped]).

    configs[0] is every kernel's fallback: it must lower every kernel (SpecError otherwise, as a
    one-config build). A later candidate that a primitive's ``supports()`` refuses for one kernel
    is dropped for that kernel only. The generated epilogue does not depend on the tile config
    (only partial-buffer shapes do), so every variant compiles the same function of kernel.py;
    a candidate that would lower to different code is dropped too, with that reason."""
    from dataclasses import replace

    from coda_spec.config import config_tag

    first = lower_spec(checked, configs[0])
    base = {k.step: k for k in first.kernels}
    variants = {k.step: [Variant(k.step, configs[0], k.symbol, k.symbol, k)] for k in first.kernels}
    dropped = []
    spec, analysis = checked.spec, checked.analysis
    prims = registry()
    sizes = tuple((d.name, d.size) for d in spec.dims if d.size is not None)
    for config in configs[1:]:
        for step, info in kernel_steps(analysis):
            width = info.width if isinstance(info.width, int) else 0
            cfg = replace(config, sizes=sizes, width=width)
            try:
                k = lower_kernel(analysis, step, info, checked.source.lines, spec.file, cfg, prims)
            except SpecError as e:
                why = e.diagnostics[0].message if e.diagnostics else str(e)
                dropped.append((step.name, config, why))
                continue
            b = base[step.name]
            if (k.decorator, k.body, k.params) != (b.decorator, b.body, b.params):
                dropped.append((step.name, config, "lowers to other code than the fallback"))
                continue
            symbol = f"{b.symbol}__{config_tag(config.key())}"
            variants[step.name].append(Variant(step.name, config, symbol, b.symbol, k))
    return first, variants, dropped


def render(spec, kernels) -> str:
    versions = tool_versions()
    banner = [
        f"# Generated by coda {versions['coda-spec']} from {spec.file} (spec hash {spec.digest}).",
        "# Generated file: do not edit; change the spec and rebuild.",
        "# Tools: " + ", ".join(f"{k} {v}" for k, v in versions.items() if k != "coda-spec"),
        f'"""Epilogues of chain \'{spec.name}\' for QuACK\'s sm90 GEMM (see lowered.json)."""',
        "",
    ]
    parts = ["\n".join(banner), PREAMBLE]
    seen = set()
    for k in kernels:
        glob = [g for g in k.globals if g not in seen]
        seen.update(glob)
        fn = [
            f"# {spec.file}:{k.line}: kernel '{k.step}'",
            *glob,
            k.decorator,
            f"def {k.symbol}(acc{''.join(', ' + p for p in k.params)}):",
            *k.body,
        ]
        parts.append("\n".join(fn) + "\n")
    return "\n\n".join(parts)
