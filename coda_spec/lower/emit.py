"""Stage ``lower`` (per kernel): epilogue items -> the body of a QuACK ``@gemm_epilogue`` fn.

The walk: for each item of a kernel's epilogue, ask its primitive whether the config supports it,
write the item's spec line as a comment, and call its ``lower(lc, op)`` with one
:class:`~coda_spec.primitives.lower_api.LowerCtx` per kernel. Then read what the items declared (a
frozen
:class:`~coda_spec.primitives.lower_api.Declared`) and assemble the kernel: the decorator (``ops=``,
``outputs=``, ``reduces=``, ``outs=``, ``extra_ops=``, ``prepass=``, ``mode=``), the prepass fn
when a statistic needs one, and the return dict. The QuACK contract and the API primitives lower
against live in ``coda_spec/primitives/lower_api.py``; this module imports it and the primitives'
registry
is passed in, so the import graph stays one-way (module -> emit -> primitives -> lower_api).
"""

from __future__ import annotations

from dataclasses import dataclass

from coda_spec.check.suits import FP8_TILES, kernel_refusal
from coda_spec.config import KernelSizes, config_text
from coda_spec.errors import Diagnostic, ItemError, SpecError, format_path
from coda_spec.primitives.lower_api import Declared, LowerCtx


@dataclass(frozen=True)
class LoweredKernel:
    step: str
    symbol: str  # fn name in kernel.py and exported function name
    mode: str  # plain | acc_pair | packed_cd_b16x2
    a: tuple  # (tensor, transposed)
    b: tuple
    m: object  # rows (int or dynamic dim name)
    n: object  # GEMM N
    k: object
    d: tuple | None  # (tensor, dtype, shape) written as D
    c: tuple | None  # (tensor, dtype, shape) read as C (packed mode)
    add_to: str | None  # D accumulates into this chain tensor (in place)
    fields: tuple  # tuple[Field, ...] in declaration order
    decorator: str
    globals: tuple  # module-level lines this kernel needs
    params: tuple  # fn parameter names after acc
    body: tuple  # source lines (already indented by 4)
    line: int
    imports: tuple = ()  # names kernel.py imports for this kernel (lower_api.KERNEL_IMPORTS)


def lower_kernel(analysis, step, info, src_lines, file, config, prims) -> LoweredKernel:
    """Lower one kernel step (``info`` is its StepInfo). Raises SpecError on unsupported items
    (the first one: later items depend on it)."""
    mode = {"plain": "plain", "acc_pair": "acc_pair", "packed_pair": "packed_cd_b16x2"}[info.mode]
    tile = (config.tile_m, config.tile_n)
    refused = kernel_refusal(prims, step, config, KernelSizes.of(analysis.spec, info))
    if refused is not None and refused[0] is step.gemm:
        g = step.gemm.loc
        at = f"cannot build the gemm at {config_text(config.key())}: {refused[1]}"
        raise SpecError([Diagnostic(file, g.line, g.col, format_path(g.path), at, FP8_TILES)])
    lc = LowerCtx(analysis, step, src_lines, mode, info.rows, info.width, info.k, tile, file, prims)
    for idx, op in enumerate(step.epilogue):
        p = prims[op.prim]
        reason = refused[1] if refused is not None and refused[0] is op else None
        if reason is not None:
            raise SpecError([_diag(file, op, f"cannot lower '{op.prim}': {reason}")])
        no = p.epilogue_refusal(info.mode)  # analyze refused it already (coda check): a guard
        no = no or p.item_refusal(op, info.mode, analysis.spec.dim_sizes())
        if no is not None:
            raise SpecError([_diag(file, op, f"cannot lower '{op.prim}': {no.message}", no.hint)])
        lc.comment(op)
        try:
            p.lower(lc, op)
        except ItemError as e:
            raise SpecError(
                [_diag(file, op, f"cannot lower '{op.prim}': {e.message}", e.hint)]
            ) from None
        for r in op.results:
            lc.produced(r, idx, op)
    decl = lc.declared()
    if decl.selects:
        loc = step.loc
        raise SpecError(
            [
                Diagnostic(
                    file, loc.line, loc.col, step.name, f"gathered value '{v}' is never stored"
                )
                for v in decl.selects
            ]
        )
    return _finish(decl, lc, step)


def _diag(file, op, message, hint=""):
    return Diagnostic(file, op.loc.line, op.loc.col, format_path(op.loc.path), message, hint)


def _mapping(items) -> str:
    """``{"k": v, ...}`` on one line, or one entry per line when that is long (readability)."""
    entries = [f'"{k}": {v}' for k, v in items]
    one = "{" + ", ".join(entries) + "}"
    if len(one) <= 80:
        return one
    return "{\n" + "".join(f"        {e},\n" for e in entries) + "    }"


def _decorator(args: list[str]) -> str:
    """``@gemm_epilogue(...)`` on one line when it fits in 100 columns (as QuACK's own mods)."""
    one = f"@gemm_epilogue({', '.join(args)})"
    if len(one) <= 100 and "\n" not in one:
        return one
    return "@gemm_epilogue(\n" + "".join(f"    {a},\n" for a in args) + ")"


def _prepass_fn(pre: Declared, outs, file: str, step, fn2: str) -> str:
    """The prepass fn's source (a module-level global of the kernel, above its decorator)."""
    ret = ", ".join(f'"{k}": {v}' for k, v in outs)
    lines = [
        f"def {fn2}({', '.join(['acc', *(p for p, _ in pre.params)])}):",
        f"    # {file}:{step.loc.line}: prepass of kernel '{step.name}' (QuACK runs it first,",
        "    # per element of the raw accumulator): the inputs of its per-(row, group) statistics;",
        "    # the values they read are re-computed here from acc and the kernel's loads",
        *pre.body,
        f"    return {{{ret}}}",
    ]
    return "\n".join(lines)


def _finish(decl: Declared, lc: LowerCtx, step) -> LoweredKernel:
    ret = ", ".join(f'"{k}": {v}' for k, v in decl.returns)
    body = (*decl.body, f"    return {{{ret}}}")
    args = [f"ops={_mapping(decl.params)}"] if decl.params else []
    if decl.outputs:
        args.append("outputs=(" + ", ".join(decl.outputs) + ",)")
    if decl.reduces:
        args.append(f"reduces={_mapping(decl.reduces)}")
    if decl.outs:
        args.append(f"outs={_mapping(decl.outs)}")
    if decl.extra:
        args.append("extra_ops=(" + ", ".join(decl.extra) + ",)")
    globals_ = list(decl.globals)
    if decl.prepass is not None:
        fn2 = f"coda_{step.name}_prepass"
        globals_.append(_prepass_fn(decl.prepass, decl.prepass_outs, lc.file, step, fn2))
        args.append(f"prepass={fn2}")
        names = [f'"{k}"' for k, _ in decl.prepass_outs]
        args.append(f"prepass_outs=({', '.join(names)}{',' if len(names) == 1 else ''})")
    if lc.mode != "plain":
        args.append(f'mode="{lc.mode}"')
    g = step.gemm
    params = tuple(p for p, _ in decl.params)
    if decl.c is not None:
        params = ("c",) + tuple(p for p in params if p != "c")
    return LoweredKernel(
        step=step.name,
        symbol=f"coda_{step.name}",
        mode=lc.mode,
        a=(g.a.name, g.a.transposed),
        b=(g.b.name, g.b.transposed),
        m=lc.rows,
        n=lc.width,
        k=lc.k,
        d=decl.d,
        c=decl.c,
        add_to=decl.add_to,
        fields=decl.fields,
        decorator=_decorator(args),
        globals=tuple(globals_),
        params=params,
        body=body,
        line=step.loc.line,
        imports=tuple(sorted(decl.imports | {"gemm_epilogue"})),
    )
