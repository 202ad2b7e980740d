"""Stage ``lower`` (per host step): a ``host:`` step's body -> one ahead-of-time Triton kernel.

This module holds :func:`host_kernel` (the public entry), the scheduler that places each body
item before, inside or after the loop over a row, the folded finalizes and the kernel's assembly.
It returns a :class:`~coda_spec.lower.triton_aot.TritonKernel`; ``triton_aot.compile_kernel``
compiles that to an sm_90a cubin without a GPU. Each item's Triton text is its primitive's
``host`` function (``Primitive.host``, against
:class:`~coda_spec.primitives.host_api.HostCtx`: values, lanes, phases, tensors); shared text
lives in ``primitives/_elementwise.py`` (unary and binary ops), ``_pairs.py`` (RoPE and gated
pairs) and ``_loads.py`` (index tests). Nothing here imports Triton or torch: generation is pure
text.

Contract
--------
``host_kernel(checked, step, block=None) -> TritonKernel`` for a host step of a checked spec
(forward or backward section). The kernel computes every chain tensor the step writes, exactly
as ``coda_spec.prove.reference`` does in fp32 (the same formulas, fp32 math, stores rounded to the
declared dtype), plus every ``finalize`` of the same section whose partial this step produces
(``TritonKernel.folds``): a host step's row reduction is exact per row, so ``zdz = dot / D`` is
one more division in the kernel, written straight to the finalize's result. The partial itself
is written too (an [M] fp32 vector, what the runtime keeps for a host partial: "exact"). A
finalize ``over`` rows is not folded: it reduces across rows, i.e. across this kernel's
programs, which would need atomics (not reproducible); its own one-program finalize kernel
(``lower/finalize_kernel.py``) folds the exact partial instead. ``var`` folds here when both of
its partials are this step's.
Anything the kernel cannot express raises :class:`HostKernelError` (a ``SpecError``) naming the
step and the item: a primitive without a ``host`` lowering (its ``no_host`` says why), a
grouped reduction, a value needed inside the loop that is only known after it (a second pass
over the row).

Kernel shape (why)
------------------
One program per row (grid ``(M,)``): every host step of the catalogue is row-wise (elementwise
math with per-row statistics), and a row of a few thousand to tens of thousands of columns is
one long coalesced stream. The program walks its row in chunks of ``BLOCK`` *slots*. A slot is
the unit every value of the step shares: ``SLOTS`` slots span a row, and a tile (or per-column
row vector) of width ``w`` holds ``L = w / SLOTS`` adjacent columns per slot, its *lanes*: value
``x`` becomes ``x_0 .. x_{L-1}``, lane ``l`` of slot ``s`` being column ``s * L + l`` (a value
with one lane keeps its plain name). A body without pair primitives has ``L = 1`` everywhere
(any width, odd ones included); a pair primitive (RoPE, SwiGLU) reads its operand with two lanes
(even, odd columns), so a half-width result (SwiGLU's output, RoPE's per-pair frequencies) has
one lane and a double-width packed tile (dSwiGLU's dz) four. A chunk of an L-lane tile is one
contiguous range of L * BLOCK columns, loaded flat (so it vectorises), reshaped to
[BLOCK, 2, ..., 2] and ``tl.split`` into lanes; stores ``tl.join`` and reshape back. A
rotate-half RoPE (``pairs: half``) keeps this layout and rotates per chunk instead: a chunk starts
at a multiple of L * BLOCK columns, so with a power-of-two head_dim dividing that it holds whole
heads, joined, reshaped to [heads, 2, head_dim/2] and split there (``_pairs.half_host``). Per-row
values (``load_col``, ``valid``, gathered columns, finished reductions) are scalars of the
program; reductions and gathers accumulate a [BLOCK] vector across chunks and finish after the
loop, where the per-row arithmetic on them runs. All math is fp32; offsets into a tile are
int64 (``row * W`` overflows int32 at M = 16384, W = 2**17).

Shapes are launch arguments: ``SLOTS`` (the row's width over its lanes) and each folded
finalize's ``n`` are i32 parameters, never constants, so a manifest re-sized to other static dims
(``coda verify``'s ragged case, ``coda bench --width``) runs the same cubin; the last chunk is
masked. Vector width: Triton vectorises a contiguous access only when it knows the base
pointer's alignment and the row stride's divisibility. ``triton_aot.compile_kernel`` marks every
pointer 16-byte aligned (the runtime checks it) and compiles a second cubin that also assumes
``SLOTS`` is a multiple of 16, which the runtime launches when it is (16-byte loads and stores).
"""

from __future__ import annotations

import textwrap

from coda_spec import dims as dimmod
from coda_spec.dtypes import dtype
from coda_spec.errors import Diagnostic, ItemError, SpecError, format_path
from coda_spec.finalize import finalize_op
from coda_spec.lower.triton_aot import MODULE_IMPORTS, TritonKernel
from coda_spec.primitives import registry
from coda_spec.primitives.base import PAIR
from coda_spec.primitives.host_api import LOOP, POST, PRE, WIDE, HostCtx
from coda_spec.versions import generated_banner, spec_origin

MAX_CHUNK_COLUMNS = 2048  # default BLOCK: at most this many columns of the widest tile per chunk


class HostKernelError(SpecError):
    """A host step cannot be lowered to a Triton kernel (located at the item at fault)."""

    def __str__(self) -> str:
        d = self.diagnostics[0]
        return f"{d.file}:{d.line}: {d.message}" + (f"; {d.hint}" if d.hint else "")


# -- the scheduler ---------------------------------------------------------------------------


def _operand_names(op, p) -> list:
    names = []
    for key in p.operands:
        raw = op.get(key)
        for x in raw if isinstance(raw, list) else [raw]:
            if isinstance(x, str):
                names.append(x)
    return names


def _schedule(hc: HostCtx, op, p) -> int:
    """The phase an item runs in: inside the loop if it reads or makes a per-column value (or
    accumulates one), else as soon as its per-row operands are known. Refuses an item that
    needs, inside the loop, a value only known after it."""
    vals = [hc.env[n] for n in _operand_names(op, p)]
    made = [hc.kind(r) for r in op.results if r in hc.kinds]
    if any(v.wide for v in vals) or any(k in WIDE for k in made):
        late = [(n, v) for n, v in zip(_operand_names(op, p), vals, strict=True) if v.phase == POST]
        if late:
            name, v = late[0]
            src = f"'{v.op.prim}' (line {v.op.loc.line})" if v.op is not None else "a reduction"
            raise ItemError(
                f"reads '{name}', which {src} knows only after the whole row has been read; "
                "using it per column needs a second pass over the row, which host kernels do "
                "not make",
                hint="split the body into two host steps (store the per-row value, load_col it in "
                "the second), or restate the math without it",
            )
        return LOOP
    return max([PRE] + [v.phase for v in vals])


def _section(spec, step) -> tuple:
    """(steps of the section holding host step ``step`` (the node or its name), its index there,
    'steps' or 'backward.steps')."""
    sections = [("backward.steps" if w == "backward" else w, st) for w, st in spec.sections()]
    name = step if isinstance(step, str) else step.name
    for same in (lambda s: s is step, lambda s: s.kind == "host" and s.name == name):
        for where, steps in sections:
            for i, s in enumerate(steps):
                if same(s):
                    return steps, i, where
    raise KeyError(f"no host step {name!r} in spec '{spec.name}'")


def _step_info(analysis, where: str, index: int):
    return (analysis.steps if where == "steps" else analysis.backward_steps)[index]


def _slots(step, info, prims) -> int:
    """The slot count: the narrowest per-column width, halved where a pair primitive reads its
    widest tile operand as (even, odd) lanes. Every width must be a power-of-two multiple."""
    widths = {vt.width for _, vt in info.values if vt.kind in WIDE}
    candidates = set(widths)
    kinds = dict(info.values)
    for op in step.body:
        if prims[op.prim].family != PAIR:
            continue
        tiles = [kinds[n].width for n in _operand_names(op, prims[op.prim]) if n in kinds]
        tiles = [w for w in tiles if isinstance(w, int)]
        if tiles:
            candidates.add(max(tiles) // 2)
    if not candidates:
        return 1  # no per-column value: the body runs once per row, no loop
    bad = [w for w in candidates if not isinstance(w, int)]
    if bad:
        raise ItemError(
            f"host kernels need static widths; '{bad[0]}' is a dynamic dim",
            hint="give the column dim a size under dims:",
        )
    slots = min(candidates)
    for w in widths:
        ratio = w // slots
        if w % slots or ratio & (ratio - 1):
            raise ItemError(
                f"widths {sorted(widths)} do not share a power-of-two slot ({slots} columns)",
                hint="host kernels take tiles of one width, its half and its double",
            )
    return slots


def _default_block(slots: int, max_lanes: int) -> int:
    cap = max(1, MAX_CHUNK_COLUMNS // max_lanes)
    block = 1
    while block < min(slots, cap):
        block *= 2
    return block


def _locate(file, step, op, message: str, hint: str = "") -> HostKernelError:
    loc = op.loc if op is not None else step.loc
    return HostKernelError(
        [Diagnostic(file, loc.line, loc.col, format_path(loc.path), message, hint)]
    )


def _fold_finalizes(hc: HostCtx, steps, index: int) -> list:
    """Compute, after the loop, every later finalize of this section that reads a partial of
    this step; returns their step names."""
    folds = []
    sizes = hc.checked.spec.dim_sizes()
    for s in steps[index + 1 :]:
        if s.kind != "finalize" or s.of not in hc.partials:
            continue
        if s.over is not None:  # across rows, i.e. across this kernel's programs: its own kernel
            continue
        if s.second is not None and s.second not in hc.partials:
            continue
        p = hc.info_of(s.of).partial
        n = s.n if s.n is not None else (p.group or p.width)
        try:
            n = dimmod.fold(n, sizes)
        except dimmod.DimError:
            continue  # a dynamic n: the runtime's finalize divides at the call's size
        if not isinstance(n, int) or p.kind != "rowpart" or p.group:
            continue
        x = hc.partials[s.of]
        hc.op = s
        row = finalize_op(s.op)
        if not row.needs_n and row.triton == "{x}":  # the exact per-row partial is the result
            name = x
        else:  # the op's Triton text (finalize.TABLE), on the mean when it needs n
            name = hc.fresh(hc.ident(s.result))
            if row.needs_n:
                expr = s.n if s.n is not None else (p.group or p.width)
                count = hc.dim_arg(f"n_{hc.ident(s.result)}", str(expr), f"n of {s.name}: {expr}")
                x = f"{x} / {count}.to(tl.float32)"
            x2 = None
            if s.second is not None:  # var: the second partial's mean, by the same count
                x2 = f"{hc.partials[s.second]} / {count}.to(tl.float32)"
            eps = repr(float(s.eps)) if row.needs_eps else ""
            hc.post(f"{name} = {row.triton.format(x=x, x2=x2, eps=eps)}")
        hc.post(f"tl.store({hc.out(s.result)} + row, {name})")
        folds.append(s.name)
    hc.op = None
    return folds


def host_kernel(checked, step, block: int | None = None) -> TritonKernel:
    """The Triton kernel of host step ``step`` (the IR node, or its name) of ``checked``.

    ``block``: slots per chunk (a power of two; default: up to 2048 columns of the widest tile).
    Raises :class:`HostKernelError` naming the item a host kernel cannot express."""
    spec, analysis = checked.spec, checked.analysis
    steps, index, where = _section(spec, step)
    step = steps[index]
    info = _step_info(analysis, where, index)
    prims = registry()
    file = spec.file
    prefix = f"host step '{step.name}'"
    for op in step.body:
        p = prims[op.prim]
        if p.host is None:
            why = p.no_host  # the primitive's own file says why
            raise _locate(
                file,
                step,
                op,
                f"{prefix}: primitive '{op.prim}' has no host-kernel lowering ({why})",
                "use it in a GEMM epilogue (a kernel step)",
            )
        no = p.item_refusal(op, "host", spec.dim_sizes())  # analyze refused it (a guard)
        if no is not None:
            raise _locate(file, step, op, f"{prefix}: '{op.prim}' {no.message}", no.hint)
    try:
        slots = _slots(step, info, prims)
    except ItemError as e:
        raise _locate(file, step, None, f"{prefix}: {e.message}", e.hint) from None
    widths = [vt.width for _, vt in info.values if vt.kind in WIDE]
    max_lanes = max((w // slots for w in widths), default=1)
    if block is None:
        block = _default_block(slots, max_lanes)
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, not {block}")
    hc = HostCtx(checked, step, info, slots, block)
    hc.pre("row = tl.program_id(0).to(tl.int64)")
    for op in step.body:
        p = prims[op.prim]
        hc.op = op
        try:
            hc.phase = _schedule(hc, op, p)
            p.host(hc, op)
        except ItemError as e:
            raise _locate(
                file, step, op, f"{prefix}: '{op.prim}' (line {op.loc.line}) {e.message}", e.hint
            ) from None
    folds = _fold_finalizes(hc, steps, index)
    return _kernel(hc, step, info, folds)


# -- assembly --------------------------------------------------------------------------------


def column_partial_shape(info) -> list:
    """The buffer of a host step's ``reduce_col`` partial (``info``, its TensorInfo): one row of
    fp32 per-column terms per row of the step, (rows, W), which a finalize folds over the rows
    (role ``rowred``: the (m_tiles, N) layout of a GEMM's partials, one row per tile)."""
    return [info.partial.rows, info.partial.width]


def _params(hc: HostCtx) -> list:
    """(parameter, chain tensor, role) in kernel order: tensors read, then tensors written."""
    out = [(p, t, "read") for t, p in hc.reads.items()]
    out += [(p, t, "written") for t, p in hc.writes.items()]
    return out


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _lanes_note(hc: HostCtx) -> list:
    """Docstring lines saying how many lanes each per-column value has."""
    by: dict = {}
    for name, val in hc.env.items():
        if val.wide:
            by.setdefault(len(val.lanes), []).append(name)
    if set(by) <= {1}:
        return ["Every value has one lane: a slot is one column."]
    text = "; ".join(f"{n}: {', '.join(names)}" for n, names in sorted(by.items()))
    return textwrap.wrap(f"Lanes per slot -- {text}.", 96)


def _source(hc: HostCtx, step, entry: str, params: list) -> str:
    spec = hc.checked.spec
    over = hc.info_of(step.over)
    doc = [
        f"One program per row of '{step.over}' {_shape(over.shape)}; it walks the row's SLOTS "
        "slots in chunks of BLOCK.",
        "A value of L lanes holds L adjacent columns per slot, named x_0 .. x_{L-1} (lane l of",
        "slot s is column s * L + l). All math is fp32; stores round to the tensor's dtype.",
    ]
    if len(over.shape) == 1:
        doc = [
            f"One program per element of '{step.over}' {_shape(over.shape)}: every value is "
            "per row, so there is no loop",
            "(SLOTS is 1). All math is fp32; stores round to the tensor's dtype.",
        ]
    banner = [
        *generated_banner("host step", spec_origin(spec.file, spec.digest, step.name)),
        f"\"\"\"Host step '{step.name}' of chain '{spec.name}' as one Triton kernel "
        "(coda_spec/lower/host_kernel.py).",
        "",
        *doc,
        *(_lanes_note(hc) if len(over.shape) == 2 else []),
        '"""',
        "",
        *MODULE_IMPORTS,
        "",
        "",
        "@triton.jit",
        f"def {entry}(",
    ]
    for param, tensor, role in params:
        info = hc.info_of(tensor)
        if tensor in hc.column_partials:
            shape, role = column_partial_shape(info), f"{role} (per-row terms a finalize folds)"
        else:
            shape = info.shape
        banner.append(f"    {param},  # {tensor}: {_shape(shape)} {info.dtype}, {role}")
    if len(over.shape) == 1:
        banner.append(f"    SLOTS,  # i32: 1 ({step.over} is a vector: no columns)")
    else:
        over_lanes = hc.lanes_of(over.shape[1])
        banner.append(
            f"    SLOTS,  # i32: slots per row ({step.over}'s width / {over_lanes}; {hc.slots} now)"
        )
    for param, _, comment in hc.dims:
        banner.append(f"    {param},  # i32: {comment}")
    banner += ["    BLOCK: tl.constexpr,", "):"]
    body = [f"    {x}" for x in hc.lines[PRE]]
    if hc.lines[LOOP]:
        hc.op = None
        what = f"{hc.spec_comment()} (chunks of BLOCK slots"
        body.append(f"    {what}, {hc.slots} per row)")
        body.append("    for start in range(0, SLOTS, BLOCK):")
        head = ["slot = start + tl.arange(0, BLOCK)"]
        if hc.needs_mask:
            head.append("mask = slot < SLOTS")
        body += [f"        {x}" for x in head + hc.head]
        body += [f"        {x}" for x in hc.lines[LOOP]]
    body += [f"    {x}" for x in hc.lines[POST]]
    return "\n".join(banner + body) + "\n"


def _kernel(hc: HostCtx, step, info, folds) -> TritonKernel:
    entry = f"coda_{step.name}"
    params = _params(hc)
    analysis = hc.checked.analysis
    signature = tuple((p, dtype(hc.info_of(t).dtype).triton_ptr) for p, t, _ in params)
    args = tuple({"tensor": t} for _, t, _ in params)
    over = hc.info_of(step.over).shape
    signature += (("SLOTS", "i32"),) + tuple((p, "i32") for p, _, _ in hc.dims)
    if len(over) == 1:  # a vector: no columns to walk
        args += ({"dim": "1"},)
    else:
        args += ({"extent": [step.over, 1], "div": hc.lanes_of(over[1])},)
    args += tuple({"dim": e} for _, e, _ in hc.dims)
    outputs = tuple(
        {
            "tensor": t,
            "dtype": analysis.tensor(t).dtype,
            "shape": column_partial_shape(analysis.tensor(t))
            if t in hc.column_partials
            else list(analysis.tensor(t).shape),
            "init": "empty",
            # a store over a tile this program loaded: the runtime binds that tile's buffer
            **({"over": analysis.tensor(t).over} if analysis.tensor(t).over else {}),
        }
        for t in hc.writes
    )
    return TritonKernel(
        step=step.name,
        source=_source(hc, step, entry, params),
        entry=entry,
        signature=signature,
        constexprs=(("BLOCK", hc.block),),
        aligned=("SLOTS",),
        args=args,
        outputs=outputs,
        grid=(info.rows,),
        num_warps=4,
        folds=tuple(folds),
    )
