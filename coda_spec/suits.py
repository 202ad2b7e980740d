"""Does this tile config suit this kernel at these dims? The one home of the question.

A kernel's epilogue primitives each say whether they support a config (``Primitive.supports``:
a reason, or None): the build asks it while lowering each candidate config
(``coda_spec.lower.emit``, where a refusal of the fallback is a located error and a refusal of
another candidate drops that variant), and verify and bench ask it again when they re-size a
build to other dims (``coda_spec.runtime.plan.resized_manifest``, which drops the variants
refused there). Both ask :func:`kernel_refusal`.
"""

from __future__ import annotations

from coda_spec import dims, primitives
from coda_spec.config import BuildConfig, KernelSizes


def kernel_refusal(prims, step, config: BuildConfig, sizes: KernelSizes):
    """(epilogue item, reason) of the first item of kernel ``step`` whose primitive refuses
    ``config`` at ``sizes`` (the static dims and the GEMM N); None when all support it."""
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
        for op in getattr(step, "epilogue", None) or getattr(step, "body", None) or ():
            p = prims[op.prim]
            for expr in p.bakes(op, step.kind):
                was, now = dims.constant(str(expr), old), dims.constant(str(expr), new)
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
