"""Assemble a spec's generated module (``kernel.py``) and its call description (``lowered``).

``kernel.py`` is a real, importable Python file (CuTe DSL traces real source) that reads like a
hand-written QuACK mod: a banner, an import block, and one ``@gemm_epilogue`` fn per kernel, each
statement under a comment naming the spec line it came from, so a compiler error or a profile points
back into the YAML. The banner names the spec and its hash only: the tool versions are in the build
hash and the manifest (``coda_spec.versions``), so the text (and the golden files) does not change
with installed versions. The import block holds exactly the names the kernels declared while
lowering (``LowerCtx.use``), grouped by module as ``primitives.lower_api.KERNEL_IMPORTS`` lists
them: QuACK's public API, coda's kernel helpers (``lower/kernel_lib.py``), coda's QuACK ops
(``lower/quack_ops``) and the adapter of QuACK's private names (``lower/quack_private.py``). A spec
without GEMM kernels (host steps only) gets no kernel.py: its source is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda_spec.config import config_tag
from coda_spec.errors import SpecError
from coda_spec.lower.emit import lower_kernel
from coda_spec.primitives import registry
from coda_spec.primitives.lower_api import KERNEL_IMPORTS, MODULE_IMPORTS
from coda_spec.versions import generated_banner, spec_origin


@dataclass(frozen=True)
class LoweredModule:
    source: str
    kernels: tuple  # tuple[LoweredKernel, ...]


def kernel_steps(analysis):
    """(step, StepInfo) for every GEMM kernel, forward then backward."""
    return [(s, i) for s, i in analysis.step_infos() if s.kind == "kernel"]


def lower_spec(checked, config) -> LoweredModule:
    """Lower every kernel of a checked spec. Raises SpecError listing every unsupported item."""
    spec, analysis = checked.spec, checked.analysis
    prims = registry()
    kernels, problems = [], []
    for step, info in kernel_steps(analysis):
        try:
            kernels.append(
                lower_kernel(analysis, step, info, checked.source.lines, spec.file, config, prims)
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

    first = lower_spec(checked, configs[0])
    base = {k.step: k for k in first.kernels}
    variants = {k.step: [Variant(k.step, configs[0], k.symbol, k.symbol, k)] for k in first.kernels}
    dropped = []
    spec, analysis = checked.spec, checked.analysis
    prims = registry()
    for config in configs[1:]:
        for step, info in kernel_steps(analysis):
            try:
                k = lower_kernel(
                    analysis, step, info, checked.source.lines, spec.file, config, prims
                )
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


def render_imports(names) -> str:
    """The import block for ``names``: ``import`` lines, then ``from`` lines of third-party
    modules, then coda's own (one group each, as isort orders them)."""
    names = set(names)
    plain = sorted(MODULE_IMPORTS[n] for n in names if n in MODULE_IMPORTS)
    third, ours = [], []
    for module in sorted(KERNEL_IMPORTS):
        used = [n for n in sorted(KERNEL_IMPORTS[module], key=str.lower) if n in names]
        if used:
            line = f"from {module} import {', '.join(used)}"
            if len(line) > 100:  # one name per line, as ruff formats it
                line = f"from {module} import (\n" + "".join(f"    {n},\n" for n in used) + ")"
            (ours if module.startswith("coda_spec.") else third).append(line)
    return "\n\n".join("\n".join(g) for g in (plain + third, ours) if g)


def render(spec, kernels) -> str:
    """kernel.py's text; empty when the spec has no GEMM kernel (nothing to compile)."""
    if not kernels:
        return ""
    head = "\n".join(
        [
            *generated_banner("kernel.py", spec_origin(spec.file, spec.digest)),
            f'"""Epilogues of chain \'{spec.name}\' for QuACK\'s sm90 GEMM."""',
            "",
            render_imports(n for k in kernels for n in k.imports),
        ]
    )
    parts = [head]
    seen = set()
    for k in kernels:
        glob = [g for g in k.globals if g not in seen]
        seen.update(glob)
        fn = [k.decorator, _signature(k.symbol, ("acc", *k.params)), *k.body]
        # module-level lines (shared ops), then module-level fns (a prepass fn), then the kernel
        # fn: top-level blocks two blank lines apart, the first under the kernel's spec line
        blocks = [[g for g in glob if not g.startswith("def ")]]
        blocks += [[g] for g in glob if g.startswith("def ")] + [fn]
        blocks[0].insert(0, f"# {spec.file}:{k.line}: kernel '{k.step}'")
        if len(blocks[0]) == 1:  # no shared ops: the spec line sits on the next block
            blocks = [blocks[0] + blocks[1], *blocks[2:]]
        parts.extend("\n".join(b) for b in blocks)
    # two blank lines around top-level fns, one after the imports when shared ops follow them
    first = "\n\n" if len(parts) > 1 and "\ndef " not in parts[1] else "\n\n\n"
    return parts[0] + first + "\n\n\n".join(parts[1:]) + "\n"


ACCUMULATE_SUFFIX = "__accumulate"  # the exported name of a kernel's accumulating flavour
ACCUMULATE_DTYPES = ("fp32", "bf16", "fp16")  # what QuACK's reduce-add store of D takes


def _step_reads(step, info) -> set:
    """The chain tensors a step reads: its GEMM operands or host ``over``, and its items'."""
    reads = set(info.reads)
    if step.kind == "kernel":
        reads |= {step.gemm.a.name, step.gemm.b.name}
    elif step.kind == "host":
        reads.add(step.over)
    return reads


def accumulating(checked, kernels) -> dict:
    """``{step: gradient}``: the backward kernels that get an accumulating flavour (the same
    function compiled with QuACK's ``add_to_output``, D += the epilogue's result), each with
    the weight gradient its D writes. A kernel qualifies when its D is a backward output that
    is the gradient of a chain input, has no dynamic dim (a weight's gradient: what training
    sums over micro-batches into ``.grad``), is written with no ``add_to``, no C operand, in
    plain mode, in a dtype the reduce-add store takes, and is read by no later step (a later
    step would read the sum, not this call's gradient). ``kernels``: the lowered kernels."""
    spec, analysis = checked.spec, checked.analysis
    if spec.backward is None:
        return {}
    of = dict(spec.backward.grads)
    inputs = {t.name for t in spec.tensors}
    grads = {o.name for o in spec.backward.outputs if of.get(o.name) in inputs}
    lowered = {k.step: k for k in kernels}
    steps = list(zip(spec.backward.steps, analysis.backward_steps, strict=True))
    out = {}
    for i, (step, _) in enumerate(steps):
        k = lowered.get(step.name) if step.kind == "kernel" else None
        if k is None or k.d is None:
            continue
        grad, dtype, shape = k.d
        plain = k.add_to is None and k.c is None and k.mode == "plain"
        # the dynamic dim folds to its name (a str), a static one to an int
        weight = not any(isinstance(d, str) for d in shape)
        if grad not in grads or not plain or not weight or dtype not in ACCUMULATE_DTYPES:
            continue
        if any(grad in _step_reads(s, info) for s, info in steps[i + 1 :]):
            continue
        out[step.name] = grad
    return out


def _signature(name: str, params) -> str:
    """``def name(params):`` on one line, or with the parameters on a line of their own when
    that passes 100 columns (as ruff formats it; the goldens are ruff-clean)."""
    one = f"def {name}({', '.join(params)}):"
    return one if len(one) <= 100 else f"def {name}(\n    {', '.join(params)}\n):"
