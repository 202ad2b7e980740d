"""What steps write, for ``analyze``'s walk (``coda_spec.check.steps``): stores, finalizes.

Part of stage ``analyze``. :func:`store_item` types an epilogue's ``store`` (its target, dtype
and ``add_to``); :func:`finalize_step` types a finalize step against the partial it folds (which
ops fold which reductions, and whether ``n`` and ``eps`` apply, are ``coda_spec.finalize.TABLE``'s);
:func:`check_unused` warns of an input nothing reads. They are functions of the walker (``w``: a
``StepWalker``), whose state -- the tensors in scope, the partials still waiting for a finalize --
they read and extend.
"""

from __future__ import annotations

from coda_spec.check.facts import StepInfo, TensorInfo
from coda_spec.check.gemm import tma_rule
from coda_spec.dims import DimError, fold, show
from coda_spec.errors import Diagnostic, closest
from coda_spec.expr import ExprError, free_names, parse
from coda_spec.finalize import NEEDS_EPS, NEEDS_N, OVER, SECONDS, finalize_op, ops_folding
from coda_spec.primitives.base import FP8_DTYPES


def _words(names) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def finalize_step(w, step, scope, quiet):
    path = step.loc.path
    if _finalize_typo(w, step, scope, quiet):
        return _failed_finalize(w, step, scope)
    info = w.tensor(step.of, scope, path + ("of",), quiet)
    if info is None:
        return _failed_finalize(w, step, scope)
    if info.origin != "partial":
        w.err(
            path + ("of",),
            f"'{step.of}' is not a reduction partial",
            "finalize reads the 'as' name of a reduce_row/reduce_col",
        )
        return _failed_finalize(w, step, scope)
    w.finalized.add(step.of)
    rop, rows = info.partial.reduce, info.partial.rows
    row = finalize_op(step.op)
    if rop not in row.reads:
        w.err(
            path + ("finalize",),
            f"'{step.op}' cannot fold '{rop}' partials",
            "use " + " or ".join(ops_folding(rop)),
        )
    if row.needs_eps and step.eps is None:
        w.err(path, f"{step.op} needs eps", "e.g. eps: 1.0e-6")
    if step.eps is not None and not row.needs_eps:
        w.err(path + ("eps",), f"eps applies to {_words(NEEDS_EPS)} only, not '{step.op}'")
    if step.n is not None:
        if not row.needs_n:
            w.err(path + ("n",), f"n applies to {_words(NEEDS_N)} only")
        try:
            fold(step.n, w.sizes)
        except DimError as e:
            w.err(path + ("n",), str(e), e.hint)
    reads = (step.of,) + _second_partial(w, step, row, info, scope, quiet)
    shape = info.shape
    if step.over is not None:
        shape = _over(w, step, info)
    want = w.outputs.get(step.result)
    if want and want != "fp32":  # the outputs entry is what is wrong: point at its dtype
        w.err(
            w.out_section + (step.result,),
            f"finalize results are fp32; outputs declares '{step.result}' as {want} "
            f"(the finalize at line {step.loc.line})",
            f"declare it '{step.result}: fp32'",
        )
    # On a mismatch (reported above) record the declared dtype: the outputs check stays quiet.
    out = TensorInfo(step.result, shape, want or "fp32", "finalized", step.name, step.loc)
    if step.result not in scope:
        w.produced.append(out)
        scope[step.result] = out
    return StepInfo(step.name, "finalize", reads, (step.result,), rows)


def _second_partial(w, step, row, info, scope, quiet) -> tuple:
    """An op's second partial (var's ``sumsq:``): of its kind, from the step that wrote ``of``
    with the same layout (one variant, one tile count); () when the op takes none."""
    path, key = step.loc.path, row.second
    if not key:
        if step.second is not None:
            used = next(k for k in SECONDS if k)
            w.err(path + (used,), f"{used} applies to var only, not '{step.op}'")
        return ()
    if step.second is None:
        w.err(
            path,
            f"{step.op} needs {key}: the {key} partial beside '{step.of}'",
            f"reduce the same value with reduce_row: {key} in the step that wrote '{step.of}', "
            f"then {key}: <its name>",
        )
        return ()
    other = w.tensor(step.second, scope, path + (key,), quiet)
    if other is None:
        return ()
    if other.origin != "partial":
        w.err(path + (key,), f"'{step.second}' is not a reduction partial", f"a {key} partial")
        return ()
    w.finalized.add(step.second)
    if other.partial.reduce != key:
        w.err(path + (key,), f"'{step.second}' is a {other.partial.reduce} partial, not {key}")
    elif other.producer != info.producer or _layout(other) != _layout(info):
        w.err(
            path + (key,),
            f"'{step.second}' (step '{other.producer}') and '{step.of}' (step "
            f"'{info.producer}') are not partials of one reduction layout",
            "reduce both in one step, with the same reduce_row/reduce_col and group",
        )
    return (step.second,)


def _over(w, step, info) -> tuple:
    """The shape of a finalize ``over`` the partial's other axis: () (a per-tensor scalar)."""
    kind, group, path = info.partial.kind, info.partial.group, step.loc.path + ("over",)
    want = OVER.get(kind)
    if want is None:
        w.err(path, f"'{step.of}' cannot be folded over {step.over}")
    elif step.over != want:
        other = next(k for k, v in OVER.items() if v == step.over)
        w.err(
            path,
            f"over: {step.over} folds a {_reduction(other)} partial; '{step.of}' is a "
            f"{_reduction(kind)} partial",
            f"use over: {want}",
        )
    elif group is not None:
        w.err(
            path,
            f"'{step.of}' is grouped (group: {group}); over folds a plain partial only",
            "drop group from its reduce_row, or the over here",
        )
    return ()


def _layout(info) -> tuple:
    p = info.partial
    return p.kind, p.width, p.group, p.rows


def _reduction(kind: str) -> str:
    return {"rowpart": "reduce_row", "colpart": "reduce_col"}.get(kind, kind)


def _finalize_typo(w, step, scope, quiet) -> bool:
    """A finalize whose ``of`` misspells a pending partial: report the typo (naming the
    partial) and count that partial as finalized, so no 'never finalized' knock-on follows."""
    name = step.of
    known = (scope, w.consumed, quiet, w.unknown, w.forward)
    if any(name in names for names in known):
        return False
    pending = {t.name: t for t in w.produced if t.origin == "partial" and t.name not in w.finalized}
    close = closest(name, pending)
    if not close:
        return False
    t = pending[close[0]]
    w.err(
        step.loc.path + ("of",),
        f"unknown tensor '{name}'",
        f"did you mean '{t.name}'? (the {t.partial.reduce} partial of step '{t.producer}', "
        f"line {t.loc.line})",
    )
    w.unknown.add(name)
    w.finalized.add(t.name)
    return True


def _failed_finalize(w, step, scope):
    """Like _failed, for a finalize whose input is missing (already reported)."""
    if step.result not in scope:
        dtype = w.outputs.get(step.result, "fp32")
        info = TensorInfo(step.result, ("?",), dtype, "finalized", step.name, step.loc)
        w.produced.append(info)
        scope[step.result] = info
    return StepInfo(step.name, "finalize", (), ())


def check_unused(w, spec, outputs, warnings):
    derived_from = set()  # inputs that exist to derive other inputs are read too
    for t in spec.tensors:
        if t.derive is not None:
            try:
                derived_from |= free_names(parse(t.derive, single_expression=True))
            except ExprError:
                pass  # reported by the program checks
    stated = set()  # what equivalent_to reads: an input only it reads is named as such
    if spec.equivalent_to:
        try:
            stated = free_names(parse(spec.equivalent_to))
        except ExprError:
            pass  # reported by the program checks
    for t in spec.tensors:
        saved = spec.backward and t.name in spec.backward.save
        if t.name not in w.read and t.name not in derived_from and not saved:
            message, hint = f"input '{t.name}' is never read", ""
            if t.name in stated:
                message = f"input '{t.name}' is read only by equivalent_to, by no step"
                hint = "a step that should read it does not, or equivalent_to does not need it"
            warnings.append(
                Diagnostic(
                    w.src.file,
                    t.loc.line,
                    t.loc.col,
                    f"tensors.{t.name}",
                    message,
                    hint,
                    severity="warning",
                )
            )


def store_item(w, step, op, vt, tensors, scope, tc, dtype, writes, quiet=()):
    to, path = op.get("to"), op.loc.path
    shape = (tc.rows, vt.width) if vt.kind == "tile" else (tc.rows,)
    if vt.kind == "unknown":  # an error upstream explains it: readers stay quiet
        shape = ("?",)
    default = dtype if vt.kind in ("tile", "unknown") else "fp32"
    declared = op.get("dtype")
    want = w.outputs.get(to)
    if declared and want and declared != want:
        if declared == default:  # the store restates its natural dtype: outputs is off
            w.err(
                w.out_section + (to,),
                f"outputs declares '{to}' as {want} but step '{step.name}' stores it as "
                f"{declared} (line {op.loc.line})",
                f"declare '{to}: {declared}', or store it with dtype: {want}",
            )
        else:
            w.err(
                path + ("dtype",),
                f"store writes {declared} but outputs declares '{to}' as {want}",
                "make them agree",
            )
        declared = want  # reported here; the outputs check stays quiet
    dt = declared or want or default
    if vt.kind == "tile":
        tma_rule(w, vt.width, dt, path, f"stored tile '{to}'")
    init = op.get("add_to")
    _fp8_store(w, op, vt, dt, init)
    if init is not None and tensors.get("add_to") is not None:
        t = tensors["add_to"]
        if vt.kind != "unknown" and tuple(t.shape) == shape and t.dtype != dt:
            w.err(
                path + ("add_to",),
                f"add_to target '{init}' is {t.dtype} but the store writes {dt}",
                _add_to_fixes(op, t, dt, want),
            )
        elif vt.kind != "unknown" and tuple(t.shape) != shape:
            w.err(
                path + ("add_to",),
                f"add_to target '{init}' is {t.dtype} "
                f"{show(t.shape)} but the stored value is {dt} {show(shape)}",
            )
        scope.pop(init, None)
        w.consumed[init] = (step.name, to, "add_to", op.loc.line)
    over = _over_store(w, step, op, vt, shape, dt, scope, quiet)
    if to in scope and scope[to].producer != step.name:
        return  # duplicate already reported by the order checks
    info = TensorInfo(to, shape, dt, "stored", step.name, op.loc, add_to=init, over=over)
    w.produced.append(info)
    scope[to] = info
    writes.append(to)


def _over_store(w, step, op, vt, shape, dt, scope, quiet) -> str | None:
    """A host step's ``store ... over: t`` (``primitives/store.py``): check ``t`` and mark it
    consumed (no later item or step reads it); its name, or None (no ``over``, or refused: the
    runtime then gives the stored tensor a buffer of its own)."""
    name = op.get("over")
    if name is None or step.kind != "host":  # a GEMM epilogue's: item_refusal refuses it
        return None
    path, to = op.loc.path + ("over",), op.get("to")
    t = w.tensor(name, scope, path, quiet)
    if t is None:
        return None
    ok = True
    if op.get("add_to") is not None:
        w.err(path, "a store writes over one tensor: add_to and over together", "drop one")
        ok = False
    if t.origin in ("input", "grad_in"):
        w.err(
            path,
            f"'{name}' is a chain input: the caller's tensor, which the chain never writes",
            f"store '{to}' without over: (a buffer of its own), or over an intermediate the "
            "chain wrote",
        )
        ok = False
    elif name in w.outputs:
        w.err(
            path,
            f"'{name}' is a declared output: the chain returns it, so it cannot be written over",
            f"store '{to}' without over:, or drop '{name}' from outputs",
        )
        ok = False
    if vt.kind != "unknown" and (tuple(t.shape) != shape or t.dtype != dt):
        w.err(
            path,
            f"'{name}' is {t.dtype} {show(t.shape)} but the store writes {dt} {show(shape)}: "
            "over writes element for element, in the same shape and dtype",
            _add_to_fixes(op, t, dt, w.outputs.get(to))
            if tuple(t.shape) == shape
            else f"store '{to}' without over:, or over a tensor of shape {show(shape)}",
        )
        ok = False
    ops = step.ops
    loaded = any(o.prim == "load_tile" and o.get("load_tile") == name for o in ops[: ops.index(op)])
    if not loaded:
        w.err(
            path,
            f"host step '{step.name}' does not load_tile '{name}' before this store; every "
            "element written over must be read first, in the same program",
            f"add - {{load_tile: {name}}} before the store, or store '{to}' without over:",
        )
        ok = False
    scope.pop(name, None)
    w.consumed[name] = (step.name, to, "over", op.loc.line)
    return name if ok else None


def _fp8_store(w, op, vt, dt, init) -> None:
    """An fp8 store writes a tile (D or an aux tile of a plain kernel, or a host step's tile):
    a per-row vector store (a gathered column) is fp32 and an fp8 store cannot accumulate (the
    TMA reduce-add takes fp32/fp16/bf16). Pairing modes are ``epilogue_refusals``' business."""
    if dt not in FP8_DTYPES or vt.kind == "unknown":
        return
    path = op.loc.path
    if vt.kind != "tile":
        w.err(
            path + ("dtype",) if op.get("dtype") else path,
            f"an fp8 store writes tiles; '{op.get('to')}' is a per-row vector",
            "store it as fp32",
        )
    if init is not None:
        w.err(
            path + ("add_to",),
            f"an {dt} store cannot accumulate (add_to): the TMA reduce-add takes fp32, fp16 "
            "or bf16",
            "store the sum in bf16 or fp32, or drop add_to",
        )


def _add_to_fixes(op, target, dt, want) -> str:
    """Both ways out of an add_to (or over) dtype mismatch: retype the store, or the target."""
    to, need = op.get("to"), target.dtype
    if op.get("dtype") and want:
        store = f"change the store's dtype to {need} and declare '{to}: {need}' in outputs"
    elif op.get("dtype"):
        store = f"change the store's dtype to {need} (dtype: {need})"
    elif want:
        store = f"declare '{to}: {need}' in outputs (the store's dtype follows it)"
    else:
        store = f"store it as {need} (add dtype: {need} to the store)"
    if target.origin == "input":
        other = f"declare tensor '{target.name}' as {dt}"
    elif target.origin == "stored":
        other = f"store '{target.name}' as {dt} in step '{target.producer}'"
    else:
        other = f"make '{target.name}' {dt}"
    return f"{store}, or {other}"
