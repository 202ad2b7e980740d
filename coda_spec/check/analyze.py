"""Stage ``analyze``: semantic checks and facts about a normalized spec.

Contract
--------
``analyze(src, spec) -> Analysis`` or SpecError with EVERY semantic error found: unknown, shadowed
or not-yet-produced names (with did-you-mean), dim and dtype mismatches, the hardware shape rules
(16-byte TMA rows: N % 8 for 16-bit data; even N for pair modes; head_dim | N), outputs never
written, reductions never finalized, link cycles, misuse of ``backward.save``. Warnings (unused
values or inputs) ride along in ``Analysis.warnings``.

The facts it returns are what lowering, the reference and the manifest need: every chain
tensor's folded shape, dtype and producer (``TensorInfo``); per step its reads and writes, the
accumulator shape, the pairing mode (``plain``, ``acc_pair`` for adjacent-column pairs,
``packed_pair`` for 16-bit pairs twice the accumulator's width) and each epilogue value's kind
(``StepInfo``).

This module is the driver: the declared inputs, then each section's checks in order. The checks
live in the modules it drives: ``check.order`` (chain level), ``check.steps`` (the typing walk),
``check.writes``, ``check.lowering`` (what no GEMM epilogue can hold, so check agrees with build)
and ``check.programs`` (``derive`` / ``equivalent_to``); the facts are ``check.facts``'s.
``Analysis``, ``TensorInfo``, ``StepInfo`` and ``program_diag`` are importable from here. Where
this sits: docs/architecture.md, Layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda_spec.check.facts import StepInfo, TensorInfo
from coda_spec.check.order import backward_scope, check_outputs, order_checks, productions
from coda_spec.check.programs import check_programs, program_diag
from coda_spec.check.source import Source
from coda_spec.check.steps import StepWalker
from coda_spec.check.suits import kernel_refusal
from coda_spec.check.writes import check_unused
from coda_spec.config import DEFAULT, KernelSizes, config_text, parse_config
from coda_spec.dims import DimError, fold
from coda_spec.errors import Diagnostic, SpecError, in_order
from coda_spec.ir import Spec
from coda_spec.primitives import registry
from coda_spec.primitives.base import INDEX_DTYPES

__all__ = ["Analysis", "StepInfo", "TensorInfo", "analyze", "program_diag"]


@dataclass(frozen=True)
class Analysis:
    spec: Spec
    tensors: tuple  # tuple[TensorInfo, ...]: inputs, then everything produced, forward first
    steps: tuple  # tuple[StepInfo, ...]
    backward_steps: tuple
    warnings: tuple  # tuple[Diagnostic, ...]

    def tensor(self, name: str) -> TensorInfo:
        return next(t for t in self.tensors if t.name == name)

    def info(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)

    def step_infos(self) -> tuple:
        """Every ``(step, StepInfo)``, forward then backward (``Spec.all_steps`` order)."""
        infos = tuple(self.steps) + tuple(self.backward_steps)
        return tuple(zip(self.spec.all_steps(), infos, strict=True))


def _inputs(src, spec, sizes, diags) -> dict:
    out = {}
    for t in spec.tensors:
        path = t.loc.path
        shape = []
        for i, d in enumerate(t.shape):
            try:
                shape.append(fold(d, sizes))
            except DimError as e:
                diags.append(src.diag(path + ("shape", i), str(e), e.hint))
                shape = ["?"]  # reported: readers of this tensor stay quiet
                break
        is_index = t.dtype in INDEX_DTYPES
        if is_index and t.range is None:
            diags.append(
                src.diag(
                    path,
                    f"integer tensor '{t.name}' needs a range",
                    "e.g. range: [0, V], so verify can draw valid indices",
                )
            )
        if t.ignore_index is not None and not is_index:
            diags.append(
                src.diag(
                    path + ("ignore_index",), "ignore_index applies to integer index tensors only"
                )
            )
        if t.range is not None:
            bounds = []
            for i, b in enumerate(t.range):
                if isinstance(b, str):
                    try:
                        b = fold(b, sizes)
                    except DimError as e:
                        diags.append(src.diag(path + ("range", i), str(e), e.hint))
                bounds.append(b if isinstance(b, (int, float)) else None)
            _empty_range(src, t, bounds, diags)
        out[t.name] = TensorInfo(t.name, tuple(shape), t.dtype, "input", "", t.loc, t.ignore_index)
    return out


def _empty_range(src, t, bounds, diags) -> None:
    """``range: [lo, hi]`` draws from [lo, hi): nothing to draw when ``hi <= lo`` (an integer
    tensor: when the integer range is empty). Bounds that are dynamic dims are not checked."""
    lo, hi = (bounds + [None, None])[:2]
    if lo is None or hi is None or isinstance(lo, bool) or isinstance(hi, bool):
        return
    ints = t.dtype in INDEX_DTYPES or t.dtype in ("int32", "int64")
    empty = int(hi) <= int(lo) if ints else hi < lo
    if empty:
        diags.append(
            src.diag(
                t.loc.path + ("range",),
                f"range [{lo}, {hi}] is empty: inputs are drawn from [lo, hi)",
                "write the smaller bound first, e.g. range: [0, V]",
            )
        )


def _one_dynamic_dim(src, spec, diags) -> None:
    """At most one dim is dynamic (the rows, M: what the runtime binds from the inputs and
    ``coda_spec.dims.dynamic_dim`` assumes): each further one is an error at its own entry."""
    dynamic = [d for d in spec.dims if d.size is None]
    for d in dynamic[1:]:
        diags.append(
            src.diag(
                ("dims", d.name),
                f"dims {dynamic[0].name} and {d.name} are both dynamic; a chain has at most one "
                "dynamic dim (the rows, M)",
                f"give {d.name} a size, e.g. {d.name}: 4096",
            )
        )


def analyze(src: Source, spec: Spec) -> Analysis:
    diags: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    prims = registry()
    _one_dynamic_dim(src, spec, diags)
    sizes = spec.dim_sizes()
    tensors = _inputs(src, spec, sizes, diags)
    known = {n: f"input '{n}' (line {t.loc.line})" for n, t in tensors.items()}
    quiet = order_checks(src, spec.steps, known, prims, diags)
    # Names some step declares it writes: if that step fails to type, reads stay quiet.
    declared = {n for s in spec.steps for n, _ in productions(s, prims)}
    outputs = {o.name: o.dtype for o in spec.outputs}
    walker = StepWalker(src, sizes, prims, diags, warnings, outputs)
    steps = walker.walk(spec.steps, dict(tensors), quiet | declared)
    fwd = dict(tensors)
    fwd.update({t.name: t for t in walker.produced})
    produced = {t.name for t in walker.produced}
    check_outputs(src, spec.outputs, fwd, produced, diags, failed=declared, steps=spec.steps)
    check_unused(walker, spec, set(outputs), warnings)
    check_programs(src, spec, tensors, diags, warnings, produced)
    bsteps: tuple = ()
    all_tensors = list(fwd.values())
    if spec.backward is not None:
        scope, unwritten = backward_scope(src, spec, fwd, tensors, diags, warnings)
        bknown = {n: f"forward tensor '{n}'" for n in fwd}
        bknown.update(
            {n: f"gradient input '{n}'" for n, t in scope.items() if t.origin == "grad_in"}
        )
        bquiet = order_checks(src, spec.backward.steps, bknown, prims, diags)
        # Gradients rejected by _backward_scope (reported there): reading them stays quiet.
        bquiet |= {g for g, of in spec.backward.grads if of not in fwd or g in fwd}
        bdeclared = {n for s in spec.backward.steps for n, _ in productions(s, prims)}
        bouts = {o.name: o.dtype for o in spec.backward.outputs}
        bwalker = StepWalker(src, sizes, prims, diags, warnings, bouts, forward=fwd)
        grads_in = [t for t in scope.values() if t.origin == "grad_in"]
        bsteps = bwalker.walk(spec.backward.steps, dict(scope), bquiet | bdeclared)
        bmap = dict(scope)
        bmap.update({t.name: t for t in bwalker.produced})
        check_outputs(
            src,
            spec.backward.outputs,
            bmap,
            {t.name for t in bwalker.produced},
            diags,
            ("backward", "outputs"),
            failed=bdeclared | unwritten,
            steps=spec.backward.steps,
        )
        all_tensors += grads_in + list(bwalker.produced)
    if not diags:
        _fallback_refusals(src, spec, steps + bsteps, prims, diags)
    if diags:
        raise SpecError(in_order(diags))
    return Analysis(spec, tuple(all_tensors), steps, bsteps, tuple(warnings))


GENERIC_CONFIG_HINT = (
    "list configs: that suit this kernel first, e.g. configs: ['128x128,cluster=2x1,cooperative']"
)


def _fallback_refusals(src, spec, infos, prims, diags) -> None:
    """What ``coda build`` with no ``--config`` refuses at its fallback config (the spec's first
    ``configs:`` entry, else ``coda_spec.config.DEFAULT``), located as the build locates it, so
    ``coda check`` never calls valid what that build refuses (an fp8 GEMM at a tile that spills,
    a per-head statistic whose group does not divide the tile). A build given ``--config`` asks
    again at its own configs."""
    try:
        config = parse_config(spec.configs[0]) if spec.configs else DEFAULT
    except ValueError:
        return  # validate reported the malformed entry
    where = "the spec's first configs: entry" if spec.configs else "the default config"
    for step, info in zip(spec.all_steps(), infos, strict=True):
        if step.kind != "kernel":
            continue
        try:
            refused = kernel_refusal(prims, step, config, KernelSizes.of(spec, info))
        except DimError:  # a dim the question cannot fold: the build reports it, located
            continue
        if refused is None:
            continue
        at, why = refused
        what = "the gemm" if at is step.gemm else f"'{at.prim}'"
        # a reason that says itself which configs: entry suits (or that none does) has no hint
        hint = "" if "configs:" in why else GENERIC_CONFIG_HINT
        diags.append(
            src.diag(
                at.loc.path,
                f"{what} cannot be built at {config_text(config.key())} ({where}, which "
                f"coda build uses without --config): {why}",
                hint,
            )
        )
