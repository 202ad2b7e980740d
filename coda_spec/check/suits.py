"""Does this tile config suit this kernel at these dims? The one home of the question.

A kernel's epilogue primitives each say whether they support a config (``Primitive.supports``:
a reason, or None): the build asks it while lowering each candidate config
(``coda_spec.lower.emit``, where a refusal of the fallback is a located error and a refusal of
another candidate drops that variant), and verify and bench ask it again when they re-size a
build to other dims (``coda_spec.runtime.plan.resized_manifest``, which drops the variants
refused there), and ``coda check`` asks it at the config a flagless build uses (the spec's first
``configs:`` entry or the default; ``analyze._fallback_refusals``), so check never calls valid
what that build refuses. All ask :func:`kernel_refusal`.

A re-size has a second question, :func:`baked_change`: whether the compiled code holds a
constant folded from the dims (``Primitive.bakes``, ``Primitive.bakes_width``) that the new dims
change. Shapes are expressions the runtime evaluates per call; those constants are not.
"""

from __future__ import annotations

from coda_spec import dims, primitives
from coda_spec.config import BuildConfig, KernelSizes

# fp8 GEMMs: the most fp32 accumulator elements per MMA thread (``BuildConfig.acc_per_thread``)
# that compile without spills. QuACK 0.6.5's sm90 fp8 mainloop accumulates each k-tile into a
# second register copy and adds it to the first (``GemmSm90.fp8_slow_accum``; its epilogue
# frontend has no fast-accum switch), so an fp8 kernel holds twice the accumulator. Measured
# (GPU-blind compiles of tests/specs_extra/fp8_gemm.yaml, 2026-12): 64 (cooperative 128x128,
# pingpong 128x64 and 64x128) and 96 (cooperative 128x192) compile clean; 128 (pingpong 128x128,
# the default, and cooperative 256x128) spill 224 STL/LDL.
FP8_ACC_PER_THREAD = 96
FP8_TILES = (
    "build it at a smaller tile, first in --config or the spec's configs: (the fallback), e.g. "
    "128x128,cluster=2x1,cooperative; 128x192 cooperative and 128x64 pingpong fit too"
)


def gemm_refusal(config: BuildConfig, sizes: KernelSizes) -> str | None:
    """Why the GEMM itself (not an epilogue item) cannot take ``config``, or None."""
    acc = config.acc_per_thread()
    if sizes.fp8 and acc > FP8_ACC_PER_THREAD:
        return (
            f"an fp8 GEMM at this tile holds {acc} fp32 accumulator elements per thread, twice "
            f"over (QuACK 0.6.5's fp8 mainloop accumulates into a second copy): more than the "
            f"{FP8_ACC_PER_THREAD} that compile without spills"
        )
    return None


def kernel_refusal(prims, step, config: BuildConfig, sizes: KernelSizes):
    """(what refuses, reason) for kernel ``step`` at ``config`` and ``sizes`` (the static dims,
    the GEMM N, whether its operands are fp8): the GEMM (``step.gemm``, ``gemm_refusal``), or the
    first epilogue item whose primitive refuses; None when all support it."""
    why = gemm_refusal(config, sizes)
    if why is not None:
        return step.gemm, why
    for op in step.epilogue:
        reason = prims[op.prim].supports(config, sizes, op)
        if reason is not None:
            return op, reason
    return None


def refusal(checked):
    """``refusal(step name, config key) -> reason or None`` for the kernels of ``checked`` (a
    checked spec at the dims to run at): what ``resized_manifest`` takes."""
    prims = primitives.registry()
    kernels = {s.name: (s, i) for s, i in checked.analysis.step_infos() if s.kind == "kernel"}

    def why(name: str, key) -> str | None:
        step, info = kernels[name]
        got = kernel_refusal(prims, step, BuildConfig(**key), KernelSizes.of(checked.spec, info))
        return None if got is None else got[1]

    return why


def baked_change(built, case) -> str | None:
    """Why ``built``'s compiled code cannot run at ``case``'s dims, or None: the first constant
    an item compiled in from the dims (``Primitive.bakes``: a per-head group width, a ``scale``
    over dims; ``Primitive.bakes_width``: the kernel's GEMM N, as philox's counter stride)
    whose value ``case`` (the same spec re-analysed at other dims) changes. Shapes are
    expressions the runtime evaluates per call; these are not, so a build at other dims would
    silently compute with the old value."""
    prims = primitives.registry()
    old = {d.name: d.size for d in built.spec.dims}
    new = {d.name: d.size for d in case.spec.dims}
    pairs = zip(built.analysis.step_infos(), case.analysis.step_infos(), strict=True)
    for (step, info), (_, now_info) in pairs:
        for op in step.ops:
            p = prims[op.prim]
            for expr in p.bakes(op, step.kind):
                was, now = dims.constant(expr, old), dims.constant(expr, new)
                if was != now:
                    return (
                        f"{step.kind} '{step.name}' compiled {op.prim}'s {expr} in as {was:g}; at "
                        f"these dims it is {now:g}"
                    )
            if p.bakes_width and step.kind == "kernel" and info.width != now_info.width:
                return (
                    f"kernel '{step.name}' compiled {op.prim} for its width {info.width}; at these "
                    f"dims it is {now_info.width}"
                )
    return None
